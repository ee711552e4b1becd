"""Our log reading and resolved decision against the official ``swebench`` package (issue 44 item 5).

swebench 5.0.2 is installed from the package registry into a cached venv (tests/install_support.cached_venv) and
run there as a subprocess, JSON in and out: its pytest log parser (``log_parsers.python.parse_log_pytest``) and its
resolution (``grading.get_eval_tests_report``, ``get_resolution_status``). Ours on the same text:
``tasks.swe.testlog.parse`` and ``tasks.swe.resolution.grade_log``. The logs are pytest's own, honest: two runs
of real pytest over a test file with every outcome (``-rA`` and ``-rA -v``), a hand-written ``-rA`` log of a
larger suite, and the logs our unit tests already judge (tests/unit/test_swe_testlog.py, test_swe_skips.py).

Compared: each test's status, and for many F2P/P2P lists per log (every test alone as F2P and as P2P, the ids
cut as SWE-bench's data holds them, whole passing and partial sets) each test's success and the resolution
(FULL, PARTIAL, NO). Where we differ on purpose the difference is named (`RULES`), and the rules each log shows
are listed (`EXPECTED`); a difference no rule explains fails the test, as does a rule a log no longer shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tasks.swe.resolution import allow_skips, grade_log, status_of
from tasks.swe.testlog import TestStatus, parse, verbose_line
from tests.install_support import cached_venv
from tests.swe_log_support import LOGS as SKIP_LOGS
from tests.swe_log_support import QUIET_CLEAN, QUIET_MODULE_SKIPPED, QUIET_TEARDOWN_ERROR, RA_LOG, VERBOSE_LOG

pytestmark = pytest.mark.slow  # the first run installs swebench (~1 min); then ~5 s

SWEBENCH = "5.0.2"

# Run by the venv's python: a list of {"log" or "statuses", "cases": [{"f2p", "p2p"}]} on stdin, the same shape back
# with the status map per log (swebench's parse of "log", or "statuses" as given) and the report and resolution per case.
DRIVER = """
import json, sys
import swebench
from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS
from swebench.harness.grading import get_eval_tests_report, get_resolution_status
from swebench.harness.log_parsers.python import parse_log_pytest

out = {"version": swebench.__version__, "logs": []}
for item in json.load(sys.stdin):
    status_map = item["statuses"] if "statuses" in item else parse_log_pytest(item["log"], None)  # reads no spec
    cases = []
    for case in item["cases"]:
        report = get_eval_tests_report(status_map, {FAIL_TO_PASS: case["f2p"], PASS_TO_PASS: case["p2p"]})
        cases.append({"f2p": report[FAIL_TO_PASS], "p2p": report[PASS_TO_PASS],
                      "resolution": get_resolution_status(report)})
    out["logs"].append({"statuses": status_map, "cases": cases})
print(json.dumps(out))
"""

# A test file with every outcome, parametrized ids with spaces, " - ", brackets and an escaped tab.
TEST_FILE = """\
import pytest


def test_pass():
    pass


def test_fail():
    assert 1 == 2


@pytest.mark.skip(reason="not on this platform")
def test_skip_marked():
    pass


def test_skip_called():
    pytest.skip("needs a network")


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert 0


@pytest.mark.xfail(reason="fixed upstream")
def test_xpass():
    pass


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup")


def test_setup_error(broken_setup):
    pass


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")


def test_teardown_error(broken_teardown):
    pass


def test_fails_and_teardown_errors(broken_teardown):
    assert False


@pytest.mark.parametrize("text", ["a b", "x - y", "[nested]", "tab\\there", "plain", "one two three"])
def test_param(text):
    assert text != "plain"


@pytest.mark.parametrize("n", [1, 2])
class TestGroup:
    def test_method(self, n):
        assert n

    @pytest.mark.parametrize("word", ["lower case", "UPPER"])
    def test_words(self, n, word):
        assert word
"""

# pytest 8's -rA over a suite: classes, nested parametrization, ids with spaces, brackets and " - ", a module skipped
# by location, a teardown error after a pass, every outcome.
HANDWRITTEN = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.5.0
rootdir: /workspace/repo
configfile: setup.cfg
collected 16 items

tests/test_format.py ....F.                                              [ 37%]
tests/test_parse.py ..sxX.E..                                            [ 93%]
tests/test_units.py F                                                    [100%]

==================================== ERRORS ====================================
____________ ERROR at teardown of TestParse.test_roundtrip[utf-8] _____________

    @pytest.fixture
    def tmpfile(tmp_path):
        path = tmp_path / "data.txt"
        path.write_text("x")
        yield path
>       os.remove(path.with_suffix(".bak"))
E       FileNotFoundError: [Errno 2] No such file or directory: '/tmp/pytest-0/data.bak'

tests/conftest.py:12: FileNotFoundError
=================================== FAILURES ===================================
_________________________ test_pad[left - 10 chars] ___________________________

    def test_pad(case):
>       assert pad(*case.args) == case.expected
E       AssertionError: assert '  x' == ' x'

tests/test_format.py:41: AssertionError
___________________________ test_convert[m-km] ________________________________

    def test_convert(src, dst):
>       assert convert(1, src, dst) == 0.001
E       assert 1000.0 == 0.001

tests/test_units.py:12: AssertionError
==================================== PASSES ====================================
__________________________ test_width[[1, 2]-3] _______________________________
----------------------------- Captured stdout call -----------------------------
width computed
=========================== short test summary info ============================
PASSED tests/test_format.py::test_width[[1, 2]-3]
PASSED tests/test_format.py::test_width[()-0]
PASSED tests/test_format.py::test_pad[right]
PASSED tests/test_format.py::test_pad[None]
PASSED tests/test_format.py::test_center[a b c]
PASSED tests/test_parse.py::TestParse::test_plain
PASSED tests/test_parse.py::TestParse::test_quoted["x y"]
PASSED tests/test_parse.py::TestParse::test_roundtrip[utf-8]
PASSED tests/test_parse.py::TestParse::test_roundtrip[latin-1]
PASSED tests/test_parse.py::test_empty
SKIPPED [1] tests/test_parse.py:30: requires lxml
XFAIL tests/test_parse.py::test_nested - recursion limit
XPASS tests/test_parse.py::test_unicode known issue
ERROR tests/test_parse.py::TestParse::test_roundtrip[utf-8] - FileNotFoundError: [Errno 2] No such file or d...
FAILED tests/test_format.py::test_pad[left - 10 chars] - AssertionError: assert '  x' == ' x'
FAILED tests/test_units.py::test_convert[m-km] - assert 1000.0 == 0.001
======== 2 failed, 10 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error in 0.42s ========
"""


def live_logs(tmp_path: Path) -> dict[str, str]:
    """What real pytest prints over TEST_FILE under -rA and -rA -v (plugins off: only pytest's own output)."""
    (tmp_path / "test_outcomes.py").write_text(TEST_FILE)
    logs = {}
    for name, flags in (("live -rA", ["-rA"]), ("live -rA -v", ["-rA", "-v"])):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *flags, "-p", "no:cacheprovider", "test_outcomes.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "100"},
            check=False,
        )
        assert proc.returncode == 1 and "short test summary info" in proc.stdout, proc.stdout[-2000:] + proc.stderr
        logs[name] = proc.stdout
    return logs


def all_logs(tmp_path: Path) -> dict[str, str]:
    logs = live_logs(tmp_path)
    logs["handwritten -rA"] = HANDWRITTEN
    logs["unit RA_LOG"] = RA_LOG
    logs["unit VERBOSE_LOG"] = VERBOSE_LOG
    logs |= {f"unit skips {flags}": text for flags, text in SKIP_LOGS.items()}
    logs |= {"unit quiet clean": QUIET_CLEAN, "unit quiet module skipped": QUIET_MODULE_SKIPPED}
    logs["unit quiet teardown error"] = QUIET_TEARDOWN_ERROR
    # The live -rA run killed just before pytest's last line: no evidence the session ended (see "cut-log").
    logs["live -rA, cut before its final line"] = logs["live -rA"].rstrip("\n").rsplit("\n", 1)[0] + "\n"
    return logs


def cut(test_id: str) -> str:
    """The id as SWE-bench's parser keeps it: a FAILED line's " - " made a space, then split at whitespace."""
    return test_id.replace(" - ", " ").split()[0]


def cases_of(statuses: dict[str, TestStatus]) -> list[dict[str, list[str]]]:
    """F2P/P2P lists over one log's tests: each alone as F2P and as P2P (a spaced id also as SWE-bench's data
    holds it, cut), the passing tests as F2P and P2P, and a partial set (one failing F2P test beside passing ones)."""
    ids = sorted(statuses)
    passing = [t for t in ids if statuses[t] == TestStatus.PASSED]
    failing = [t for t in ids if statuses[t] in (TestStatus.FAILED, TestStatus.ERROR)]
    listed = ids + sorted({cut(t) for t in ids} - set(ids))
    cases = [{"f2p": [t], "p2p": []} for t in listed] + [{"f2p": [], "p2p": [t]} for t in listed]
    cases.append({"f2p": passing[: len(passing) // 2], "p2p": passing[len(passing) // 2 :]})
    if failing and len(passing) > 1:
        cases.append({"f2p": [passing[0], failing[0]], "p2p": passing[1:]})
    return cases


def ours_resolution(result) -> str:
    """Our decision in the harness's words (``invalid``: a log that does not add up, never resolved)."""
    if result.status == "invalid":
        return "invalid"
    if result.resolved:
        return "RESOLVED_FULL"
    partial = 0 < len(result.f2p.success) < result.f2p.total and not result.p2p.failure
    return "RESOLVED_PARTIAL" if partial else "RESOLVED_NO"


# Where we differ from swebench on purpose. Each rule says which side reads what, and why ours does.
RULES = {
    # SWE-bench grades XFAIL as PASSED ("PASSED and XFAIL grade identically"); for us XFAIL is never a pass, so code
    # that calls pytest.xfail where a test would fail cannot turn that failure into a pass (resolution.py).
    "xfail": "an XFAIL test passes there, fails here",
    # swebench's TestStatus has no XPASS: the line is not read and the test is missing (a failure). A test that was
    # expected to fail and passes has not regressed: we pass it as P2P (never as F2P: it is not plainly PASSED).
    "xpass": "an XPASS test is missing there, a P2P pass here",
    # SWE-bench counts a skipped P2P test as maintained. Ours fails it unless the gold patch's run skips it too (the
    # grader's reference run, allow_skips): code that skips a test where it would fail must not pass it.
    # swebench splits a line at whitespace: `f[a b]` is stored as `f[a`. We keep the whole id (split_id); an id
    # listed cut, as SWE-bench's data holds 676 of Verified's, is matched by both (resolution.status_of).
    "id-with-space": "a whole id with whitespace is not found there",
    # swebench reads summary-shaped lines only; we also read -v progress lines (`id STATUS [ NN%]`), the only
    # place a -v run without -rA names its passing tests (our grader takes every status from the harness's record).
    "verbose-line": "a test named only by a -v progress line is missing there",
    # One test, two reports (failed, then errored in teardown): swebench keeps the last summary line (FAILED), we
    # keep the worst (ERROR), so a forged PASSED line can never hide a failure. The decision is the same.
    "worst-wins": "ERROR here, FAILED there: both a failure",
    # Not seen in a log (pytest's -rA names a skip by its place only: neither side ties it to an id), but our grader
    # takes statuses from the harness's record, by id: fed that record, swebench maintains the skip, we do not.
    "skip-p2p": "a skipped P2P test passes there, here only where the gold run skips it",
    # A log that does not add up (here: killed before pytest's final line) is invalid for us, never resolved;
    # swebench grades whatever lines it finds (its exit-code check sits in get_logs_eval, outside this comparison).
    "cut-log": "a log that does not add up: graded there, invalid here",
}

# The rules each log shows; every other log agrees with swebench on every status and decision.
RECORD = "live -rA -v, as the harness's record holds it"
EXPECTED = {
    "live -rA": {"xfail", "xpass", "id-with-space", "worst-wins"},
    "live -rA -v": {"xfail", "xpass", "id-with-space", "worst-wins", "verbose-line"},
    # swebench given the statuses by whole id: the spaced ids and the -v lines agree, the skips show
    RECORD: {"xfail", "xpass", "skip-p2p"},
    "handwritten -rA": {"xfail", "xpass", "id-with-space"},
    "unit RA_LOG": {"xfail", "xpass", "id-with-space"},
    "unit VERBOSE_LOG": {"id-with-space", "verbose-line"},
    "unit skips -v": {"verbose-line"},
    "unit skips -rA -v": {"verbose-line"},
    # its lines are the live -rA run's, so its statuses differ as that run's do
    "live -rA, cut before its final line": {"cut-log", "xpass", "id-with-space", "worst-wins"},
}


def status_rule(test_id: str, ours: TestStatus | None, theirs: str | None, verbose: set[str]) -> str | None:
    """The rule that explains one test's two statuses, "" when they agree, None when nothing does."""
    if ours is not None and ours.value == theirs:
        return ""
    if ours == TestStatus.XPASS and theirs is None:
        return "xpass"
    if ours is not None and theirs is None and any(c.isspace() for c in test_id):
        return "id-with-space"
    if ours is not None and theirs is None and test_id in verbose:
        return "verbose-line"
    if ours == TestStatus.ERROR and theirs == TestStatus.FAILED.value:
        return "worst-wins"
    return None


def decision_rule(test_id: str, ours: TestStatus | None, as_p2p: bool, verbose: set[str]) -> str | None:
    """The rule that explains a test's success differing (swebench's own status is found by ``status_rule``)."""
    if ours == TestStatus.XFAIL:
        return "xfail"
    if ours == TestStatus.XPASS and as_p2p:
        return "xpass"
    if ours == TestStatus.SKIPPED and as_p2p:
        return "skip-p2p"
    if ours is not None and any(c.isspace() for c in test_id):
        return "id-with-space"
    if ours is not None and test_id in verbose:
        return "verbose-line"
    return None


class Tally(Counter):
    """How many statuses, test decisions and resolutions agreed, and how often each rule explained a difference."""

    def differ(self, rule: str, seen: set[str]) -> None:
        self[rule] += 1
        seen.add(rule)


def swebench_verdicts(items: list[dict]) -> dict:
    try:
        python = cached_venv(f"swebench-{SWEBENCH}", (f"swebench=={SWEBENCH}",))
    except pytest.skip.Exception as err:  # cached_venv skips when pip cannot install it: say what is missing
        pytest.skip(f"swebench=={SWEBENCH} cannot be installed here (no package registry?): {err}")
    proc = subprocess.run(
        [str(python), "-c", DRIVER], input=json.dumps(items), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["version"] == SWEBENCH
    return out


def compare_log(name: str, text: str, theirs: dict, cases: list[dict], tally: Tally) -> set[str]:
    """Every status and decision of one log, ours against swebench's; the rules it shows."""
    log = parse(text)
    exit_code = 1 if log.failures else 0  # an honest run's exit status
    verbose = {found[0] for line in text.splitlines() if (found := verbose_line(line))}
    seen: set[str] = set()
    for test_id in sorted(set(log.statuses) | set(theirs["statuses"])):
        if test_id not in log.statuses and any(cut(t) == test_id for t in log.statuses):
            continue  # swebench's cut key of a spaced id: counted under the whole id
        rule = status_rule(test_id, log.statuses.get(test_id), theirs["statuses"].get(test_id), verbose)
        assert rule is not None, (name, test_id, log.statuses.get(test_id), theirs["statuses"].get(test_id))
        tally["statuses agreed"] += rule == ""
        if rule:
            tally.differ(rule, seen)
    for case, verdict in zip(cases, theirs["cases"]):
        ours = grade_log("i", case["f2p"], case["p2p"], log, exit_code)
        if ours.status == "invalid":
            assert log.consistency_problem() is not None, name
            tally.differ("cut-log", seen)
            continue
        explained = False
        for kind, our_group in (("f2p", ours.f2p), ("p2p", ours.p2p)):
            for test_id in case[kind]:
                if (test_id in our_group.success) == (test_id in verdict[kind]["success"]):
                    tally["decisions agreed"] += 1
                    continue
                rule = decision_rule(test_id, status_of(test_id, log.statuses), kind == "p2p", verbose)
                assert rule is not None, (name, kind, test_id, status_of(test_id, log.statuses), verdict)
                if rule == "skip-p2p":  # where the gold patch's run skips it too, ours passes it as well
                    assert test_id in allow_skips(ours, frozenset({test_id})).p2p.success
                tally.differ(rule, seen)
                explained = True
        if ours_resolution(ours) == verdict["resolution"]:
            tally["resolutions agreed"] += 1
        else:
            assert explained, (name, case, ours_resolution(ours), verdict["resolution"])
    return seen


def test_our_log_reading_and_decision_agree_with_swebench(tmp_path):
    logs = all_logs(tmp_path)
    cases = {name: cases_of(parse(text).statuses) for name, text in logs.items()}
    items = [{"log": text, "cases": cases[name]} for name, text in logs.items()]
    # The record of the -v run (its -v lines name every test's status, tests/unit/test_swe_skips.py): swebench's
    # grading fed it by id. Less XPASS: swebench's parsers never give one, and its grading drops such a test unread.
    logs[RECORD] = logs["live -rA -v"]
    record = {t: s.value for t, s in parse(logs[RECORD]).statuses.items() if s != TestStatus.XPASS}
    cases[RECORD] = cases["live -rA -v"]
    items.append({"statuses": record, "cases": cases[RECORD]})
    out = swebench_verdicts(items)
    tally = Tally()
    shown = {}
    for (name, text), theirs in zip(logs.items(), out["logs"]):
        shown[name] = compare_log(name, text, theirs, cases[name], tally)
    print(f"\nswebench {SWEBENCH} vs ours over {len(logs)} logs: {dict(tally)}")
    assert {name: rules for name, rules in shown.items() if rules} == EXPECTED
    assert tally["statuses agreed"] >= 80 and tally["decisions agreed"] >= 300 and tally["resolutions agreed"] >= 200


def test_the_comparison_can_fail():
    """A disagreement no rule explains is found: ours PASSED where swebench read FAILED, a decision on a plain id."""
    assert status_rule("t.py::f", TestStatus.PASSED, "FAILED", set()) is None
    assert status_rule("t.py::f", TestStatus.PASSED, None, set()) is None
    assert decision_rule("t.py::f", TestStatus.PASSED, False, set()) is None
    assert decision_rule("t.py::f", TestStatus.SKIPPED, False, set()) is None  # a skip is no F2P pass anywhere
