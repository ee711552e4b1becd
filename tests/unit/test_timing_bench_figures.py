"""`tasks.timing_bench.figures`: what the timing bench counts (pure bookkeeping; the real runs are
tests/integration/test_cp_timing.py)."""

from __future__ import annotations

from sandbox.failure import Verdict
from tasks.result import TestResult, summarise
from tasks.timing_bench import figures


def graded(verdict: Verdict, detail: str = ""):
    return summarise("t", [TestResult(index=0, verdict=verdict, detail=detail)])


def test_masked_results_are_not_scored_and_starvation_is_told_apart() -> None:
    starved = graded(Verdict.INFRA_ERROR, "starved of CPU by the host: waited 5.10s for a CPU in 6.00s of wall time")
    other = graded(Verdict.INFRA_ERROR, "infra_error: Docker engine call 'create' failed")
    entries = [("accepted", None, None)] * 4 + [("wrong", None, None), ("slow", None, None)]
    results = [graded(Verdict.PASSED), graded(Verdict.TIME_LIMIT), starved, other]
    results += [graded(Verdict.WRONG_ANSWER), graded(Verdict.PASSED)]
    out = figures(entries, results)
    assert out["accepted_pass_share"] == 0.5  # 1 of the 2 scored accepted submissions; the masked 2 are not scored
    assert out["infra_errors"] == 2 and out["starved_masks"] == 1
    assert out["wrong_passed"] == 0 and out["slow_passed"] == 1
