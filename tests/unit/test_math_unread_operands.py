"""Operands the check does not read are answers it does not see (issue 41 class 7, the outside round's fourth
family): a second candidate that math-verify reads as nothing (``5, \\color{red}{6}``), a value written without a
digit that its last-value fallback reads past (``\\pi \\mid 5``), a number written as a word (``5 or six``) and a
modulus with a second number in it (``3 \\pmod{5 \\mid 7}``) all fail, whatever wraps or separates them; honest
answers with names, constants, units and moduli still earn 1.0."""

from __future__ import annotations

import itertools

import pytest

from tasks.math.check import gold_finding, judge

# A second value math-verify reads as nothing, in the wrappers the outside round tried (V: the value).
UNREADABLE = [
    "\\color{red}{V}",
    "\\color{red}V",
    "\\textcolor{red}{V}",
    "{\\color{red}V}",
    "\\colorbox{red}{V}",
    "\\begin{foo}V\\end{foo}",
    "\\begin{cases}V\\end{cases}",
    "\\begin{array}{c}V\\end{array}",
    "\\ref{foo}V",
    "\\mbox{foo}V",
    "\\hphantom{V}",
    "\\SI{V}{m}",
    "\\href{x}{V}",
]
SEPARATORS = [", ", " or ", "\n", "; ", ". "]


def _dropped() -> list[tuple[str, str]]:
    cases = [("5", f"5, {w.replace('V', '6')}") for w in UNREADABLE]
    cases += [("5", f"{w.replace('V', '6')}{s}5") for w, s in itertools.product(UNREADABLE[:3], SEPARATORS)]
    cases += [("\\{1,2\\}", "1,2,\\color{red}{3}"), ("x+1", "x+1, \\color{red}{2}"), ("-2", "-2; \\color{red}{2}")]
    cases += [("5", "5, \\color{red}{\\pi}"), ("5", "\\color{red}{\\pi} = 5"), ("5", "\\color{red}{x} \\mid 5")]
    return cases


@pytest.mark.parametrize(("gold", "answer"), _dropped())
def test_a_candidate_read_as_nothing_is_a_second_answer_not_dropped(gold, answer):
    verdict, detail = judge(gold, answer)
    assert verdict == "wrong_answer" and detail


@pytest.mark.parametrize("answer", ["5 = ⁶", "⁶ = 5", "5 = ₆", "5 = ¹⁶", "5 = ⁻⁶"])
def test_a_lone_script_on_its_own_side_is_a_value(answer):
    assert judge("5", answer)[0] == "wrong_answer"


# Values written with no digit, and the glue math-verify's last-value fallback reads past.
DIGITLESS = ["\\pi", "e", "x", "\\infty", "\\phi", "\\sqrt{e}", "-e^{i\\pi}", "\\cos\\pi"]
GLUE = ["\\mid", "|", "\\|", "{}", "\\colon", "\\not", "\\vert", "\\rvert", "\\dots", "\\vdots"]


@pytest.mark.parametrize(
    ("first", "glue"), list(itertools.product(DIGITLESS[:4], GLUE)) + [(first, "\\mid") for first in DIGITLESS[4:]]
)
def test_a_value_without_digits_before_glue_is_read_or_refused(first, glue):
    for gold in ("5", "-2", "\\frac{1}{2}"):
        verdict, detail = judge(gold, f"{first} {glue} {gold}")
        assert verdict == "wrong_answer", (gold, first, glue, detail)


@pytest.mark.parametrize(
    "answer",
    [
        "y = x \\mid y = 2x",
        "y = -x \\mathrel{\\text{is}} y = 2x",
        "y = x | y = 2x",
        "y = x {} y = 2x",
        "y = \\pi \\not y = 2x",
    ],
)
def test_a_glued_relation_side_is_a_value_against_a_relation_gold(answer):
    assert judge("y = 2x", answer)[0] == "wrong_answer"


@pytest.mark.parametrize("glue", ["{}", "\\mid", "|"])
def test_a_value_command_before_empty_braces_is_not_glue(glue):
    """``\\pi {}`` looks like a command's braced argument; π is still a value, so it is probed, never unwrapped away."""
    for first in ("\\pi", "\\infty", "\\phi"):
        assert judge("\\frac{1}{2}", f"{first} {glue} \\frac{{1}}{{2}}")[0] == "wrong_answer", first


@pytest.mark.parametrize(
    "answer",
    ["5 or six", "six", "5, \\text{three}", "5 \\text{ or three}", "twenty-five", "5 (Five)", "5 and a half"],
)
def test_a_number_written_as_a_word_is_refused(answer):
    verdict, detail = judge("5", answer)
    assert verdict == "wrong_answer" and "written as the word" in detail, detail


@pytest.mark.parametrize(
    "answer",
    [
        "3 \\pmod{5 \\mid 7}",
        "3 \\pmod{\\cancel{5} 7}",
        "3 \\pmod{5 | 7}",
        "3 \\pmod{5 {} 7}",
        "3 \\pmod{5 \\hskip1em 7}",
        "x \\equiv 3 \\pmod{5 \\hskip1em 7}",
        "3 \\pmod{\\pi \\mid 7}",
    ],
)
def test_a_modulus_is_probed_like_an_answer(answer):
    verdict, detail = judge("3 \\pmod{7}", answer)
    assert verdict == "wrong_answer" and "modulus" in detail, detail


def test_a_gold_with_an_operand_read_as_nothing_is_the_tasks_fault():
    assert "does not read the operand" in gold_finding("5, \\color{red}{6}")
    assert "does not read the operand" in gold_finding("\\pi \\mid 5")


HONEST = [
    ("30", "\\angle ABC = 30^\\circ"),  # a name read as nothing states no value
    ("30", "m\\angle ABC = 30"),
    ("25", "25 m²"),
    ("25", "25 m^2"),
    ("25", "25°C"),
    ("25", "25^\\circ F"),
    ("2\\pi", "2\\pi"),
    ("\\pi r^2", "\\pi r^2"),
    ("\\infty", "\\infty"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}"),
    ("\\alpha+\\beta", "\\beta + \\alpha"),
    ("x^2", "f(x) = x^2"),
    ("y = 2x", "y = 2x"),
    ("\\{1,2\\}", "\\{1, 2\\}"),
    ("\\{1,2\\}", "2, 1"),
    ("3 \\pmod{7}", "3 \\pmod 7"),
    ("3 \\pmod{7}", "x \\equiv 10 \\pmod{7}"),
    ("\\text{none}", "none"),  # a text gold: its words are compared, never read as numbers
    ("\\text{one}", "One"),
    ("12", "q+k+Q+K+w+W+z+Z+u+U+v+V - q-k-Q-K-w-W-z-Z-u-U-v-V + 12"),  # no spare letter left: deletion alone
    ("5", "\\displaystyle 5"),
    ("\\frac{1}{2}", "\\left(\\frac{1}{2}\\right)"),
    ("5", "\\sin^2 x + \\cos^2 x + 4"),
]


@pytest.mark.parametrize(("gold", "answer"), HONEST)
def test_an_honest_answer_with_names_constants_and_units_passes(gold, answer):
    assert judge(gold, answer) == ("passed", "")
