"""A minimal competitive-programming `Task` with chosen fields, for grader and judge tests."""

from __future__ import annotations

from tasks.task import StdinTest, Task


def task(**fields) -> Task:
    base = dict(
        task_id="t", source_format="nemotron", kind="stdin", prompt="p", tests=(StdinTest(input="1\n", output="1\n"),)
    )
    base.update(fields)
    return Task(**base)


def stdin_task(task_id: str, tests: list[tuple[str, str]]) -> Task:
    """A stdin task of (input, expected output) tests."""
    return task(task_id=task_id, tests=tuple(StdinTest(input=i, output=o) for i, o in tests))
