"""The SWE grader's reference run: a skipped P2P test passes only where the gold patch's run skips it too.

`SweGrader.grade` with a pool that hands out nothing and `_run` replaced by canned test logs (the real `_judge`
reads them): the grading of the reference run itself is tested in the real sandbox
(tests/integration/test_attacks_candidate_failures.py); here, what each reference outcome does to a candidate's result.
"""

from __future__ import annotations

import contextlib

import trio

from sandbox.failure import FailureKind
from sandbox.protocol import ExecResult
from tasks.swe import testlog
from tasks.swe.grader import SweGrader, framed_log
from tasks.swe.instance import SweInstance
from tests.swe_support import honest_evidence

TEST_PATCH = "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x\n+y\n"
GOLD = "diff --git a/pkg.py b/pkg.py\n--- a/pkg.py\n+++ b/pkg.py\n@@ -1 +1 @@\n-a\n+gold\n"
CANDIDATE = "diff --git a/pkg.py b/pkg.py\n--- a/pkg.py\n+++ b/pkg.py\n@@ -1 +1 @@\n-a\n+mine\n"
INSTANCE = SweInstance(
    instance_id="o__r-1",
    repo="o/r",
    base_commit="abcdef1",
    patch=GOLD,
    test_patch=TEST_PATCH,
    problem_statement="p",
    FAIL_TO_PASS=["t.py::test_fix"],
    PASS_TO_PASS=["t.py::test_old", "t.py::test_win"],
)


def run_of(statuses: dict[str, str], failure: FailureKind | None = None) -> ExecResult:
    """A ``-rA -v`` pytest run with these statuses (PASSED, FAILED, SKIPPED), as the runner returns it."""
    n = len(statuses)
    progress = "".join(f"{t} {s}   [{100 * (i + 1) // n:3d}%]\n" for i, (t, s) in enumerate(statuses.items()))
    summary = "".join(f"{s} {t}\n" for t, s in statuses.items() if s in ("PASSED", "FAILED"))
    counts = [f"{sum(s == k for s in statuses.values())} {k.lower()}" for k in ("FAILED", "PASSED", "SKIPPED")]
    failed = any(s == "FAILED" for s in statuses.values())
    stdout = (
        "============================= test session starts ==============================\n"
        f"collecting ... collected {n} items\n\n{progress}\n"
        "=========================== short test summary info ============================\n"
        f"{summary}========== {', '.join(c for c in counts if not c.startswith('0'))} in 0.10s ==========\n"
    )
    failure = failure or (FailureKind.NONZERO_EXIT if failed else FailureKind.OK)
    return ExecResult(exit_code=int(failed), failure=failure, stdout=stdout.encode())


FIXED_WIN_SKIPPED = run_of({"t.py::test_fix": "PASSED", "t.py::test_old": "PASSED", "t.py::test_win": "SKIPPED"})
FIXED_WIN_PASSED = run_of({"t.py::test_fix": "PASSED", "t.py::test_old": "PASSED", "t.py::test_win": "PASSED"})
UNFIXED_WIN_SKIPPED = run_of({"t.py::test_fix": "FAILED", "t.py::test_old": "PASSED", "t.py::test_win": "SKIPPED"})
NO_WIN = run_of({"t.py::test_fix": "PASSED", "t.py::test_old": "PASSED"})  # the reference never ran test_win


class Pool:
    """Hands out a placeholder workspace and counts the reference runs' acquisitions."""

    def __init__(self) -> None:
        self.owners: list[str] = []

    @contextlib.asynccontextmanager
    async def acquire(self, owner: str):
        self.owners.append(owner)
        yield object()

    @property
    def references(self) -> int:
        return sum(owner.startswith("swe-grade-reference") for owner in self.owners)


def grader_with(candidate: ExecResult, reference: ExecResult) -> SweGrader:
    grader = SweGrader()

    async def run(_ws, instance, diff):
        await trio.sleep(0.01)  # a checkpoint: concurrent gradings interleave here
        result = reference if "+gold" in diff else candidate
        assert "+gold" in diff or "+mine" in diff, diff  # the reference applies the gold patch
        text = framed_log(result)
        evidence = honest_evidence(testlog.parse(text).statuses, result.exit_code)  # the harness saw the same
        return grader._judge(instance, result, text, evidence), text

    grader._run = run
    return grader


def grade(grader: SweGrader, pool: Pool, times: int = 1):
    async def main():
        return [await grader.grade(pool, INSTANCE, CANDIDATE) for _ in range(times)]

    return trio.run(main)


def test_a_skip_the_gold_patchs_run_makes_too_passes_and_one_it_does_not_fails():
    pool = Pool()
    [kept] = grade(grader_with(FIXED_WIN_SKIPPED, reference=FIXED_WIN_SKIPPED), pool)
    assert kept.resolved and kept.p2p.failure == () and kept.p2p_skipped == () and pool.references == 1
    [regression] = grade(grader_with(FIXED_WIN_SKIPPED, reference=FIXED_WIN_PASSED), Pool())
    assert regression.status == "unresolved" and regression.reward == 0.0
    assert regression.p2p.failure == ("t.py::test_win",) and "test_win" in regression.detail
    assert regression.test_run == "ok"


def test_the_reference_runs_once_for_concurrent_and_later_gradings():
    pool, grader = Pool(), grader_with(FIXED_WIN_SKIPPED, reference=FIXED_WIN_SKIPPED)

    async def main():
        async with trio.open_nursery() as nursery:
            for _ in range(4):  # a GRPO group graded at once
                nursery.start_soon(grader.grade, pool, INSTANCE, CANDIDATE)
        return await grader.grade(pool, INSTANCE, CANDIDATE)

    assert trio.run(main).resolved
    assert pool.references == 1 and len(pool.owners) == 6


def test_a_reference_that_cannot_tell_masks_only_a_result_the_skips_decide():
    for reference in (
        FIXED_WIN_SKIPPED.model_copy(update={"failure": FailureKind.OOM}),  # pytest finished, a child was killed
        FIXED_WIN_SKIPPED.model_copy(update={"failure": FailureKind.TIMEOUT, "exit_code": None}),
        NO_WIN,  # no status for the skipped test (a collection error, a deselection)
    ):
        pool = Pool()
        decided = grade(grader_with(FIXED_WIN_SKIPPED, reference=reference), pool, times=3)
        assert [r.status for r in decided] == ["infra_error"] * 3 and decided[0].reward is None, decided[0]
        assert "reference run" in decided[0].detail, decided[0]
        # a reference run that ended badly is tried twice, then its failure is kept (one that ran is kept at once)
        assert pool.references == (1 if reference is NO_WIN else 2), (reference.failure, pool.owners)
        # F2P fails: the result cannot resolve whatever the reference says: scored, never masked
        [unfixed] = grade(grader_with(UNFIXED_WIN_SKIPPED, reference=reference), Pool())
        assert unfixed.status == "unresolved" and unfixed.reward == 0.0, unfixed
        assert unfixed.p2p.failure == ("t.py::test_win",) and unfixed.f2p.failure == ("t.py::test_fix",)


def test_a_candidate_without_skipped_p2p_tests_makes_no_reference_run():
    pool = Pool()
    [result] = grade(grader_with(FIXED_WIN_PASSED, reference=FIXED_WIN_SKIPPED), pool)
    assert result.resolved and pool.references == 0
