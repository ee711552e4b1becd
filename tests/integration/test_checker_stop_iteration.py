"""A StopIteration the candidate raises never ends the test's own iteration (tasks/checker.py, ``reraised``).

The checker raises again, in the test, a fresh instance of the builtin class of the candidate's exception. Raised by
``candidate(x)`` inside ``map``, a StopIteration would be read by ``map`` as the end of its items, so
``all(map(lambda x: candidate(x) == f(x), xs))`` would be ``all([])``, True, and ``for x, y in zip(xs,
map(candidate, xs))`` would run no iteration (in-process Python behaves so). The checker refuses it, as it refuses
SystemExit, KeyboardInterrupt and GeneratorExit: the test ends ``aborted``, scored.

Each wrong program scores 0, never masked; the honest control passes and the plain wrong answer fails.
"""

from __future__ import annotations

import pytest

from tasks.formats import humaneval
from tests.checker_support import grade, scored_zero

pytestmark = pytest.mark.docker


def task(name: str, check: str):
    return humaneval.parse(
        0,
        {
            "task_id": name,
            "prompt": "def twice(x):\n    '''2 * x'''\n",
            "entry_point": "twice",
            "canonical_solution": "    return 2 * x\n",
            "test": "def check(candidate):\n" + check,
        },
    )


ALL_MAP = task("all-map", "    assert all(map(lambda x: candidate(x) == 2 * x, range(20)))\n")
ZIP_MAP = task(
    "zip-map", "    xs = list(range(20))\n    for x, y in zip(xs, map(candidate, xs)):\n        assert y == 2 * x\n"
)
STOP = "    raise StopIteration\n"


def test_controls():
    """Both tests run in the checker; the honest program passes them, `return -1` fails them."""
    results = grade(
        (ALL_MAP, "    return x + x\n"), (ZIP_MAP, "    return x + x\n"), (ALL_MAP, "    return -1\n"),
        (ZIP_MAP, "    return -1\n"),
    )  # fmt: skip
    assert all(r.passed and r.tests[0].split is False for r in results[:2]), [r.tests for r in results[:2]]
    assert all(scored_zero(r) for r in results[2:]), [r.tests for r in results[2:]]


@pytest.mark.parametrize("graded", [ALL_MAP, ZIP_MAP], ids=["all(map(...))", "zip(xs, map(candidate, xs))"])
def test_a_stop_iteration_from_the_candidate_is_no_pass(graded):
    """`raise StopIteration` does not empty the test's iteration: scored 0."""
    (result,) = grade((graded, STOP))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]
