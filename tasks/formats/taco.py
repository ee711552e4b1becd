"""TACO and APPS rows (stdin/stdout or call-based).

Row shape (both)::

    {"question": str, "solutions": JSON string of [program, ...], "starter_code": str,
     "input_output": JSON string of {"inputs": [...], "outputs": [...], "fn_name"?: str}}

APPS adds ``problem_id``, ``difficulty``, ``url``; TACO adds ``time_limit``
(``"2 seconds"``), ``memory_limit`` (``"256 megabytes"``), ``name``, tags.
Without ``fn_name`` each input/output is a string (or a list of lines).
With ``fn_name`` each input is the argument list and each output the return
value, which APPS/TACO usually wrap in a one-element list (kept as
``CallTest.wrapped``: the grader accepts the value or the wrapped value).
"""

from __future__ import annotations

from typing import Any

from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import CallTest, Limits, StdinTest, Task


def looks_like(row: dict[str, Any]) -> bool:
    return "input_output" in row and "question" in row


def looks_like_apps(row: dict[str, Any]) -> bool:
    return looks_like(row) and "problem_id" in row and "time_limit" not in row


def _tests(io: dict[str, Any]) -> tuple[str, tuple[StdinTest | CallTest, ...]]:
    inputs, outputs = io.get("inputs"), io.get("outputs")
    inputs, outputs = field.decoded(inputs, "input_output.inputs"), field.decoded(outputs, "input_output.outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise MalformedRow("input_output needs lists 'inputs' and 'outputs'")
    if len(inputs) != len(outputs):
        raise MalformedRow(f"input_output has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise MalformedRow("input_output has no tests")
    fn_name = io.get("fn_name")
    if fn_name is None:
        return "stdin", tuple(
            StdinTest(input=field.text(i, f"inputs[{n}]"), output=field.text(o, f"outputs[{n}]"))
            for n, (i, o) in enumerate(zip(inputs, outputs))
        )
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise MalformedRow(f"input_output.fn_name {fn_name!r} is not an identifier")
    tests = []
    for n, (args, expected) in enumerate(zip(inputs, outputs)):
        if not isinstance(args, list):
            raise MalformedRow(f"call-based inputs[{n}] is a {type(args).__name__}, expected an argument list")
        wrapped = isinstance(expected, list) and len(expected) == 1
        tests.append(CallTest(args=args, expected=expected, wrapped=wrapped))
    return "call", tuple(tests)


def parse(index: int, row: dict[str, Any], name: str = "taco") -> Task:
    given = field.get(row, "input_output", (str, dict))
    if given == "" or given == {}:  # APPS ships problems without tests this way
        raise MalformedRow("input_output is empty: the problem has no tests")
    io = field.decoded(given, "input_output")
    if not isinstance(io, dict):
        raise MalformedRow("input_output is not an object")
    kind, tests = _tests(io)
    # APPS publishes problems without reference solutions as `"solutions": ""`
    solutions = field.decoded(field.get(row, "solutions", (str, list), []) or [], "solutions")
    if not isinstance(solutions, list):
        raise MalformedRow("solutions is not a list")
    return Task(
        task_id=field.task_id(row, ("task_id", "problem_id", "id"), index),
        source_format="apps" if name == "apps" else "taco",
        kind=kind,
        prompt=field.get(row, "question", str),
        tests=tests,
        limits=Limits(
            time_s=field.seconds(row.get("time_limit"), "time_limit"),
            memory_bytes=field.memory_bytes(row.get("memory_limit"), "memory_limit"),
        ),
        fn_name=io.get("fn_name"),
        starter_code=field.get(row, "starter_code", str, ""),
        solutions=tuple(s for s in solutions if isinstance(s, str)),
    )
