"""MBPP rows (assert-based), original and sanitized releases, read as published.

Original::  {"task_id": int, "text": str, "code": str, "test_list": [str], "test_setup_code": str,
             "challenge_test_list": [str]}
Sanitized:: {"task_id": int, "prompt": str, "code": str, "test_list": [str], "test_imports": [str]}

The completion is a whole program. Each ``test_list`` entry is one test, and so
is each ``challenge_test_list`` entry (hidden: the prompt shows only the
``test_list``); ``test_setup_code`` and ``test_imports`` are the tests'
set-up. The prompt follows the paper: the description followed by the tests
the code should pass (the function name is only known from them).
``fn_name`` is the function the first test calls, for reference only.
"""

from __future__ import annotations

import ast
from typing import Any

from tasks.assertion import HOST_FUNCTIONS, parse_assert
from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import AssertTest, Task


def looks_like(row: dict[str, Any]) -> bool:
    return "test_list" in row and ("text" in row or "prompt" in row)


def _called_function(tests: list[str]) -> str | None:
    for source in tests:
        statement = parse_assert(source)
        if statement is None:
            continue
        for node in ast.walk(statement.test):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in HOST_FUNCTIONS:
                return node.func.id
    return None


def parse(index: int, row: dict[str, Any], name: str = "mbpp") -> Task:
    text = field.get(row, "text", str, None) or field.get(row, "prompt", str)
    tests = field.string_list(field.get(row, "test_list", (list, str)), "test_list")
    if not tests:
        raise MalformedRow("test_list is empty")
    challenge = field.string_list(field.get(row, "challenge_test_list", (list, str), []), "challenge_test_list")
    for key, sources in (("test_list", tests), ("challenge_test_list", challenge)):
        for n, source in enumerate(sources):
            try:
                ast.parse(source)
            except SyntaxError as err:
                raise MalformedRow(f"{key}[{n}] does not parse: {err}") from err
    setup_parts = [field.get(row, "test_setup_code", str, "")]
    setup_parts += field.string_list(field.get(row, "test_imports", (list, str), []), "test_imports")
    code = field.get(row, "code", str, None)
    return Task(
        task_id=field.task_id(row, ("task_id",), index),
        source_format="mbpp",
        kind="assert",
        prompt=f"{text}\nYour code should pass these tests:\n\n" + "\n".join(tests),
        tests=tuple(AssertTest(source=source) for source in tests + challenge),
        fn_name=_called_function(tests),
        setup_code="\n".join(part for part in setup_parts if part.strip()),
        solutions=(code,) if code else (),
    )
