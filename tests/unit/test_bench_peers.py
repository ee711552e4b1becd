"""`bench peers`' own pieces without Docker: the output checks every tool's answer goes through, the report a driver
prints among a peer's logs, and the figures (p50, ratios, errors) built from the tools' reports (end to end:
tests/integration/test_bench_peers.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from gym.bench import peer_workloads as w
from gym.bench.peers import count, figures


def test_an_answer_is_checked_and_a_wrong_one_fails_its_workload():
    text = w.payload(200)
    assert len(text) == 200 and text.isascii() and text.count("\n") == 3
    w.check_output("stdio_1mib", text.replace("\n", "\r\n").encode(), text)  # a pty's line ends are the same text
    with pytest.raises(w.WorkloadMismatch, match="stdio_1mib: expected 200 bytes"):
        w.check_output("stdio_1mib", text[:-1] + "?", text)
    assert w.turn_command(2, 4) == "echo 4 >> session_2.log && wc -l < session_2.log"


def test_the_report_is_the_last_marked_line_whatever_the_peer_logs_around_it(capsys):
    w.emit({"samples_ms": {"tiny": [1.0]}})
    stdout = "INFO starting\n" + capsys.readouterr().out + "DEBUG stopped because object is deleted\n"
    assert w.reported(stdout) == {"samples_ms": {"tiny": [1.0]}}
    assert w.reported(json.dumps({"samples_ms": {}})) is None  # an unmarked line is not a report


def test_figures_name_each_tool_measured_or_its_error():
    reports = {
        "gym": {"setup_ms": 200.04, "samples_ms": {"tiny": [2.0, 4.0, 3.0], "file_rw": [1.0]}, "errors": {}},
        "swe-rex": {"setup_ms": 2000.0, "samples_ms": {"tiny": [30.0]}, "errors": {"file_rw": "WorkloadMismatch: x"}},
        "llm-sandbox": {"samples_ms": {}, "errors": {"setup": "ImagePullError: no such image"}, "version": "0.3.46"},
    }
    got = figures(reports, argparse.Namespace(iterations=3, sessions=1), leaked=0)
    assert got["p50_ms"] == {
        "tiny": {"gym": 3.0, "swe-rex": 30.0},
        "stdio_1mib": {},
        "file_rw": {"gym": 1.0},
        "session_50": {},
    }
    assert got["ratio_vs_gym"] == {"tiny": {"gym": 1.0, "swe-rex": 10.0}, "file_rw": {"gym": 1.0}}
    assert got["p95_ms"]["tiny"] == {"gym": 4.0, "swe-rex": 30.0}
    assert got["setup_ms"] == {"gym": 200.0, "swe-rex": 2000.0}
    assert got["errors"] == {
        "swe-rex": {"file_rw": "WorkloadMismatch: x"},
        "llm-sandbox": {"setup": "ImagePullError: no such image"},
    }
    assert got["versions"] == {"llm-sandbox": "0.3.46"}


def test_a_ratio_far_under_one_keeps_its_precision():
    """A host subprocess at about 1/45 of the gym's time: three decimals made 0.02245 read 0.022 (2% off, past the end
    to end test's 1%, on a loaded machine); four significant figures keep every ratio within 0.05%."""
    reports = {
        "gym": {"samples_ms": {"tiny": [5.379]}, "errors": {}},
        "host": {"samples_ms": {"tiny": [0.12076]}, "errors": {}},
        "swe-rex": {"samples_ms": {"tiny": [1234.5]}, "errors": {}},
    }
    got = figures(reports, argparse.Namespace(iterations=1, sessions=1), leaked=0)
    row = got["p50_ms"]["tiny"]
    for tool in reports:
        assert got["ratio_vs_gym"]["tiny"][tool] == pytest.approx(row[tool] / row["gym"], rel=5e-4)
    assert got["ratio_vs_gym"]["tiny"]["host"] == 0.02249


def test_counts_are_integers_of_at_least_their_minimum():
    assert count(1)("3") == 3 and count(0)("0") == 0
    for text in ("0", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
            count(1)(text)
