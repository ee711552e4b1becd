"""A minimal competitive-programming `Task` with chosen fields, for grader and judge tests."""

from __future__ import annotations

from tasks.task import AssertTest, CallTest, StdinTest, Task


def task(**fields) -> Task:
    base = dict(
        task_id="t", source_format="nemotron", kind="stdin", prompt="p", tests=(StdinTest(input="1\n", output="1\n"),)
    )
    base.update(fields)
    return Task(**base)


def stdin_task(task_id: str, tests: list[tuple[str, str]]) -> Task:
    """A stdin task of (input, expected output) tests."""
    return task(task_id=task_id, tests=tuple(StdinTest(input=i, output=o) for i, o in tests))


def call_task(task_id: str, tests: list[tuple[list, object]], fn_name: str = "solve") -> Task:
    """A call task (LiveCodeBench's shape) of (arguments, expected value) tests of ``fn_name``."""
    return task(
        task_id=task_id,
        source_format="lcb",
        kind="call",
        fn_name=fn_name,
        tests=tuple(CallTest(args=a, expected=e) for a, e in tests),
    )


def assert_task(task_id: str, asserts: list[str], prompt: str = "def solve(x):\n") -> Task:
    """A HumanEval-shaped assert task: ``prompt`` opens ``solve``, a completion is its body."""
    return task(
        task_id=task_id,
        source_format="humaneval",
        kind="assert",
        prompt=prompt,
        fn_name="solve",
        completion_prefix=prompt,
        tests=tuple(AssertTest(source=a) for a in asserts),
    )
