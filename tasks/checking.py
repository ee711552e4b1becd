"""What the host sends the checker (`tasks/checker.py`) for an assert test it does not split.

The test's own code runs in the checker; the candidate's code in a process of
its own. The host decides, from the task's text alone, what each side
provides:

* ``prelude``: statements taken from the task, never from the candidate: a
  HumanEval prompt's imports and helper definitions (``poly``,
  ``encode_cyclic``, ``is_palindrome``: the candidate's completion defines
  them too, but the test gets the prompt's), and the imports of the task's
  reference solution that bind a name the test uses (MBPP's ``sys``,
  ``math``, ``Counter``, ``import heapq as hq``);
* ``names``: every other name the test code (set-up included) reads and
  does not bind itself, builtins aside unless the reference solution
  defines that name itself (MBPP's ``def sum(a, b)``, whose tests call
  ``sum(10, 15)``): the candidate's functions and classes, reached through
  proxies. HumanEval tests take only the entry point, bound as ``candidate``.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from functools import lru_cache

from tasks.task import AssertTest, Task

_BUILTINS = frozenset(dir(builtins))
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)


def _parsed(source: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():  # published code is full of "\d" in plain strings
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _bound(tree: ast.AST) -> set[str]:
    """Every name the code binds anywhere (assignment targets, definitions, parameters, imports, handlers)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return bound


def free_names(*sources: str) -> set[str]:
    """Names the code reads and binds nowhere, builtins aside: what it must get from elsewhere."""
    trees = [tree for tree in map(_parsed, sources) if tree is not None]
    loaded = {n.id for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = set().union(*(_bound(tree) for tree in trees))
    return loaded - bound - _BUILTINS


def prompt_helpers(prompt: str, entry_point: str | None) -> str:
    """The prompt's top-level imports, assignments and definitions, the entry point's stub aside."""
    tree = _parsed(prompt) or _parsed(prompt + "\n    pass\n")
    if tree is None:
        return ""
    kept = [
        statement
        for statement in tree.body
        if isinstance(statement, _DEFINITIONS) and getattr(statement, "name", None) != entry_point
    ]
    return "\n".join(ast.unparse(statement) for statement in kept)


def reference_imports(reference: str, names: set[str]) -> str:
    """The reference solution's top-level imports that bind one of ``names``."""
    tree = _parsed(reference)
    if tree is None:
        return ""
    kept = [
        statement
        for statement in tree.body
        if isinstance(statement, (ast.Import, ast.ImportFrom)) and _bound(statement) & names
    ]
    return "\n".join(ast.unparse(statement) for statement in kept)


@lru_cache(maxsize=256)
def _defined(reference: str) -> frozenset[str]:
    tree = _parsed(reference)
    if tree is None:
        return frozenset()
    return frozenset(s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def shadowed(task: Task, test: AssertTest) -> set[str]:
    """Builtin names the test reads that the task's reference solution defines: the test means the solution's."""
    if task.source_format == "humaneval" or not task.solutions:
        return set()
    trees = [tree for tree in map(_parsed, (task.setup_code, test.source)) if tree is not None]
    loaded = {n.id for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded & _BUILTINS & _defined(task.solutions[0])


def checker_request(task: Task, test: AssertTest) -> dict:
    """The task-side fields of the checker's request for ``test``."""
    if task.source_format == "humaneval":
        return {
            "names": [task.fn_name],
            "candidate": task.fn_name,
            "prelude": prompt_helpers(task.prompt, task.fn_name),
            "setup": task.setup_code,
            "test": test.source,
        }
    needed = free_names(task.setup_code, test.source) | shadowed(task, test)
    prelude = reference_imports(task.solutions[0], needed) if task.solutions else ""
    from_prelude = _bound(_parsed(prelude) or ast.Module(body=[], type_ignores=[]))
    return {
        "names": sorted(needed - from_prelude),
        "candidate": None,
        "prelude": prelude,
        "setup": task.setup_code,
        "test": test.source,
    }
