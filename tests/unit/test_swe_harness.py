"""The host's reading of the harness's record (tasks/swe/harness.py): a record is believed only when every line
verifies under the run's key in order and it ends, and a run is believed only when its exit status and its log
agree with what the harness saw."""

from __future__ import annotations

import pytest

from tasks.swe import testlog
from tasks.swe.harness import RecordError, environment, judge, parse_record, status_of
from tasks.swe.instance import parse_row
from tasks.swe.testlog import TestStatus
from tests.swe_support import honest_evidence, row, signed_record

KEY = b"k" * 32
START = [["start", 7, "8.3.4"], ["configure", "/workspace/repo", "/workspace/repo"]]


def reports(test_id: str, call: str = "passed", xfail: bool = False) -> list[list]:
    return [
        ["report", test_id, "setup", "passed", False],
        ["report", test_id, "call", call, xfail],
        ["report", test_id, "teardown", "passed", False],
    ]


HONEST = START + reports("t.py::ok") + reports("t.py::bad", "failed") + [["finish", 1, 2, 1], ["end", 1]]


def log_of(statuses: dict[str, str], failed: int, passed: int) -> testlog.PytestLog:
    """A ``-rA`` log with these summary lines that adds up (the log's own checks pass)."""
    counts = ", ".join(f"{n} {word}" for n, word in ((failed, "failed"), (passed, "passed")) if n)
    text = (
        f"=== test session starts ===\ncollected {failed + passed} items\n\nt.py {'F' * failed}{'.' * passed} [100%]\n"
        "=== short test summary info ===\n"
        + "".join(f"{s} {t}\n" for t, s in statuses.items())
        + f"=== {counts} in 0.1s ===\n"
    )
    parsed = testlog.parse(text)
    assert parsed.consistency_problem() is None, parsed.consistency_problem()
    return parsed


def test_an_honest_record_verifies_and_gives_the_statuses():
    record = parse_record(signed_record(KEY, HONEST), KEY)
    assert record.statuses == {"t.py::ok": TestStatus.PASSED, "t.py::bad": TestStatus.FAILED}
    assert record.end == 1 and record.finish == (1, 2, 1) and record.tampering == [] and record.failures() == 1
    problem, _ = judge(
        signed_record(KEY, HONEST), "", KEY, log_of({"t.py::ok": "PASSED", "t.py::bad": "FAILED"}, 1, 1), 1
    )
    assert problem is None


def altered(raw: bytes, how: str) -> bytes:
    lines = raw.split(b"\n")[:-1]
    if how == "forged line":
        lines[3] = lines[3].replace(b'"failed"', b'"passed"')
    elif how == "dropped line":
        del lines[4]
    elif how == "repeated line":
        lines.insert(4, lines[3])
    elif how == "reordered":
        lines[3], lines[4] = lines[4], lines[3]
    elif how == "cut mid-line":
        return b"\n".join(lines)[:-10]
    elif how == "line after the end":
        return raw + signed_record(KEY, [["report", "t.py::x", "call", "passed", False]] * 10).split(b"\n")[9] + b"\n"
    elif how == "not json":
        return raw + b"garbage\n"
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize(
    "how",
    ["forged line", "dropped line", "repeated line", "reordered", "cut mid-line", "line after the end", "not json"],
)
def test_a_record_altered_in_any_way_is_refused(how):
    raw = signed_record(KEY, START + reports("t.py::bad", "failed") + [["finish", 1, 1, 1], ["end", 1]])
    with pytest.raises(RecordError):
        parse_record(altered(raw, how), KEY)
    problem, _ = judge(altered(raw, how), "", KEY, log_of({"t.py::bad": "FAILED"}, 1, 0), 1)
    assert problem is not None and "record" in problem


def test_a_record_under_another_key_or_without_its_start_is_refused():
    with pytest.raises(RecordError, match="not written by the harness"):
        parse_record(signed_record(b"x" * 32, HONEST), KEY)
    with pytest.raises(RecordError, match="'configure'"):
        parse_record(signed_record(KEY, HONEST[1:]), KEY)


@pytest.mark.parametrize(
    ("when", "outcome", "xfail", "status"),
    [
        ("call", "passed", False, TestStatus.PASSED),
        ("setup", "passed", False, None),
        ("call", "failed", False, TestStatus.FAILED),
        ("setup", "failed", False, TestStatus.ERROR),
        ("teardown", "failed", False, TestStatus.ERROR),
        ("setup", "skipped", False, TestStatus.SKIPPED),
        ("call", "skipped", True, TestStatus.XFAIL),
        ("call", "passed", True, TestStatus.XPASS),
    ],
)
def test_report_statuses_are_the_terminals(when, outcome, xfail, status):
    assert status_of(when, outcome, xfail) == status


def test_the_worst_status_of_a_test_wins():
    lines = START + reports("t.py::a") + [["report", "t.py::a", "teardown", "failed", False], ["end", 1]]
    assert parse_record(signed_record(KEY, lines), KEY).statuses == {"t.py::a": TestStatus.ERROR}


LOG_OK = {"t.py::ok": "PASSED", "t.py::bad": "FAILED"}


@pytest.mark.parametrize(
    ("lines", "log", "exit_code", "why"),
    [
        (START + reports("t.py::ok"), LOG_OK, 0, "no end of the session"),
        (HONEST, LOG_OK, 0, "ended the session with exit status 1 but the process exited 0"),
        (HONEST[:-2] + [["finish", 0, 2, 0], ["end", 0]], LOG_OK, 0, "exit status is 0 but the harness recorded 1"),
        (HONEST, {"t.py::ok": "PASSED", "t.py::bad": "PASSED"}, 1, "t.py::bad PASSED (pytest reported FAILED)"),
        (HONEST, {**LOG_OK, "t.py::ghost": "PASSED"}, 1, "t.py::ghost PASSED (pytest reported no such test)"),
        (
            HONEST[:-2] + [["hook", "pytest_runtest_makereport", "/workspace/repo/pkg/x.py", "p"]] + HONEST[-2:],
            LOG_OK,
            1,
            "interfered with pytest: hook pytest_runtest_makereport /workspace/repo/pkg/x.py",
        ),
        (
            HONEST[:-2] + [["patched", "_pytest.python.Function.runtest", "/workspace/repo/pkg/y.py"]] + HONEST[-2:],
            LOG_OK,
            1,
            "patched _pytest.python.Function.runtest",
        ),
        (HONEST[:-2] + [["changed", "collection", "t.py"]] + HONEST[-2:], LOG_OK, 1, "changed collection t.py"),
    ],
)
def test_a_run_that_disagrees_with_its_record_is_tampered(lines, log, exit_code, why):
    passed = sum(s == "PASSED" for s in log.values())
    problem, _ = judge(signed_record(KEY, lines), "", KEY, log_of(log, len(log) - passed, passed), exit_code)
    assert problem is not None and why in problem, problem


def test_a_missing_record_is_tampered():
    problem, record = judge(None, "no record to read (nonzero_exit, exit 3)", KEY, log_of(LOG_OK, 1, 1), 1)
    assert "record of the run is missing (no record to read" in problem and record.statuses == {}


def test_a_log_worse_than_the_record_is_no_forgery():
    """The log may show less than the harness saw (a skip reported only by its location, a test it never names):
    the record's statuses are the ones graded."""
    lines = START + reports("t.py::ok") + reports("t.py::sk", "skipped") + [["finish", 0, 2, 0], ["end", 0]]
    problem, record = judge(signed_record(KEY, lines), "", KEY, log_of({"t.py::ok": "PASSED"}, 0, 1), 0)
    assert problem is None and record.statuses["t.py::sk"] == TestStatus.SKIPPED


def test_the_test_fixture_of_honest_evidence_verifies():
    evidence = honest_evidence({"a::b": "PASSED", "a::c": "FAILED"}, 1)
    record = parse_record(evidence.record, evidence.key)
    assert record.statuses == {"a::b": TestStatus.PASSED, "a::c": TestStatus.FAILED} and record.end == 1


def test_the_plugin_loads_first_beside_the_instances_plugins():
    instance = parse_row(row(plugins='["xdist.plugin"]'))
    env = environment(instance, {"PYTEST_ADDOPTS": "-p xdist.plugin", "PYTHONSAFEPATH": "1"})
    assert env["PYTEST_ADDOPTS"] == "-p _gym_harness -p xdist.plugin" and env["PYTHONSAFEPATH"] == "1"
    assert env["PYTHONPATH"] == "/tmp/gym-harness"
