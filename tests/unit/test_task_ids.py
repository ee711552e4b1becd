"""One task id everywhere (`tasks.task_ids`): the pool prefix a rollout's ids carry is found and named, a few
valid ids are listed, and ids that match no prefix get no invented hint."""

from __future__ import annotations

from tasks.task_ids import prefixed, unknown_ids_hint
from tests.task_support import task


def test_prefixed_names_tasks_as_a_pool_does():
    tasks = [task(task_id="0"), task(task_id="1")]
    assert [t.task_id for t in prefixed(tasks, "taco/")] == ["taco/0", "taco/1"]
    assert prefixed(tasks, "") == tasks and [t.task_id for t in tasks] == ["0", "1"]  # the originals untouched


def test_the_hint_names_the_prefix_the_solutions_carry():
    hint = unknown_ids_hint(["0", "1", "2"], ["taco/0", "taco/9"])
    assert (
        hint
        == "the tasks file holds '0', '1', '2'; the solutions' ids carry the prefix 'taco/': pass --id-prefix taco/"
    )


def test_the_hint_lists_a_few_ids_and_invents_no_prefix():
    known = [str(i) for i in range(12)]
    assert unknown_ids_hint(known, ["x/99", "nope"]) == "the tasks file holds '0', '1', '2', '3', '4' and 7 more"
    assert unknown_ids_hint([], ["a"]) == "the tasks file holds no task"
    assert unknown_ids_hint(["gen/a/0"], ["gen/a/gen/a/0"]).endswith("pass --id-prefix gen/a/")


def test_the_hint_is_bounded_however_many_ids_the_solutions_name():
    unknown = [f"{'a/' * 500}{i}" for i in range(100_000)]
    assert unknown_ids_hint(["0"], unknown) == "the tasks file holds '0'"
