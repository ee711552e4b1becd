"""Honest math answers in the forms public sets write golds in: text, numerals in another base, money, units, LaTeX
thousands separators, percentages, ratios and lists of values earn 1.0; every hedge built on them still earns 0;
a gold the check cannot grade against is a load-time finding (the task skipped with its reason), never a masked
episode.

Issue 42, class 4. On the code before the fix 42 of the 55 HONEST rows failed: 29 gold_error (masked as
infra_error for every answer: ``\\text{east}``, ``40_9``, ``\\$32,\\!348``, ``15\\mbox{ cm}^2``) and 13 scored 0
(``1,-2`` and ``3, 5, 7`` refused as hedges, ``10,\\!080`` read as two numbers); of the HEDGES and WRONG rows 17
were gold_error (masked, not 0) and 4 earned 1.0 (``1 = 4x+5``, ``4y+3 = 4x+5``, ``18 \\equiv C``, ``9 p.m.`` for
``9\\text{ a.m.}``); the load-time report did not exist."""

from __future__ import annotations

import json
import logging

import pytest

from gym.environment_config import JsonlPool
from gym.task_stream import load_pool
from sandbox.failure import Verdict
from tasks.math import forms
from tasks.math.check import gold_finding, judge
from tasks.math.grader import MathGrader, grade_sync
from tasks.math.problem import MathTask
from tests.cli_support import gym

# (gold as a public set writes it, an honest answer as a policy writes it)
HONEST = [
    ("\\text{east}", "east"),  # text: case, wrappers, delimiters and the punctuation around it are not read
    ("\\text{east}", "\\textbf{East}."),
    ("\\text{east}", "$\\text{East}$"),
    ("\\mbox{Saturday}", "\\boxed{\\text{Saturday}}"),
    ("\\text{Evelyn}", "Evelyn"),
    ("Evelyn", "\\text{evelyn}"),  # a bare word is text too
    ("\\text{(C)}", "C"),
    ("\\text{(C)}", "(C)"),
    ("\\text{A,C,F}", "A, F, C"),  # a list of letters: any order
    ("B, C", "\\text{C, B}"),
    ("\\text{4:30 p.m.}", "4:30 PM"),
    ("9\\text{ a.m.}", "9 a.m."),
    ("40_9", "40_9"),  # base-n: the same base, the subscript written or not, the same value
    ("40_9", "40_{9}"),
    ("40_9", "040_9"),
    ("40_9", "40"),
    ("4210_{5}", "\\boxed{4210_5}"),
    ("0.0011_{2}", "0.0011_2"),
    ("-221_3", "-221_3"),
    ("152A_{11}", "152a_{11}"),
    ("\\$32,\\!348", "32348"),  # money and LaTeX thousands separators
    ("\\$32,\\!348", "\\$32,\\!348"),
    ("\\$32,\\!348", "$32,348"),
    ("\\$32,\\!348", "32,348 dollars"),
    ("\\$0.50", "0.5"),
    ("-\\$0.50", "-0.5"),
    ("10,\\!080", "10080"),
    ("10,\\!080", "10,080"),  # a single-valued gold: ten thousand and eighty, never a pair
    ("10080", "10{,}080"),
    ("111, \\! 111, \\! 111", "111111111"),
    ("\\frac{12}{5,\\!525}", "\\frac{12}{5525}"),
    ("15\\mbox{ cm}^2", "15"),  # units: the value is compared, never the unit
    ("15\\mbox{ cm}^2", "15 \\text{ cm}^2"),
    ("15\\mbox{ cm}^2", "15\\,\\mathrm{cm}^2"),
    ("144 \\mbox{ m}^3", "144"),
    ("8\\sqrt{3} \\text { square inches}", "8\\sqrt{3}"),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"),
    ("65 \\text{ children tickets }", "65"),
    ("44\\%", "44\\%"),  # a percentage: the sign is optional, the fraction is the same quantity
    ("44\\%", "44"),
    ("44\\%", "0.44"),
    ("25", "25\\%"),
    ("3:1", "3:1"),  # a ratio is the pair
    ("1,-2", "1,-2"),  # a list of values: the same values in any order, any brackets a list is written in
    ("1,-2", "-2, 1"),
    ("1,-2", "x = 1 \\text{ or } x = -2"),
    ("1,-2", "\\boxed{-2, 1}"),
    ("1,-2", "\\{1, -2\\}"),
    ("1,-2", "1, -2, 1"),  # a value stated twice is one value
    ("3, 5, 7", "7, 5, 3"),
    ("12\\text{ and }13", "13 and 12"),
    ("7, -2, \\text{ and } -5", "-5, -2, 7"),
    (
        "27^\\circ, 63^\\circ, 99^\\circ, 135^\\circ, 171^\\circ",
        "27^\\circ, 63^\\circ, 99^\\circ, 135^\\circ, 171^\\circ",
    ),
    ("1+\\sqrt 2,\\ 1-\\sqrt 2,\\ 2+\\sqrt 3,\\ 2-\\sqrt 3", "2-\\sqrt3, 2+\\sqrt3, 1-\\sqrt2, 1+\\sqrt2"),
    ("\\frac \\pi4 + 2 - \\sqrt2", "\\frac{\\pi}{4} + 2 - \\sqrt{2}"),  # \frac's unbraced arguments are one token each
]

# Hedges on those forms: several answers with the gold among them, never 1.0.
HEDGES = [
    ("\\text{east}", "east or west"),  # text is never read as a substring
    ("\\text{east}", "\\text{east}, \\text{west}"),
    ("\\text{east}", "\\boxed{east}\\boxed{west}"),
    ("\\text{east}", "The answer is east"),
    ("\\text{(C)}", "C or D"),
    ("\\text{A,C,F}", "A, C"),  # a list: one value fewer or one more is wrong
    ("\\text{A,C,F}", "A, C, F, G"),
    ("40_9", "40_9 or 36"),
    ("40_9", "40_9 = 36_{10}"),
    ("40_9", "40_9, 41_9"),
    ("\\$32,\\!348", "32,348 or 32,349"),
    ("10,\\!080", "10, 80"),
    ("15\\mbox{ cm}^2", "15 \\text{ cm}^2 \\text{ or } 16 \\text{ cm}^2"),
    ("15\\mbox{ cm}^2", "15 \\quad 16"),
    ("44\\%", "44 or 0.44"),
    ("5", "5 or \\text{VW}"),  # text after a separator word is an answer, not a unit
    ("1,-2", "1"),  # a listed gold: one of its values alone
    ("1,-2", "-2"),
    ("1,-2", "1, -2, 3"),  # one more
    ("1,-2", "1 \\text{ or } -2 \\text{ or } 3"),
    ("1,-2", "1, -2 = 5"),
    ("3, 5, 7", "3, 5"),
    ("3, 5, 7", "3, 5, 7, 9"),
    ("5", "5, 6"),  # a single-valued gold with a list answer stays a hedge
    ("5", "\\boxed{1} \\boxed{5}"),  # two boxes side by side: two answers, never the product 1 * 5
    ("\\frac{5}{9}", "\\boxed{0} \\boxed{\\frac{5}{9}}"),  # nor the mixed number 0 5/9
    ("4x+5", "1 = 4x+5"),  # a gold with unknowns: a constant side is a second value
    ("4x+5", "4y+3 = 4x+5"),
    ("C", "18 \\equiv C \\pmod{7}"),  # 18 is what this states, not C
]

WRONG = [
    ("\\text{east}", "west"),
    ("\\text{(C)}", "(D)"),
    ("9\\text{ a.m.}", "9 p.m."),
    ("40_9", "36"),  # the value in base 10 is not the base-9 numeral asked for
    ("40_9", "40_{10}"),
    ("40_9", "49_9"),  # 9 is no base-9 digit
    ("\\$32,\\!348", "32,349"),
    ("15\\mbox{ cm}^2", "16"),
    ("44\\%", "0.45"),
    ("3:1", "1:3"),
    ("(1, 2)", "(2, 1)"),  # a tuple keeps its order; only a bare list is unordered
    ("25", "0.25"),
]


@pytest.mark.parametrize(("gold", "answer"), HONEST)
def test_an_honest_answer_in_the_golds_form_earns_one(gold, answer):
    assert judge(gold, answer) == ("passed", "")
    assert judge(gold, gold) == ("passed", "")  # the gold itself, written as a policy would


@pytest.mark.parametrize(("gold", "answer"), [*HEDGES, *WRONG])
def test_a_hedge_or_a_wrong_answer_in_those_forms_earns_zero(gold, answer):
    verdict, detail = judge(gold, answer)
    assert verdict == "wrong_answer" and detail, (gold, answer)


def test_forms_read_text_numerals_and_units_as_documented():
    assert forms.is_text("\\text{east}") and forms.is_text("Evelyn") and forms.is_text("9\\text{ a.m.}")
    assert not forms.is_text("\\text{13}") and not forms.is_text("x") and not forms.is_text("15\\text{ cm}")
    assert forms.words("\\textbf{ East. }, and \\text{(W)}") == ("east", "w")
    assert forms.numeral("40_9") == (36, 9) and forms.numeral("40", 9) == (36, 9) and forms.numeral("40") is None
    assert forms.numeral("49_9") is None and forms.numeral("a_{12}") is None  # no digit of base 9; a variable
    assert forms.plain("15\\mbox{ cm}^2") == "15 " and forms.plain("\\$5") == " 5" and forms.plain("3:1") == "(3, 1)"
    assert forms.plain("5 or \\text{VW}") == "5 or \\text{VW}"


def test_a_text_gold_is_graded_by_the_real_check_never_masked():
    task = MathTask(task_id="t", source_format="competition", problem="Which way?", gold="\\text{east}")
    right, hedged = grade_sync(MathGrader(), task, "East"), grade_sync(MathGrader(), task, "east or west")
    assert right.passed and not right.infra_error
    assert not hedged.passed and not hedged.infra_error and hedged.tests[0].verdict == Verdict.WRONG_ANSWER


# Golds no answer can be graded against, each with the reason the load-time report gives.
UNREADABLE = {
    "\\begin{foo}": "does not parse",
    "6 | 5": "does not read the operand 6",
    "\\text{ }": "does not parse",  # no letter: not text, and no value either
    "\\text{A,,B}": "lists an empty item",
}


def test_gold_finding_names_why_a_gold_cannot_be_graded_against():
    for gold, reason in UNREADABLE.items():
        assert reason in gold_finding(gold), gold
    assert [gold_finding(gold) for gold, _ in HONEST] == [""] * len(HONEST)
    assert "given as the answer does not pass" in gold_finding("9" * 600)  # longer than an answer may be


def test_the_load_time_report_lists_each_unreadable_gold_and_the_pool_skips_its_task(tmp_path, caplog):
    rows = [{"id": f"ok{i}", "problem": "?", "answer": gold} for i, (gold, _) in enumerate(HONEST[:6])]
    rows += [{"id": f"bad{i}", "problem": "?", "answer": gold} for i, gold in enumerate(UNREADABLE)]
    path = tmp_path / "golds.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    unread: list = []
    with caplog.at_level(logging.WARNING, logger="tasks.math.golds"):
        tasks = load_pool(JsonlPool(path=path, format="math", id_prefix="p/"), None, unread)  # default settings
    assert [task.task_id for task in tasks] == [f"p/ok{i}" for i in range(6)]
    assert [(finding.task_id, finding.gold) for finding in unread] == [
        (f"p/bad{i}", g) for i, g in enumerate(UNREADABLE)
    ]
    assert all(reason in finding.reason for finding, reason in zip(unread, UNREADABLE.values()))
    assert sum("skipped task bad" in record.message for record in caplog.records) == len(UNREADABLE)


def test_gym_tasks_check_reports_skipped_rows_and_unreadable_golds(tmp_path):
    path = tmp_path / "plain.jsonl"
    rows = [{"id": "a", "problem": "?", "answer": "\\text{east}"}, {"id": "b", "problem": "?", "answer": "6 | 5"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in [*rows, {"id": "c", "statement": "?"}]))
    done = gym("tasks", "check", str(path), "--format", "math")
    assert done.returncode == 1, done.stderr
    assert "task b: skipped: the checker does not read the operand 6" in done.stdout
    assert "row 2: skipped:" in done.stdout
    assert "1 usable tasks, 1 rows skipped, 1 math golds the check cannot grade against" in done.stdout
    clean = gym("tasks", "check", "tasks/samples/math_competition.jsonl")
    assert clean.returncode == 0 and "12 usable tasks, 0 rows skipped, 0 math golds" in clean.stdout, clean.stderr
