"""What grading a task gives, whatever its family: one verdict per test (`TestResult`) and the task's grade
(`TaskResult`), which the rubric turns into a reward (`gym.rubric`).

Every family grades into these types (`tasks.family`): the CP grader one test per hidden test
(`tasks.grader`), the SWE grader one per FAIL_TO_PASS and PASS_TO_PASS id (`tasks.swe.family`), the math check
one test (`tasks.math.grader`). A sandbox failure is ``infra_error`` (the sample is masked), never a failed test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.failure import Verdict

NOT_RUN = "not_run"


class TestResult(BaseModel):
    """The verdict of one test. ``not_run`` marks tests skipped by early stop (they count as not passed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    index: int = Field(description="position of the test in the task's tests")
    verdict: Verdict | Literal["not_run"]
    wall_s: float = 0.0
    cpu_s: float = Field(0.0, description="CPU seconds (user + sys) of the test's process tree")
    detail: str = Field("", description="what went wrong, in terms of the candidate's own output")
    split: bool | None = Field(None, description="assert tests: whether expected values stayed on the host")
    output_head: str = Field("", description="the first bytes of the candidate's stdout")


class TaskResult(BaseModel):
    """The grade of one submission: per-test verdicts and the two rewards."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    passed: bool = Field(description="every test passed (False when infra_error)")
    fraction: float = Field(description="fraction of tests passed")
    infra_error: bool = Field(False, description="the sandbox failed: mask this sample, it is not a fail")
    tests: tuple[TestResult, ...]
    detail: str = ""
    wall_s: float = 0.0
    reruns: int = Field(0, description="borderline tests re-run (cpu time model)")


def summarise(
    task_id: str, tests: Sequence[TestResult], detail: str = "", wall_s: float = 0.0, reruns: int = 0
) -> TaskResult:
    """The grade of ``tests``: passed when every test passed and none met an infrastructure failure."""
    infra = any(t.verdict == Verdict.INFRA_ERROR for t in tests)
    passed = sum(t.verdict == Verdict.PASSED for t in tests)
    return TaskResult(
        task_id=task_id,
        passed=not infra and passed == len(tests),
        fraction=passed / len(tests) if tests else 0.0,
        infra_error=infra,
        tests=tuple(tests),
        detail=detail,
        wall_s=round(wall_s, 4),
        reruns=reruns,
    )
