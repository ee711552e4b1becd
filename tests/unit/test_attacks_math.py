"""Attacks on the math answer check as an adversarial policy would make them: a wrong answer must never pass,
an honest one must still pass, and blame must follow how far the check got (the answer's failure scored 0,
only the gold's or the host's masked).

Each table row was tried against the check; the rows marked in the comments passed before the fix (holes)."""

from __future__ import annotations

import pytest

import tasks.math.grader as math_grader
from sandbox.failure import Verdict
from tasks.math import check
from tasks.math.check import judge, normal
from tasks.math.grader import MathGrader, MathGraderConfig, grade_sync
from tasks.math.problem import MathTask
from tests.math_support import fake_check

# Hedges: two values stated, the gold among them, with the separator spelled so the candidate cut missed it.
HIDDEN_HEDGES = [
    ("5", "\\boxed{\\boxed{5}, 6}"),  # hole: math-verify graded the inner box alone
    ("5", "\\boxed{6}\\boxed{5}"),
    ("5", "5~6"),  # hole: LaTeX non-breaking space
    ("5", "5\\\\6"),  # hole: LaTeX line break
    ("5", "x=6\\\\x=5"),  # hole
    ("5", "5 \\quad 6"),
    ("5", "6 \\quad\\text{Final}: 5"),  # hole: spacing and \text around prose
    ("5", "6 \\text{ wait } 5"),  # hole: prose word between values
    ("5", "The answer is 71 wait no 5"),
    ("5", "5 \\text{ (or 6)}"),  # hole: "or" inside brackets
    ("5", "5\\text{,}6"),  # hole: comma inside \text
    ("5", "5\\text{ either }6"),  # hole
    ("5", "x=6 \\implies x=5"),  # hole: a chain of relations
    ("5", "6=5"),  # hole: math-verify reads an equation's right side
    ("5", "6 \\approx 5"),
    ("5", "6 \\Rightarrow 5"),  # hole
    ("5", "5\u30026"),  # hole: ideographic full stop
    ("5", "5\uff1b6"),  # hole: full-width semicolon
    ("5", "5\uff0c6"),  # hole: full-width comma
    ("42", "42\u200b43"),  # hole: zero-width space
    ("42", "42\u206043"),  # hole: word joiner
    ("42", "42\x0b43"),  # vertical tab
    ("42", "42\u202843"),  # line separator
    ("5", "5 or 6"),
    ("5", "x = 5 or x = 6"),
    ("5", "\\{5, 6\\}"),
    ("5", "[4, 6]"),
    ("5", "(4,6)"),
    ("5", "x \\in \\{5, 6\\}"),
    ("5", "5 \\lor 6"),
    ("5", "5 \\pm 1"),
    ("5", "\\begin{cases}5\\\\6\\end{cases}"),
    ("5", "$5$ or $6$"),
    ("5", "$6$ is wrong, it's $5$"),
    ("\\frac{1}{2}", "\\frac{1}{2}\\text{ or }\\frac{1}{3}"),
    ("5", "\\begin{matrix}5\\\\6\\end{matrix}"),  # an environment's rows stay whole: never one of them alone
    ("5", "\\begin{aligned}x&=6\\\\x&=5\\end{aligned}"),
    ("5", "\\begin{array}{c}6\\\\5\\end{array}"),
    ("5", "\\begin{gathered}6\\\\5\\end{gathered}"),
]

# Two values with LaTeX between them that math-verify reads past (it keeps the last value): no list of
# separators closes this class, so the check asks which numbers were read (`unread_number`).
UNREAD_NUMBERS = [
    "6 \\boxed 5",  # hole
    "\\boxed 6 \\boxed 5",  # hole
    "\\[ 6 \\] \\[ 5 \\]",  # hole
    "$6$$5$",  # hole
    "6 \\hskip1em 5",  # hole
    "6 \\kern1em 5",  # hole
    "6 \\enskip 5",  # hole
    "6 \\mkern9mu 5",  # hole
    "\\cancel{6} 5",  # hole
    "\\sout{6} 5",  # hole
    "6 \\hphantom{0} 5",  # hole
    "6 \\big 5",  # hole
    "6 | 5",  # hole
    "6 \\| 5",  # hole
    "6 \\colon 5",  # hole
    "6 \\lor 5",  # hole
    "6 \\hbox{ } 5",  # hole
    "6 \\dots 5",  # hole
    "6\\tag{1} 5",  # hole
    "{6 \\atop 5}",  # hole
    "6 \\mapsto 5",  # hole
    "6\\hookrightarrow 5",  # hole
    "5^{6}_{}",  # hole
    "6\u3164 5",  # hole: Hangul filler, a letter, not a space
    "6\u2800 5",  # hole: braille blank
    "6 \\phantom{x} 5",
    "6 \\not 5",
    "THE ANSWER IS 6 WAIT 5",
    "6 ABC 5",
]
PMATRIX = "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"

# Wrong values dressed up: near misses, lookalikes, sets and bounds that contain the gold.
WRONG_VALUES = [
    ("5", "5.0000000001"),
    ("5", "4.99999999"),
    ("5", "5+10^{-20}"),
    ("42", "41.999999999999999999999"),
    ("42", "41.\\overline{9}"),
    ("5", "x \\geq 5"),
    ("5", "5 \\le x \\le 6"),
    ("5", "\\mathbb{R}"),
    ("5", "(-\\infty, \\infty)"),
    ("5", "x"),
    ("42", "4\u200b2"),
    ("5", "\\text{6}5"),
    (PMATRIX, "2"),  # hole: math-verify read a vector as its last entry, so the last entry alone passed
    (PMATRIX, "\\begin{pmatrix} 2 \\\\ 2 \\end{pmatrix}"),  # hole, the same way
    ("52", "5\u00b2"),  # hole while the check read every compatibility form: 5 squared read as 52
    ("12", "\u00bd2"),
]

HONEST = [
    ("5", "\\boxed{5}"),
    ("5", "x = 5"),
    ("5", "\\approx 5"),
    ("5", "5 \\text{ cm}"),
    ("5", "5\\,\\mathrm{cm}"),
    ("5", "\uff15"),  # a full-width five is five
    ("1000", "1\\,000"),
    ("5000", "5{,}000"),
    ("1000", "1,000"),
    ("(1, 2)", "\\boxed{(1, 2)}"),
    ("(1, 2)", "\\boxed{1, 2}"),
    ("x^2+y^2=25", "x^2+y^2=25"),
    ("y=2x+3", "y = 2x+3"),
    ("2x+3", "y=2x+3"),
    ("5", "2+3=5"),
    ("72", "The answer is \\boxed{72}."),
    ("\\frac{1}{2}", "\\dfrac{1}{2}"),
    ("4", "f(2) = 4"),  # a function's value is not a second answer
    (PMATRIX, "\\begin{bmatrix}1\\\\2\\end{bmatrix}"),  # a vector is read whole, as a tuple
    ("\\begin{pmatrix} -1 \\\\ 2 \\\\ 5 \\end{pmatrix}", "\\begin{pmatrix}-1\\\\2\\\\5\\end{pmatrix}"),
    ("13", "x_1 = 13"),
    ("30", "\\angle ABC = 30^\\circ"),  # point names are not prose
    ("1.5", "1\\frac{1}{2}"),
    ("5", "5 \\; \\text{units}"),
    ("5", "\\textbf{5}"),
    ("18", "18 \\text{ miles per hour}"),
    ("-2", "\\left( -2 \\right)"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),  # rows are not hedges
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
]


@pytest.mark.parametrize(("gold", "answer"), [*HIDDEN_HEDGES, *WRONG_VALUES, *(("5", a) for a in UNREAD_NUMBERS)])
def test_a_wrong_or_hedged_answer_never_passes(gold, answer):
    verdict, detail = judge(gold, answer)
    assert verdict == "wrong_answer" and detail


@pytest.mark.parametrize(("gold", "answer"), HONEST)
def test_an_honest_answer_still_passes(gold, answer):
    assert judge(gold, answer) == ("passed", "")


def test_an_answer_with_more_numbers_than_are_probed_is_refused_not_skipped():
    verdict, detail = judge("65", "+".join(["1"] * 65))
    assert verdict == "wrong_answer" and "more than 64 operands" in detail
    assert judge("10", "+".join(["1"] * 10)) == ("passed", "")


def test_normal_form_leaves_no_separator_hidden():
    assert normal("\\boxed{\\boxed{5}, 6}") == "( 5 , 6)" and normal("\\boxed{72}") == " 72 "
    assert normal("5~6\\\\7\\quad 8") == "5 6\n7  8"
    assert normal("42\u200b43\uff0c44") == "42 43,44"
    assert normal("1\\,000 and 1{,}000") == "1000 and 1000"
    assert normal("\\boxed{5") == "\\boxed{5"  # unbalanced: left for math-verify to refuse


TASK = MathTask(task_id="t", source_format="plain", problem="What is 6 times 7?", gold="42")


@pytest.mark.parametrize("answer", ["\x00", "\ud800", "42\udcff43", "\\begin{matrix}" * 30, "-" * 500 + "42"])
def test_hostile_bytes_are_scored_never_raised_or_masked(answer):
    result = grade_sync(MathGrader(), TASK, answer)
    assert not result.passed and not result.infra_error and result.tests[0].verdict == Verdict.WRONG_ANSWER
    result.model_dump_json()  # a lone surrogate echoed in the detail must not break writing the trajectory


def test_a_gold_that_raises_is_the_tasks_fault_not_a_wrong_answer(monkeypatch):
    def parse_raising(text):
        raise RecursionError("sympy")

    assert judge("\\begin{foo}", "1")[0] == "gold_error"  # a text gold (\\text{Evelyn}) is read since issue 42
    assert judge("6 | 5", "5")[0] == "gold_error"  # a gold whose first number the checker skips
    monkeypatch.setattr(check, "parsed", parse_raising)
    assert judge("42", "42") == ("gold_error", "the gold '42' does not parse (RecursionError)")


@pytest.mark.parametrize(
    ("body", "verdict", "infra"),
    [
        # the answer killed the check after the gold was read: the candidate's failure, scored
        ("print('gold read', file=sys.stderr, flush=True); os._exit(3)", Verdict.RUNTIME_ERROR, False),
        ("print('gold read', file=sys.stderr, flush=True); os.kill(os.getpid(), signal.SIGKILL)", "memory_limit", 0),
        ("print('gold read', file=sys.stderr, flush=True); raise MemoryError", Verdict.MEMORY_LIMIT, False),
        ("print('gold read', file=sys.stderr, flush=True); print('not json')", Verdict.RUNTIME_ERROR, False),
        # it died before the gold was read: the task's or the host's failure, masked
        ("os._exit(3)", Verdict.INFRA_ERROR, True),
        ("raise MemoryError", Verdict.INFRA_ERROR, True),
        ('print(\'{"verdict": "gold_error", "detail": "no gold"}\')', Verdict.INFRA_ERROR, True),
    ],
)
def test_blame_follows_how_far_the_check_got(tmp_path, monkeypatch, body, verdict, infra):
    monkeypatch.setattr(math_grader, "CHECK", fake_check(tmp_path, body))
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=20)), TASK, "42")
    assert result.tests[0].verdict == Verdict(verdict) and result.infra_error == bool(infra) and not result.passed


def test_a_check_that_hangs_before_the_gold_is_masked(tmp_path, monkeypatch):
    monkeypatch.setattr(math_grader, "CHECK", fake_check(tmp_path, "import time; time.sleep(30)"))
    result = grade_sync(MathGrader(MathGraderConfig(start_timeout_s=1)), TASK, "42")
    assert result.infra_error and "ran past 1 s before reading the gold" in result.detail
    assert result.wall_s < 20  # killed at the start's bound, not waited out


def test_a_check_that_hangs_after_the_gold_is_the_answers_time_limit(tmp_path, monkeypatch):
    body = "print('gold read', file=sys.stderr, flush=True); import time; time.sleep(30)"
    monkeypatch.setattr(math_grader, "CHECK", fake_check(tmp_path, body))
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=1)), TASK, "42")
    assert result.tests[0].verdict == Verdict.TIME_LIMIT and not result.infra_error


def test_the_answers_limit_is_cpu_time_and_a_busy_check_is_killed_at_it(tmp_path, monkeypatch):
    """A check that computes after the gold is killed once it used timeout_s of CPU, long before the backstop."""
    body = "print('gold read', file=sys.stderr, flush=True)\nwhile True:\n    pass"
    monkeypatch.setattr(math_grader, "CHECK", fake_check(tmp_path, body))
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=1, backstop_factor=30)), TASK, "42")
    assert result.tests[0].verdict == Verdict.TIME_LIMIT and not result.infra_error
    assert result.wall_s < 25  # 1 s of CPU (beside other work), never the 30 s backstop


STARVED = """
print('gold read', file=sys.stderr, flush=True)
os.sched_setaffinity(0, {{0}})
for _ in range({burners}):  # burners at nice 0 on the check's one CPU, ending on their own after the backstop
    if os.fork() == 0:
        import time
        end = time.monotonic() + 6
        while time.monotonic() < end:
            pass
        os._exit(0)
os.nice(19)
while True:
    pass
"""


@pytest.mark.parametrize("burners", [2, 12])
def test_a_check_the_host_keeps_from_a_cpu_is_masked_not_the_answers_time_limit(tmp_path, monkeypatch, burners):
    """At the wall-clock backstop a check that waited for a CPU most of the time was starved by the host (here
    burners at nice 0 beside it at nice 19 on one CPU: it gets ~1% of it or less): infra_error, never the answer's 0.
    With twelve, the check runs so rarely that the kernel's run delay, brought up to date only when it runs, shows
    little of its wait by the backstop (as two burners did beside a loaded suite): runnable at every poll, its time
    off the CPU counts as waiting."""
    monkeypatch.setattr(math_grader, "CHECK", fake_check(tmp_path, STARVED.format(burners=burners)))
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=1, backstop_factor=2)), TASK, "42")
    assert result.infra_error and "the host starved the check" in result.detail, result.detail
