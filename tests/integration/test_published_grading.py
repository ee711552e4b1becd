"""Every published HumanEval and MBPP task, graded in the real sandbox (tasks/samples/published/).

* Canonical solutions: every test of every task is planned (none is refused for reward), every task
  passes, none is masked. HumanEval 164 tasks / 1,106 tests, MBPP 974 / 2,938 (challenge tests
  included), MBPP sanitized 427 / 1,324.
* Degenerate and hostile solutions (`tests.published_support.HOSTILE`: ``return None``, an object equal
  to everything, ``sys.exit(0)``, ``os._exit(0)``, fake verdict and result lines printed everywhere a
  candidate can write, builtins and ``math`` patched) pass no task and are never masked. Each task's first
  test runs first; a task whose first test passed (``assert candidate([]) == None`` for ``return None``,
  ``assert candidate(...)`` for a truthy object) runs its other tests.

Measured on the 2-core VM beside other suites, 2026-11-28 (HumanEval / MBPP / sanitized): canonical 16-59 s /
49-67 s / 24-78 s, hostile 24-62 s / 138-309 s / 107-139 s; the whole module 11:25 at load average 19-21.
"""

from __future__ import annotations

import pytest

from sandbox.failure import Verdict
from tasks.grader import Grader
from tests.published_support import HOSTILE, SETS, canonical, grade_published, hostile, published
from tests.sandbox_support import sandbox_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

COUNTS = {"humaneval": (164, 1106), "mbpp": (974, 2938), "mbpp-sanitized": (427, 1324)}


@pytest.mark.parametrize("name", list(SETS))
def test_canonical_solutions_pass_every_published_task(name):
    tasks = published(name)
    refused = [
        (t.task_id, i) for t in tasks for i, test in enumerate(t.tests) if Grader(None).plan(t, i, test)[0] is None
    ]
    assert (len(tasks), sum(len(t.tests) for t in tasks)) == COUNTS[name]
    assert refused == []
    results = grade_published([(t, canonical(t), range(len(t.tests))) for t in tasks], sandbox_config())
    failing = {
        t.task_id: [(r.index, r.verdict, r.detail) for r in rs if r.verdict != Verdict.PASSED]
        for t, rs in zip(tasks, results)
    }
    assert {k: v for k, v in failing.items() if v} == {}
    assert sum(len(rs) for rs in results) == COUNTS[name][1]


@pytest.mark.parametrize("name", list(SETS))
def test_degenerate_and_hostile_solutions_pass_no_published_task(name):
    tasks = published(name)
    items = [(t, hostile(t, kind), [0]) for kind in HOSTILE for t in tasks]
    first = grade_published(items, sandbox_config())
    again = [k for k, results in enumerate(first) if results[0].verdict == Verdict.PASSED]
    rest = grade_published(
        [(items[k][0], items[k][1], range(1, len(items[k][0].tests))) for k in again], sandbox_config()
    )
    results = list(first)
    for k, more in zip(again, rest):
        results[k] = first[k] + more
    kinds = [kind for kind in HOSTILE for _ in tasks]
    passed = [
        (kind, t.task_id)
        for kind, (t, _, _), rs in zip(kinds, items, results)
        if all(r.verdict == Verdict.PASSED for r in rs)
    ]
    masked = [
        (kind, t.task_id, r.detail)
        for kind, (t, _, _), rs in zip(kinds, items, results)
        for r in rs
        if r.verdict == Verdict.INFRA_ERROR
    ]
    assert passed == [] and masked == []
    assert len(again) < len(items) / 10  # most first tests already fail: the escalation is the exception
    if name == "humaneval":  # control: the hostile programs really ran (None is HumanEval/12's first answer)
        assert ("return_none", "HumanEval/12") in [(kinds[k], items[k][0].task_id) for k in again]
