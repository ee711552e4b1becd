"""Correct math answers nested deep pass within the check's deadline: parsing and comparing cost time linear in the
nesting depth (`tasks.math.reading`), and an answer nested past MAX_DEPTH is a scored refusal, never a hang.

Issue 42, class 2. On the code before the fix, through the real check process (deadline 20 s, the 2-core VM beside
other suites): ``(((...5...)))`` passed 20 deep in 6.7 s and 40 deep in 17.0 s and ran past the deadline 80 deep;
``{{...5...}}``, ``\\frac{\\frac{..1..}{2}}{2}`` and ``(1+(1+...))`` ran past it from 20 deep (nested sets and
unevaluated products: exponential in sympy); ``\\left(`` took 18.8 s 80 deep; ``\\sqrt{`` 160 deep raised
RecursionError (scored as unreadable). Now every shape that fits in ``max_chars`` passes at each depth measured, in
0.8-9.5 s with the start (parentheses 100 deep: 1.2 s), and 101 deep is refused at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sandbox.failure import Verdict
from tasks.math.check import judge
from tasks.math.grader import MathGrader, grade_sync
from tasks.math.problem import MathTask
from tasks.math.reading import MAX_DEPTH, nesting, parsed, same
from tests.math_support import nested

SAMPLES = Path(__file__).resolve().parents[2] / "tasks" / "samples"


# Attack answers of tests/unit/test_attacks_math.py and test_math_relation_hedges.py, read by both parsers below.
ATTACKS = [
    "\\boxed{\\boxed{5}, 6}",
    "x=6 \\implies x=5",
    "6 \\hskip1em 5",
    "\\cancel{6} 5",
    "6 \\| 5",
    "{6 \\atop 5}",
    "5^{6}_{}",
    "\\begin{cases}5\\\\6\\end{cases}",
    "6 \\equiv 5 \\pmod{7}",
    "\\(6 = 5\\)",
    "\\{6\\} = 5",
    "41.\\overline{9}",
    "(-\\infty, \\infty)",
    "x \\in \\{5, 6\\}",
    "9^{9^{9}}",
    "\\sqrt[3]{x} + \\frac12 - 0.5\\%",
]


def test_a_sum_nested_60_deep_is_read_in_seconds_after_its_first_parse():
    """In this process (the limit counts CPU time once the gold is read): a depth's first parse pays for its parser
    states, each one after is fast; before, 40 levels ran past the 20 s limit. CPU time, as the check is limited:
    a loaded host stretches the wall clock (this test once took 14 s of wall at load average 7), not this."""
    gold, answer = nested("sums", 60)
    assert judge(gold, answer) == ("passed", "")
    started = time.process_time()
    assert judge(gold, answer.replace("1)", "2)", 1))[0] == "wrong_answer"
    assert time.process_time() - started < 10  # about 2 s of CPU here


@pytest.mark.parametrize(
    "answer", ["(" * 101 + "5" + ")" * 101, "{" * 150 + "5" + "}" * 150, "-" * 500 + "5"], ids=["(", "{", "-"]
)
def test_an_answer_nested_past_the_bound_is_refused_at_once_and_scored(answer):
    result = grade_sync(MathGrader(), MathTask(task_id="t", source_format="plain", problem="?", gold="5"), answer)
    assert result.tests[0].verdict == Verdict.WRONG_ANSWER and not result.infra_error
    assert f"(at most {MAX_DEPTH} are read)" in result.detail


def test_nesting_counts_brackets_of_any_kind_and_chains_of_signs():
    assert nesting("5") == 0 and nesting("(5)") == 1 and nesting("\\left(\\{[5]\\}\\right)") == 3
    assert nesting("--5") == 2 and nesting("(1)(2)") == 1


def test_a_deep_unevaluated_product_compares_in_linear_time():
    """sympy evaluates ((1/2)/2)/2 ... in time exponential in its depth (20 deep: 150 s before)."""
    gold, answer = nested("fractions", 40)
    started = time.monotonic()
    assert same(parsed(gold), parsed(answer)) and not same(parsed(gold), parsed(answer.replace("{1}", "{3}", 1)))
    assert time.monotonic() - started < 10


def test_two_stage_parsing_reads_exactly_what_ll_parsing_reads():
    """SLL first, LL on a syntax error: the same reading (or the same failure) for every 25th published MATH answer,
    attack answers of every kind, and the first half of each (texts that do not parse)."""
    import gzip

    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy, latex2sympy

    parsed("1")  # installs the two stages
    rows = [json.loads(line) for line in gzip.open(SAMPLES / "published" / "math_test_answers.jsonl.gz", "rt")]
    texts = [row["answer"] for row in rows[::25]] + ATTACKS
    texts += [text[: len(text) // 2] for text in texts]
    two_stage = _Latex2Sympy.create_parser

    def read(text: str) -> str:
        try:
            return str(latex2sympy(text))
        except Exception as exc:  # noqa: BLE001 - a failure is a reading too: it must fail the same way
            return f"raised {type(exc).__name__}"

    readings = [read(text) for text in texts]
    try:
        _Latex2Sympy.create_parser = _Latex2Sympy.ll_parser
        assert [read(text) for text in texts] == readings
    finally:
        _Latex2Sympy.create_parser = two_stage
