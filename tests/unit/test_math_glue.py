"""Glue between two values: a reply that states two values joined by a LaTeX wrapper, a word or both is a hedge,
whatever wraps the glue and however deep (issue 41 class 7, the outside round's third family); the value compared
is the reading of the pieces the check probed, never math-verify's reading of the whole text. Honest answers that
state one value in the spellings people use (SI thousands, a bare unit, a logarithm's base, a set's or a pair's
elements without the brackets) earn 1.0."""

from __future__ import annotations

import itertools

import pytest

from tasks.math.check import judge

# Commands that wrap a group: math classes, accents, fonts, text; none of them is a value.
WRAPPERS = [
    "mathrel",
    "mathbin",
    "mathop",
    "mathord",
    "mathinner",
    "mathopen",
    "mathclose",
    "mathpunct",
    "bar",
    "hat",
    "tilde",
    "vec",
    "overline",
    "underline",
    "widehat",
    "text",
    "textsf",
    "mathrm",
    "mathsf",
    "operatorname",
    "mbox",
    "hbox",
]
GLUE = ["is", "vs", "eq", "to", "ne", "then", "or rather", "(", "->", ":"]
# Where the glue sits: alone, nested in \text (any depth), around a value, in a relation's side.
SHAPES = [
    "6 \\W{G} 5",
    "6 \\W{\\text{G}} 5",
    "6 \\W{\\text{\\text{G}}} 5",
    "6 \\W{\\mathrm{G}} 5 = 5",
    "x = 6 \\W{\\text{G}} 5",
    "6 \\W{\\text{G}} 4 \\W{\\text{G}} 5",
    "\\frac{12}{2} \\W{\\text{G}} 5",
]


def _glued() -> list[str]:
    return [
        shape.replace("\\W", f"\\{wrapper}").replace("G", glue)
        for shape, wrapper, glue in itertools.product(SHAPES, WRAPPERS, GLUE)
    ]


def test_every_glue_between_two_values_is_a_hedge():
    """7 shapes x 22 wrappers x 10 glue words (1,540 replies): not one passes for gold 5, as 6 alone does not."""
    passing = [answer for answer in _glued() if judge("5", answer)[0] == "passed"]
    assert judge("5", "6") == ("wrong_answer", "6 is not 5")
    assert passing == [], f"{len(passing)} glued hedges pass, e.g. {passing[:5]}"


@pytest.mark.parametrize(
    "answer",
    [
        "6 \\mathrel{\\text{is}} 5",
        "6 \\mathbin{\\text{vs}} 5",
        "6 \\mathrel{\\operatorname{eq}} 5",
        "6 \\mathinner{\\text{x}} 5",
        "6 \\mathopen{\\text{(}} 5",
        "6 \\text{\\text{is}} 5",
        "6 \\bar{\\text{is}} 5",
        "6 \\mathrel{\\text{eq}} 4 \\mathrel{\\text{eq}} 5",
        "= {6} 5",
        "\\approx{6} 5",
        "\\Rightarrow{6}\\,5",
        "\\vdash{6} 5",
        "\\models{6}\\,5",
        "6 \\mathrel{\\text{is}} 5 = 5",
        "6 \\bar{\\text{is}} 5 = 5",
        "6 \\mathrel{\\text{is}} 5\\%",
    ],
)
def test_the_outside_rounds_glued_hedges_fail(answer):
    assert judge("5", answer)[0] == "wrong_answer"


def test_a_range_glued_by_a_word_is_not_its_end():
    assert judge("12", "7 \\mathrel{\\text{to}} 12")[0] == "wrong_answer"


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("y = 2x", "y = 3x \\mathrel{\\text{is}} y = 2x"),
        ("y = 2x", "y = 3x \\text{\\text{or}} y = 2x"),
        ("y=2x", "y = 3x \\bar{\\text{vs}} 2x"),
        ("x^2+y^2=25", "x^2+y^2 = 36 \\mathrel{\\text{vs}} 25"),
    ],
)
def test_glue_inside_a_relation_is_a_hedge_against_a_relation_gold(gold, answer):
    assert judge(gold, answer)[0] == "wrong_answer"


HONEST = [
    ("1000", "1 000"),
    ("12345", "12\\ 345"),
    ("1000000", "1 000 000"),
    ("1000000", "1~000~000"),
    ("1000.5", "1 000.5"),
    ("2", "\\log_2 4 = 2"),
    ("3", "\\log_2 8"),
    ("12", "12 km/h"),
    ("5", "5 cm^2"),
    ("3", "3 hours"),
    ("5", "5 \\text{ m/s}"),
    ("\\{1, 2\\}", "1, 2"),
    ("\\{1, 2\\}", "2, 1"),
    ("(5, 6)", "x = 5, y = 6"),
    ("(5, 6)", "5, 6"),
    ("(1,\\frac{1}{2})", "1, 0.5"),
    ("72", "The answer is 72."),
    ("72", "The answer is \\boxed{72}."),
    ("5x", "5 x"),
    ("\\bar{x}", "\\bar{x}"),
    (".5", ".5"),
]


@pytest.mark.parametrize(("gold", "answer"), HONEST)
def test_an_honest_spelling_earns_one(gold, answer):
    assert judge(gold, answer) == ("passed", "")


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("5", "5 6 7"),  # three numbers apart, never a grouping of threes
        ("5", "5 000"),  # five thousand
        ("5", "6 km 5"),  # a unit between two values ends neither
        ("5", "5 km, 6 km"),
        ("(5, 6)", "6, 5"),  # a pair's order counts
        ("(5, 6)", "x = 6, y = 5"),
        ("(5, 6)", "5, 6, 7"),
        ("\\{1, 2\\}", "1, 2, 3"),
        ("\\{1, 2\\}", "1"),
        ("[1, 2]", "1, 2"),  # a closed interval is not a list
    ],
)
def test_the_honest_spellings_open_no_hedge(gold, answer):
    assert judge(gold, answer)[0] == "wrong_answer"


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("5", "5⁶"),  # 5 to the sixth, not 5
        ("5", "5²"),
        ("5", "5, ٦"),  # an Arabic-Indic 6 is a second answer, never skipped
        ("5", "٦ 5"),
        ("5", "Ⅴ"),  # a numeral the check does not read is refused, never guessed
        ("5", "⑤ 5"),
        ("5", "= {6} 5%"),  # the percent rule reads the pieces as the verdict does
        ("5", "= {6} 5\\%"),
        ("y = 2x", "y = x \\mathrel{\\text{is}} y = 2x"),  # glue inside a relation's side makes it a value
        ("y=2x", "y = x \\text{ is } y = 2x"),
    ],
)
def test_numbers_in_other_scripts_and_glue_in_relations_are_read_not_skipped(gold, answer):
    assert judge(gold, answer)[0] == "wrong_answer"


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("15625", "5⁶"),
        ("25", "5²"),
        ("6", "٦"),
        ("0.5", "½"),
        ("x^{-1}", "x⁻¹"),
        ("25", "25%"),
        ("x^2+y^2=25", "Thus x^2+y^2=25"),
    ],
)
def test_numbers_in_other_scripts_read_as_their_values(gold, answer):
    assert judge(gold, answer) == ("passed", "")
