"""The math answer check: equivalent forms pass, wrong answers and answers that try to game the checker fail,
and the check runs in a child process under a deadline, so no answer can hang or crash the gym."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.failure import Verdict
from tasks.loader import load_tasks
from tasks.math.check import candidates, judge
from tasks.math.grader import MathGrader, MathGraderConfig, grade_sync
from tasks.math.problem import MathTask

SAMPLES = Path(__file__).resolve().parents[2] / "tasks" / "samples"


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("\\frac{1}{2}", "$\\dfrac{1}{2}$"),
        ("0.5", "\\frac12"),
        ("1000", "1,000"),
        ("1000", "1{,}000"),
        ("1200000", "1,200,000"),
        ("72", "The answer is 72."),
        ("72", "72 clips"),
        ("72", "\\boxed{72}"),
        ("18", "$18"),
        ("5", "x = 5"),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
        ("3\\sqrt{2}", "\\sqrt{18}"),
        ("25\\pi", "25\\pi"),
        ("x+3", "3 + x"),
        ("(2, 5)", "(2,5)"),
        ("\\frac{7}{4}", "1.75"),
        ("-3", "-3"),
    ],
)
def test_equivalent_forms_pass(gold, answer):
    assert judge(gold, answer) == ("passed", "")


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("72", "71"),
        ("\\frac{1}{2}", "0.51"),
        ("3\\sqrt{2}", "3"),
        ("x+3", "x-3"),
        ("(2, 5)", "(5, 2)"),
        ("1000", "100"),
    ],
)
def test_wrong_answers_fail(gold, answer):
    verdict, detail = judge(gold, answer)
    assert verdict == "wrong_answer" and detail


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("", "empty answer"),
        ("   \n ", "empty answer"),
        ("71 or 72", "several different answers"),
        ("72, 73, 74", "several different answers"),
        ("73 or 74 or 72", "several different answers"),
        ("70 71 72 73", "several different answers"),
        ("The answer is 71. Actually 72.", "several different answers"),
        ("71\n72", "several different answers"),
        ("71; 72", "several different answers"),
        ("72 " * 300, "characters (at most 512 are read)"),
        (", ".join(["72"] * 9), "9 separate answers"),
        ("the number of clips", "is not 72"),  # prose: its words are cut, "of" read as o*f
    ],
)
def test_answers_that_try_to_game_the_checker_fail(answer, reason):
    verdict, detail = judge("72", answer)
    assert verdict == "wrong_answer" and reason in detail


def test_one_answer_stated_twice_is_still_one_answer():
    assert candidates("72, so 72") == ["72", "so 72"]
    assert judge("72", "72\n72") == ("passed", "")
    assert candidates("(1, 2) and 1,000") == ["(1, 2)", "1,000"]


def test_gold_that_does_not_parse_is_the_tasks_fault():
    assert judge("\\begin{foo}", "1")[0] == "gold_error"
    assert judge("6 | 5", "5")[0] == "gold_error"


def test_every_shipped_reference_answer_passes_and_its_gold_plus_one_fails():
    checked = 0
    for name in ("gsm8k", "competition", "plain"):
        gold = {t.task_id: t.gold for t in load_tasks(SAMPLES / f"math_{name}.jsonl", "math").tasks}
        for line in (SAMPLES / f"math_{name}.solutions.jsonl").read_text().splitlines():
            row = json.loads(line)
            assert judge(gold[row["task_id"]], row["completion"]) == ("passed", ""), row
            assert judge(gold[row["task_id"]], f"{gold[row['task_id']]} + 1")[0] == "wrong_answer", row
            checked += 1
    assert checked == 36


TASK = MathTask(task_id="t", source_format="plain", problem="What is 6 times 7?", gold="42")


def test_grader_runs_the_check_in_a_child_process():
    grader = MathGrader()
    right, wrong = grade_sync(grader, TASK, "42.0"), grade_sync(grader, TASK, "41")
    assert right.passed and right.fraction == 1.0 and right.tests[0].verdict == Verdict.PASSED and not right.infra_error
    assert not wrong.passed and wrong.fraction == 0.0 and wrong.tests[0].verdict == Verdict.WRONG_ANSWER
    assert "41 is not 42" in wrong.detail


def test_a_huge_answer_is_refused_unread():
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=0.001)), TASK, "4" * 1_000_000)
    assert result.tests[0].verdict == Verdict.WRONG_ANSWER and "1000000 characters" in result.detail


def test_a_check_that_cannot_read_the_gold_within_its_start_bound_is_masked():
    # a fresh interpreter (no fork server) cannot import sympy in 0.05 s; the fork server's side of this bound is
    # tests/unit/test_math_forkserver.py's (a check that sleeps before the gold)
    result = grade_sync(MathGrader(MathGraderConfig(start_timeout_s=0.05, fork_server=False)), TASK, "42")
    assert result.infra_error and result.tests[0].verdict == Verdict.INFRA_ERROR
    assert "ran past 0.05 s before reading the gold" in result.detail, result.detail


def test_a_gold_the_checker_cannot_read_is_masked_not_scored():
    """At grading time; loading skips such a task first (`tasks.math.golds`, tests/unit/test_math_answer_forms.py)."""
    result = grade_sync(MathGrader(), TASK.model_copy(update={"gold": "\\begin{foo}"}), "1")
    assert result.infra_error and not result.passed and result.tests[0].verdict == Verdict.INFRA_ERROR
