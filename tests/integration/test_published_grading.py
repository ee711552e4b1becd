"""Every published HumanEval and MBPP task, graded in the real sandbox (tasks/samples/published/).

* Canonical solutions: every test of every task is planned (none is refused for reward), every task
  passes, none is masked. HumanEval 164 tasks / 1,106 tests, MBPP 974 / 2,938 (challenge tests
  included), MBPP sanitized 427 / 1,324.
* Degenerate and hostile solutions (`tests.published_support.HOSTILE`: ``return None``, an object equal
  to everything, ``sys.exit(0)``, ``os._exit(0)``, fake verdict and result lines printed everywhere a
  candidate can write, builtins and ``math`` patched) pass no task and are never masked. Each task's first
  test runs first; a task whose first test passed (``assert candidate([]) == None`` for ``return None``,
  ``assert candidate(...)`` for a truthy object) runs its other tests. MBPP sanitized's sweep takes the
  129 of its 427 tasks that the grader sees differently from MBPP's task of the same id (tests, limits,
  entry point); the other 298 get byte-identical hostile programs and tests in MBPP's sweep.

Measured on the 2-core VM beside other suites, 2026-11-28 (HumanEval / MBPP / sanitized): canonical 16-59 s /
49-67 s / 24-78 s, hostile 24-62 s / 138-309 s / 107-139 s; the whole module 11:25 at load average 19-21.
"""

from __future__ import annotations

import pytest

from sandbox.failure import Verdict
from tasks.grader import Grader
from tasks.task import Task
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


GRADED_FIELDS = ("kind", "tests", "limits", "fn_name", "starter_code", "completion_prefix", "setup_code")


def graded_alike(task: Task, other: Task | None) -> bool:
    """The grader sees the same thing for a hostile program of either task (prompt and references aside)."""
    return other is not None and all(getattr(task, f) == getattr(other, f) for f in GRADED_FIELDS)


def hostile_sweep(name: str) -> list[Task]:
    """The tasks of ``name`` whose hostile programs are not already graded by another set's sweep: MBPP sanitized
    keeps its tasks whose tests, limits or entry point differ from the MBPP task of the same id (the rest are graded
    exactly as the MBPP sweep grades them)."""
    tasks = published(name)
    if name != "mbpp-sanitized":
        return tasks
    full = {t.task_id: t for t in published("mbpp")}
    return [t for t in tasks if not graded_alike(t, full.get(t.task_id))]


def test_the_sanitized_sweep_skips_only_tasks_the_mbpp_sweep_grades_alike():
    full = {t.task_id: t for t in published("mbpp")}
    sanitized = published("mbpp-sanitized")
    kept = hostile_sweep("mbpp-sanitized")
    skipped = [t for t in sanitized if t not in kept]
    assert 100 <= len(kept) < len(sanitized) and len(kept) + len(skipped) == COUNTS["mbpp-sanitized"][0]
    for t in skipped:  # the programs the MBPP sweep grades are these tasks' own, byte for byte
        assert all(hostile(t, kind) == hostile(full[t.task_id], kind) for kind in HOSTILE)
    assert not graded_alike(kept[0], full.get(kept[0].task_id))


@pytest.mark.parametrize("name", list(SETS))
def test_degenerate_and_hostile_solutions_pass_no_published_task(name):
    tasks = hostile_sweep(name)
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
