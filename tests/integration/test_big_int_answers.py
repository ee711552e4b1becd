"""An int past 4,300 decimal digits crosses from the candidate's process as hexadecimal (tasks/driver.py, ``["ix",
hex]``): CPython refuses decimal text past ``sys.get_int_max_str_digits()``, so the driver could not write such a
value, and the judge scored a correct program ``wrong_answer`` (HumanEval's own harness compares the ints without
text). Real sandbox, real grader, both paths: a split assert judged on the host, and a loop that runs in the
checker. The correct program passes, a wrong one of the same size fails (scored, never masked), and a smaller
value passes as before.
"""

from __future__ import annotations

import pytest

from sandbox.failure import Verdict
from tasks.formats import humaneval
from tasks.grader import GraderConfig, grade_pairs
from tasks.submission import Submission
from tests.sandbox_support import sandbox_config

pytestmark = pytest.mark.docker

CONFIG = GraderConfig(default_time_s=2.0, min_time_s=2.0)
HONEST = "    result = 1\n    for k in range(2, n + 1):\n        result *= k\n    return result\n"
OFF_BY_ONE = HONEST.replace("return result", "return result + 1")
NEGATED = HONEST.replace("return result", "return -result")


def factorial_task(n: int, loop: bool):
    """``assert candidate(n) == math.factorial(n)``, split by the host; or the same in a loop, run in the checker."""
    check = f"    assert candidate({n}) == math.factorial({n})\n"
    if loop:
        check = f"    for n in (5, {n}):\n        assert candidate(n) == math.factorial(n)\n"
    return humaneval.parse(
        0,
        {
            "task_id": f"factorial-{n}-{'loop' if loop else 'split'}",
            "prompt": "def fact(n):\n    '''n! (n >= 0)'''\n",
            "entry_point": "fact",
            "canonical_solution": "    import math\n    return math.factorial(n)\n",
            "test": f"import math\n\ndef check(candidate):\n{check}",
        },
    )


def grade(n: int, loop: bool, *programs: str):
    task = factorial_task(n, loop)
    pairs = [(task, Submission(task_id=task.task_id, completion=code)) for code in programs]
    return grade_pairs(pairs, CONFIG, sandbox_config())


@pytest.mark.parametrize("loop", [False, True], ids=["split assert", "in the checker"])
def test_a_value_under_4300_digits_passes_as_before(loop):
    (result,) = grade(1000, loop, HONEST)  # 2568 digits
    assert result.passed and result.tests[0].split is (not loop), [(t.verdict, t.detail) for t in result.tests]


@pytest.mark.parametrize("loop", [False, True], ids=["split assert", "in the checker"])
def test_an_honest_value_past_4300_digits_passes_and_a_wrong_one_fails(loop):
    honest, off, negated = grade(2000, loop, HONEST, OFF_BY_ONE, NEGATED)  # 2000! has 5736 digits
    assert honest.passed and honest.tests[0].verdict == Verdict.PASSED, [(t.verdict, t.detail) for t in honest.tests]
    for wrong in (off, negated):
        assert not wrong.passed and not wrong.infra_error, [(t.verdict, t.detail) for t in wrong.tests]
        assert wrong.tests[-1].verdict == Verdict.WRONG_ANSWER, wrong.tests
