"""`gym bench report`: the figures in docs/benchmarks.md are the recorded runs' (docs/results), and a folder
that holds something else than records is one error line naming the file, never a traceback or a half-written doc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.bench import report as bench_report
from gym.commands.bench import _without_record
from tests.cli_support import gym, one_line

ROOT = Path(__file__).resolve().parents[2]


def _record(target: str = "grader", **figures: object) -> dict:
    return bench_report.record(target, ["--concurrency", "2"], figures or {"tests_per_s": 92.8}, 0.5, 1.25)


def test_the_docs_section_is_what_the_recorded_runs_hold():
    records = bench_report.read_records(ROOT / "docs" / "results")
    assert {data["target"] for data in records} >= {"sandbox", "grader", "rollout", "swe", "generate"}
    document = (ROOT / "docs" / "benchmarks.md").read_text()
    assert bench_report.current(document) == bench_report.render(records)
    for data in records:  # each figure names its machine and load
        assert data["machine"]["cores"] > 0 and set(data["load_average"]) == {"before", "after"}


def test_a_record_names_its_command_machine_and_load():
    data = _record(tests_per_s=92.8, ratio=14.39)
    assert data["command"] == "python -m gym bench grader --concurrency 2"
    assert data["load_average"] == {"before": 0.5, "after": 1.25}
    assert {"cpu", "cores", "memory_gib", "gpus"} <= set(data["machine"])
    section = bench_report.render([data])
    assert "### `python -m gym bench grader --concurrency 2`" in section
    assert "load average 0.5 before, 1.25 after" in section and "| ratio | 14.390 |" in section


def test_the_rerun_command_drops_where_the_figures_were_written():
    argv = ["--calls", "100", "--record", "docs/results", "--json=x.json", "--json", "y.json", "--acquires", "5"]
    assert _without_record(argv) == ["--calls", "100", "--acquires", "5"]


def test_update_replaces_only_the_generated_section_and_appends_one_when_missing():
    section = bench_report.render([_record()])
    document = f"# B\n\nprose before\n\n{bench_report.BEGIN}\nold figures\n{bench_report.END}\n\nprose after\n"
    done = bench_report.updated(document, section)
    assert done == f"# B\n\nprose before\n\n{section}\n\nprose after\n"
    assert bench_report.current(done) == section
    assert bench_report.updated("# B\n", section) == f"# B\n\n{section}\n"
    assert bench_report.current("# B\n") is None


def test_a_figure_that_could_break_the_table_is_escaped():
    section = bench_report.render([_record(**{"a|b": "x|y\nz", "nested": {"k": [1, 2]}})])
    assert "| a\\|b | x\\|y z |" in section and '| nested | {"k": [1, 2]} |' in section


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"not json", "not a JSON record"),
        (b"\xff\xfe", "not a JSON record"),
        (json.dumps({"target": "x"}).encode(), "missing command, date, figures, load_average, machine"),
        (json.dumps([1, 2]).encode(), "missing command"),
        (b" " * (bench_report.MAX_RECORD_BYTES + 1), "above the"),
    ],
    ids=["text", "binary", "keys", "list", "oversized"],
)
def test_a_file_that_is_no_record_is_one_error_line_naming_it(tmp_path, content, named):
    (tmp_path / "good.json").write_text(json.dumps(_record()))
    (tmp_path / "bad.json").write_bytes(content)
    with pytest.raises(bench_report.RecordError, match=named):
        bench_report.read_records(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("# B\n")
    one_line(gym("bench", "report", str(tmp_path), "--update", str(doc)), 5, "bad.json", named)
    assert doc.read_text() == "# B\n"  # nothing half-written


def test_check_fails_on_a_stale_section_and_update_fixes_it(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "grader.json").write_text(json.dumps(_record()))
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{bench_report.BEGIN}\n| stale | 1 |\n{bench_report.END}\n")
    stale = gym("bench", "report", str(results), "--check", str(doc))
    assert stale.returncode == 1 and "--update" in stale.stderr
    assert gym("bench", "report", str(results), "--update", str(doc)).returncode == 0
    assert gym("bench", "report", str(results), "--check", str(doc)).returncode == 0
    printed = gym("bench", "report", str(results))
    assert printed.returncode == 0 and bench_report.render(bench_report.read_records(results)) in printed.stdout
    one_line(gym("bench", "report", str(tmp_path / "none")), 5, "not a folder of records")


def test_a_figure_that_is_a_table_renders_as_a_table_of_its_own():
    table = {"tiny": {"gym": 2.5, "host": 1.0}, "file_rw": {"gym": 3.0}}
    section = bench_report.render([_record("peers", p50_ms=table, calls=3, versions={"gym": "x"})])
    assert "| calls | 3 |" in section and '| versions | {"gym": "x"} |' in section  # a flat object stays a cell
    assert (
        "`p50_ms`:\n\n| | gym | host |\n| --- | --- | --- |\n| tiny | 2.500 | 1.000 |\n| file_rw | 3.000 |  |"
        in section
    )
    assert "| p50_ms |" not in section
    assert not bench_report.is_table({}) and not bench_report.is_table({"a": {"b": [1]}})
