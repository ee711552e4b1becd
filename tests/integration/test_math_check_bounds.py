"""The math check's bounds on real sympy work, through the real check process: a gold that hangs it is the task's
(masked at grading, reported at load time), an answer that hangs or keeps it busy is the answer's time limit, the
answer's time starts once the gold is read, and a correct answer nested as deep as ``max_chars`` allows passes
within the shipped deadline. Each of these holds the check for seconds on purpose (the unit tier keeps the rest of
the check's tests: tests/unit/test_attacks_math.py, test_math_check.py, test_math_answer_forms.py,
test_math_nesting.py)."""

from __future__ import annotations

import pytest

from sandbox.failure import Verdict
from tasks.math.golds import unread_golds
from tasks.math.grader import MathGrader, MathGraderConfig, grade_sync
from tasks.math.problem import MathTask
from tests.math_support import DEEP, nested

pytestmark = pytest.mark.slow

TASK = MathTask(task_id="t", source_format="plain", problem="What is 6 times 7?", gold="42")


def test_a_gold_that_hangs_the_check_is_masked_and_an_answer_that_does_is_scored():
    # the gold's time is the start's (start_timeout_s), the answer's is timeout_s of CPU from the gold on; the
    # wall-clock backstop far past it, so a host at load 20 still sees the CPU limit reached, not starvation
    grader = MathGrader(MathGraderConfig(timeout_s=4, start_timeout_s=20, backstop_factor=40))
    hanging_gold = grade_sync(grader, TASK.model_copy(update={"gold": "9^{9^{9^{9}}}"}), "1")
    assert hanging_gold.infra_error and "ran past 20 s before reading the gold" in hanging_gold.detail
    hanging_answer = grade_sync(grader, TASK, "9^{9^{9^{9}}}")
    assert hanging_answer.tests[0].verdict == Verdict.TIME_LIMIT and not hanging_answer.infra_error


def test_a_gold_that_hangs_the_check_is_reported_and_the_reading_goes_on():
    # The hanging gold holds the check for its whole bound, 10 s: an honest gold here is read in ~0.06 s idle, and one read under a 2 s bound ran past it
    # on the 2-core VM with two CPU hogs and other suites beside it (the hanging one never ends at any bound).
    golds = ["5", "9^{9^{9^{9}}}", "\\text{east}", "6 | 5", "40_9"]
    tasks = [MathTask(task_id=str(i), source_format="plain", problem="?", gold=gold) for i, gold in enumerate(golds)]
    unread = unread_golds(tasks, MathGraderConfig(timeout_s=10, concurrency=1))
    assert [(finding.task_id, finding.reason.split(" reading")[0]) for finding in unread] == [
        ("1", "the check ran past 10 s"),
        ("3", f"the checker does not read the operand 6 of the gold {golds[3]!r}"),
    ]


def test_an_answer_that_keeps_sympy_busy_is_a_time_limit_not_a_hang():
    # 3 s of CPU; a wall-clock backstop far past it, so a loaded host (a CI at load 12 gives the check a sixth of a
    # CPU) still sees the CPU limit reached, never the backstop's starvation (masked, infra_error: its own test)
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=3, backstop_factor=40)), TASK, "9^{9^{9^{9}}}")
    assert result.tests[0].verdict == Verdict.TIME_LIMIT and not result.passed and not result.infra_error
    assert "ran past 3 s" in result.detail and result.wall_s < 150  # killed, not a hang (start-up is not bounded here)


def test_the_answers_time_starts_when_the_gold_is_read(tmp_path, monkeypatch):
    """The check's start (its process, sympy's import: ~1.6 s idle on the 2-core VM, much more under load; here 8 s
    more of sleep before it) is not the answer's time: a 4 s limit is enough for "42", however long the start took.
    Before, the limit covered the start, and an overloaded host turned it into infra_error (a masked sample) or, had
    the gold been read, into the answer's time_limit. (A 0.5 s limit without the sleep failed a loaded CI: the check
    of "42" itself, after the gold, took longer there.)"""
    import tasks.math.grader

    check, slow_start = str(tasks.math.grader.CHECK), tmp_path / "slow_start.py"
    slow_start.write_text(
        f"import runpy, sys, time\ntime.sleep(8)\nsys.argv = [{check!r}]\nrunpy.run_path({check!r}, run_name='__main__')\n"
    )
    monkeypatch.setattr(tasks.math.grader, "CHECK", slow_start)
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=4)), TASK, "42")
    assert result.passed and result.tests[0].verdict == Verdict.PASSED, result
    assert result.wall_s > 8  # the start took longer than the limit


@pytest.mark.parametrize(("shape", "depth"), DEEP)
def test_a_correct_answer_nested_deep_passes_through_the_real_check(shape, depth):
    gold, answer = nested(shape, depth)
    assert len(answer) <= 512
    task = MathTask(task_id="t", source_format="plain", problem="?", gold=gold)
    result = grade_sync(MathGrader(), task, answer)  # the shipped bounds: a 20 s deadline from the gold on
    assert result.passed and result.tests[0].verdict == Verdict.PASSED, result.detail
