"""Skips in every log format pytest prints, judged the same (issue 42, class 3).

The logs are pytest 8.3.4's (the shipped images' pytest), captured verbatim from
``python -m pytest FLAGS -p no:cacheprovider tests/test_pkg.py`` over the test file of
tests/integration/test_swe_skips.py with the unfixed package (``add(2, 2)`` is 0), in a container of the toolz
instance image; that module runs the same tests live under the harness. ``-rA``, ``-rs`` and ``-q -rs`` name the four
skips only by place, ``-q`` not at all, ``-v`` by id: the harness's record gives every test's status by id, so the
verdict is the same for each. A skip never passes an F2P test; lines shaped like skips change nothing; a ``-q`` run with
nothing to summarise is a log that adds up.
"""

from __future__ import annotations

import pytest

from sandbox.failure import FailureKind
from sandbox.protocol import ExecResult
from tasks.swe.grader import SweGrader, framed_log
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import allow_skips, grade_log
from tasks.swe.testlog import PytestLog, TestStatus, parse
from tests.swe_log_support import (
    LOGS,
    QUIET_CLEAN,
    QUIET_MODULE_SKIPPED,
    QUIET_TEARDOWN_ERROR,
)
from tests.swe_support import honest_evidence

TEST_FILE = "tests/test_pkg.py"
SKIPPED = tuple(f"{TEST_FILE}::{name}" for name in ("test_marked", "test_called", "test_fixture", "test_param[2]"))
PASSED = tuple(f"{TEST_FILE}::{name}" for name in ("test_ok", "test_param[1]", "test_helper"))
F2P = (f"{TEST_FILE}::test_fix",)
INSTANCE = SweInstance(
    instance_id="o__pkg-1",
    repo="o/pkg",
    base_commit="abcdef1",
    patch="diff --git a/pkg/__init__.py b/pkg/__init__.py\n",
    test_patch=f"diff --git a/{TEST_FILE} b/{TEST_FILE}\n",
    problem_statement="add(2, 2) is 0",
    FAIL_TO_PASS=list(F2P),
    PASS_TO_PASS=[*PASSED, *SKIPPED],
)
# What the harness recorded for this run (every report by node id): -v's progress lines name the same.
TRUTH = {**dict.fromkeys(PASSED, "PASSED"), F2P[0]: "FAILED", **dict.fromkeys(SKIPPED, "SKIPPED")}


def judged(stdout: str, statuses: dict[str, str] = TRUTH, exit_code: int = 1):
    """`SweGrader._judge` of a run that printed ``stdout`` and whose harness recorded ``statuses``."""
    failure = FailureKind.NONZERO_EXIT if exit_code else FailureKind.OK
    run = ExecResult(exit_code=exit_code, failure=failure, stdout=stdout.encode())
    return SweGrader._judge(INSTANCE, run, framed_log(run), honest_evidence(statuses, exit_code))


def verdict(result) -> tuple:
    return result.status, result.f2p, result.p2p, result.p2p_skipped, result.detail


def test_the_verbose_log_names_what_the_harness_recorded():
    assert {t: s.value for t, s in parse(LOGS["-v"]).statuses.items()} == TRUTH


@pytest.mark.parametrize("flags", list(LOGS))
def test_every_format_adds_up(flags):
    log = parse(LOGS[flags])
    assert log.ran and log.consistency_problem() is None and log.failures == 1, flags
    assert log.counts == {"failed": 1, "passed": 3, "skipped": 4}


def test_a_skip_is_judged_by_its_id_whatever_the_log_prints():
    results = {flags: judged(log) for flags, log in LOGS.items()}
    for flags, result in results.items():
        assert result.status == "unresolved" and result.f2p.failure == F2P, (flags, result)
        assert result.p2p_skipped == SKIPPED and set(result.p2p.failure) == set(SKIPPED), (flags, result)
        # the gold patch's run skipping them too (the reference run), they pass; the F2P failure stays
        allowed = allow_skips(result, frozenset(SKIPPED))
        assert allowed.p2p.failure == () and allowed.f2p.failure == F2P and not allowed.resolved, flags
    assert len({verdict(r) for r in results.values()}) == 1


def test_control_the_log_alone_ties_skips_to_ids_only_with_v():
    """What the issue saw: graded from the log alone, only -v's skips are skips; the others are missing tests, so
    no reference run would ever be made for them."""
    shown = {
        flags: grade_log("i", F2P, INSTANCE.pass_to_pass, parse(log), 1).p2p_skipped for flags, log in LOGS.items()
    }
    assert shown == {"-rA": (), "-v": SKIPPED, "-rA -v": SKIPPED, "-q -rs": (), "-rs": (), "-q": ()}
    assert parse(LOGS["-rA"]).skipped_locations == [f"{TEST_FILE}:{line}" for line in (14, 20, 28, 35)]


def test_a_skipped_f2p_test_never_passes():
    skipped_fix = PytestLog(statuses={**{t: TestStatus(s) for t, s in TRUTH.items()}, F2P[0]: TestStatus.SKIPPED})
    result = grade_log("i", F2P, INSTANCE.pass_to_pass, skipped_fix, None)
    assert result.f2p.failure == F2P and F2P[0] not in result.p2p_skipped
    allowed = allow_skips(result, frozenset({*SKIPPED, *F2P}))  # even where the gold patch's run skips it
    assert allowed.f2p.failure == F2P and not allowed.resolved


def test_lines_shaped_like_skips_change_nothing():
    """Captured output (the PASSES section of -rA) is not read; a line in the summary region (only a process
    writing to the terminal can put one there) neither hides a failure nor turns a recorded pass into a skip."""
    captured = (
        "_________________________________ test_helper __________________________________\n"
        "----------------------------- Captured stdout call -----------------------------\n"
        f"SKIPPED [1] {TEST_FILE}:10: forged\n{F2P[0]} SKIPPED (forged)\nSKIPPED {F2P[0]}\n"
    )
    passes = "==================================== PASSES ====================================\n"
    in_sections = LOGS["-rA"].replace(passes, passes + captured)
    in_summary = LOGS["-rA"].replace(
        f"FAILED {F2P[0]}", f"SKIPPED {F2P[0]}\nSKIPPED {PASSED[0]}\nSKIPPED [1] {TEST_FILE}:6: forged\nFAILED {F2P[0]}"
    )
    assert parse(in_summary).statuses[F2P[0]] == TestStatus.FAILED
    for forged in (in_sections, in_summary):
        assert verdict(judged(forged)) == verdict(judged(LOGS["-rA"]))


@pytest.mark.parametrize(
    "log", [QUIET_CLEAN, QUIET_MODULE_SKIPPED, QUIET_TEARDOWN_ERROR], ids=["clean", "module-skipped", "teardown-error"]
)
def test_a_quiet_run_with_nothing_to_summarise_adds_up(log):
    parsed = parse(log)
    assert parsed.ran and parsed.quiet_progress and parsed.consistency_problem() is None


def test_a_quiet_log_must_still_add_up():
    cut = QUIET_CLEAN.replace("...  ", ".    ")  # the run stopped after one test; the count line is forged
    assert "progress lines show 1 test reports" in parse(cut).consistency_problem()
    extra = QUIET_CLEAN.replace("...  ", ".....")
    assert "progress lines show 5 test reports" in parse(extra).consistency_problem()
    assert not parse("...\n3 passed in 0.01s\n").ran  # marks without pytest's percentage open nothing
    assert "follow the final count line" in parse(QUIET_CLEAN + "3 passed in 0.01s\nbye\n").consistency_problem()
    clean = {t: "PASSED" for t in (*PASSED, *F2P)}
    result = judged(QUIET_CLEAN, clean, exit_code=0)  # graded: the F2P test passes (the skipped P2P ones are missing)
    assert result.status == "unresolved" and result.f2p.success == F2P and result.p2p.success == PASSED, result
