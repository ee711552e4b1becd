"""Spellings the math check reads the way they are meant (issue 41 class 7, our own outside round): math delimiters
and Markdown around an answer, commas in brackets, percent signs, words glued between numbers, moduli. Each
attack here passed before (a reply that passes for two different golds is the worst: whichever is right, it earns
1.0); each honest form here failed before."""

from __future__ import annotations

import pytest

from tasks.math.check import judge


@pytest.mark.parametrize(
    ("answer", "golds"),
    [
        ("(3,125)", ["(3,125)", "3125"]),  # a thousands comma read inside a pair made it one number
        ("\\{2,100\\}", ["\\{2,100\\}", "2100"]),
        ("[-36,104]", ["[-36,104]", "-36104"]),
        ("(1,500)", ["(1, 500)", "1500"]),
        ("6 \\% 5", ["0.3", "11"]),  # every % deleted read 6 5, the sum 11
        ("5 + \\log_{100}100\\%", ["5", "6"]),
    ],
)
def test_one_reply_passes_for_at_most_one_gold(answer, golds):
    verdicts = [judge(gold, answer)[0] for gold in golds]
    assert verdicts.count("passed") <= 1, dict(zip(golds, verdicts))


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("3125", "(3,125)"),
        ("-36104", "[-36,104]"),
        ("11", "5 is 6"),  # glue between two numbers, dropped, left 5 6: read as the sum
        ("11", "5 so 6"),
        ("11", "5 \\mathrel{\\text{is}} 6"),
        ("11", "5 \\text{ vs } 6"),
        ("5", "5 mod (x = 6)"),  # a modulus holding a second answer
        ("5", "x = 5 \\; (\\text{mod } 7 \\text{ or maybe } x = 6)"),
        ("5", "x = 5 (mod 7; x = 6)"),
        ("5", "x \\equiv 5 \\pmod{7 \\mid 6}"),
        ("5", "$6$ $5$"),  # two formulas are two answers
        ("5", "$6$$5$"),
        ("5", "\\(6\\) \\(5\\)"),
        ("5", "\\[ 6 \\] \\[ 5 \\]"),
        ("6", "5 + 100\\% + 1\\%"),  # a percent sign inside an expression is never left off
        ("23", "2**3"),  # a power, never emphasis around 3
    ],
)
def test_a_misread_or_hedged_spelling_fails(gold, answer):
    verdict, detail = judge(gold, answer)
    assert verdict == "wrong_answer" and detail


HONEST = [
    ("3\\sqrt{2}", "$AB = 3\\sqrt{2}$"),  # relations inside math delimiters
    ("4x+5", "$y = 4x+5$"),
    ("y = 2x", "$y = 2x$"),
    ("y = 2x", "\\(y = 2x\\)"),
    ("5", "\\[x = 5\\]"),
    ("5", "$$x = 5$$"),
    ("5", "The answer is $5$."),
    ("5", "So $x = 5$."),
    ("y = 2x", "The line is $y = 2x$."),
    ("5", "$\\boxed{5}$"),
    ("5", "**5**"),  # Markdown around the answer
    ("5", "`5`"),
    ("5", "**x = 5**"),
    ("5", "**Answer:** 5"),
    ("5", "**Final Answer:** $\\boxed{5}$"),
    ("(1, 500)", "(1,500)"),  # a pair's comma is never a thousands separator
    ("(3,125)", "(3, 125)"),
    ("[-36,104]", "[-36, 104]"),
    ("(2,12) \\cup (12,102)", "(2, 12) \\cup (12, 102)"),
    ("1000", "1,000"),  # outside brackets it is
    ("1000", "1{,}000"),
    ("5000", "5,\\!000"),
    ("\\frac{12}{5525}", "\\frac{12}{5,525}"),
    ("25", "25%"),  # GSM8K: the sign may be left on a number
    ("25", "25 \\%"),
    ("50\\%", "50"),
    ("50\\%", "50\\%"),
    ("3 \\pmod{7}", "x \\equiv 10 \\pmod{7}"),
    ("5", "x \\equiv 5 \\;(\\text{mod } 7)"),
]


@pytest.mark.parametrize(("gold", "answer"), HONEST)
def test_an_honest_spelling_passes(gold, answer):
    assert judge(gold, answer) == ("passed", "")
