"""DeepMind CodeContests rows (stdin/stdout).

Row shape::

    {"name": str, "description": str,
     "public_tests" | "private_tests" | "generated_tests": {"input": [str], "output": [str]},
     "time_limit": {"seconds": int, "nanos": int} | null, "memory_limit_bytes": int,
     "solutions": {"language": [int], "solution": [str]}, "incorrect_solutions": {...}, ...}

All three test groups are graded (as AlphaCode did); the public ones are
also the task's examples. Reference solutions are the Python 3 ones
(language 3, or the string ``"PYTHON3"`` in re-encoded copies).
"""

from __future__ import annotations

from typing import Any

from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import Limits, StdinTest, Task

_PYTHON3 = (3, "3", "PYTHON3", "python3")


def looks_like(row: dict[str, Any]) -> bool:
    return "description" in row and ("public_tests" in row or "private_tests" in row)


def _group(row: dict[str, Any], key: str) -> tuple[StdinTest, ...]:
    group = field.decoded(field.get(row, key, (dict, str), None), key)
    if group is None:
        return ()
    if not isinstance(group, dict):
        raise MalformedRow(f"field {key!r} is a {type(group).__name__}, expected an object of input/output lists")
    inputs = field.text_list(group.get("input") or [], f"{key}.input")  # null: an empty group
    outputs = field.text_list(group.get("output") or [], f"{key}.output")
    if len(inputs) != len(outputs):
        raise MalformedRow(f"{key} has {len(inputs)} inputs but {len(outputs)} outputs")
    return tuple(StdinTest(input=i, output=o) for i, o in zip(inputs, outputs))


def _time_limit(value: Any) -> float | None:
    if isinstance(value, dict):
        seconds = field.number(value.get("seconds") or 0, "time_limit.seconds")
        nanos = field.number(value.get("nanos") or 0, "time_limit.nanos")
        total = seconds + nanos / 1e9
        return total if total > 0 else None
    return field.seconds(value, "time_limit")


def _python3_solutions(row: dict[str, Any]) -> tuple[str, ...]:
    group = field.get(row, "solutions", dict, None)
    if group is None:
        return ()
    languages, programs = group.get("language") or [], group.get("solution") or []
    if not isinstance(languages, list) or not isinstance(programs, list):
        raise MalformedRow("solutions.language and solutions.solution must be lists")
    if len(languages) != len(programs):
        raise MalformedRow("solutions.language and solutions.solution differ in length")
    return tuple(p for lang, p in zip(languages, programs) if lang in _PYTHON3 and isinstance(p, str))


def parse(index: int, row: dict[str, Any], name: str = "codecontests") -> Task:
    public = _group(row, "public_tests")
    tests = public + _group(row, "private_tests") + _group(row, "generated_tests")
    if not tests:
        raise MalformedRow("no public, private or generated tests")
    return Task(
        task_id=field.task_id(row, ("task_id", "name"), index),
        source_format="codecontests",
        kind="stdin",
        prompt=field.get(row, "description", str),
        tests=tests,
        public_tests=public,
        limits=Limits(
            time_s=_time_limit(row.get("time_limit")),
            memory_bytes=field.memory_bytes(row.get("memory_limit_bytes"), "memory_limit_bytes", bare_unit=1),
        ),
        solutions=_python3_solutions(row),
    )
