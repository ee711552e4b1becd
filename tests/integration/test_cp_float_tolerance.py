"""A task graded with a float tolerance compares numbers as numbers, in the real sandbox: an expected token written
as an integer (`1`) accepts a correct `1.000000`; a task whose expected outputs are all integers still takes only
integers; the float hedges stay 0 (issue 42, class 6; the rule: tasks/comparison.py)."""

from __future__ import annotations

import pytest

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from tasks.grader import GraderConfig, grade_pairs
from tasks.submission import Submission
from tasks.task import CallTest
from tests.task_support import stdin_task, task

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})
CONFIG = GraderConfig(default_time_s=1.0, min_time_s=1.0)
READ = "import sys\na, b = map(int, sys.stdin.read().split())\n"


# the mean of two integers: tests 1 and 3 are written as integers, test 2 as a decimal
MEAN = stdin_task("mean", [("1 1\n", "1\n"), ("1 2\n", "1.5\n"), ("3 5\n", "4\n")])
SUM = stdin_task("sum", [("1 2\n", "3\n"), ("5 5\n", "10\n")])
HALF = task(
    task_id="half",
    source_format="lcb",
    kind="call",
    fn_name="solve",
    tests=(CallTest(args=[2], expected=1), CallTest(args=[3], expected=1.5)),
)
CASES = {
    # (task, program, verdicts)
    "mean to six places": (MEAN, READ + "print(f'{(a + b) / 2:.6f}')\n", ["passed"] * 3),
    "mean as Python prints it": (MEAN, READ + "print((a + b) / 2)\n", ["passed"] * 3),
    "mean within the tolerance": (MEAN, READ + "print((a + b) / 2 + 5e-7)\n", ["passed"] * 3),
    "mean off past the tolerance": (MEAN, READ + "print((a + b) / 2 + 1e-3)\n", ["wrong_answer"] * 3),
    "mean as nan": (MEAN, "print('nan')\n", ["wrong_answer"] * 3),
    "mean, every candidate value": (MEAN, READ + "print(*[k / 2 for k in range(20)])\n", ["wrong_answer"] * 3),
    "integer task: the sum as a float": (SUM, READ + "print(float(a + b))\n", ["wrong_answer"] * 2),
    "integer task: the sum": (SUM, READ + "print(a + b)\n", ["passed"] * 2),
    "call: 1.0 for an expected 1": (HALF, "def solve(x):\n    return x / 2\n", ["passed"] * 2),
    "call: off past the tolerance": (HALF, "def solve(x):\n    return x / 2 + 0.01\n", ["wrong_answer"] * 2),
}


def test_numbers_are_numbers_where_the_checker_is_tolerant():
    assert MEAN.graded_as_floats and HALF.graded_as_floats and not SUM.graded_as_floats
    pairs = [(task, Submission(task_id=task.task_id, completion=code)) for task, code, _ in CASES.values()]
    results = grade_pairs(pairs, CONFIG, SANDBOX)
    got = {name: [t.verdict for t in r.tests] for name, r in zip(CASES, results)}
    want = {name: [Verdict(v) for v in verdicts] for name, (_, _, verdicts) in CASES.items()}
    assert got == want
    assert not any(r.infra_error for r in results)
