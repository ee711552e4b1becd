"""A decimal expected token past a float's range is matched by its exact value, not by its float reading.

`float()` reads every magnitude past ~1.8e308 as ``inf``, so an expected 401-digit ``1000...0.5`` and a candidate's
``1e999`` (or ``9e400``) read alike. `tasks.comparison` compares such tokens as exact decimals within the tolerance:
in the real sandbox, through the real grader, the exact value passes and ``1e999`` is a wrong answer (never masked
as an infrastructure error), as is a finite wrong value.
"""

from __future__ import annotations

import pytest

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from tasks.comparison import Tolerance, outputs_match
from tasks.grader import GraderConfig, grade_pairs
from tasks.submission import Submission
from tests.task_support import stdin_task

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})
CONFIG = GraderConfig(default_time_s=1.0, min_time_s=1.0)
HUGE = "1" + "0" * 400 + ".5"  # 10**400 + 0.5, written with a decimal point
TASK = stdin_task("huge-decimal", [("400\n", HUGE + "\n")])


def grade(*programs: str):
    pairs = [(TASK, Submission(task_id=TASK.task_id, completion=code)) for code in programs]
    return grade_pairs(pairs, CONFIG, SANDBOX)


def test_controls_the_exact_value_passes_and_a_finite_wrong_value_fails():
    exact, finite = grade(f"print({HUGE!r})\n", "print('1.5')\n")
    assert exact.passed, exact.tests
    assert not finite.passed and not finite.infra_error and finite.tests[0].verdict == Verdict.WRONG_ANSWER


def test_an_infinite_reading_does_not_pass_for_a_huge_decimal():
    """`1e999` reads as inf, and so does the expected value: their exact values differ."""
    (result,) = grade("print('1e999')\n")
    assert not result.passed and not result.infra_error, [(t.verdict, t.detail) for t in result.tests]
    assert result.tests[0].verdict == Verdict.WRONG_ANSWER


def test_the_comparison_alone():
    """The same comparison without a container: a token past the float range is its exact value."""
    assert outputs_match(HUGE, HUGE, Tolerance())
    assert not outputs_match("9e400", HUGE, Tolerance()), "9e400 is 10**400 x 9, not 10**400 + 0.5"
