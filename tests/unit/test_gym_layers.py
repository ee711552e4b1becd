"""The gym's modules import one way: no cycle among them, type-only imports included (issue 13: the
circle engine -> environment -> episode -> engine is gone; an episode takes what it needs)."""

from __future__ import annotations

import ast
from pathlib import Path

GYM = Path(__file__).resolve().parents[2] / "gym"


def imports_of(path: Path) -> set[str]:
    """Every ``gym.X`` module a file imports, at any level (functions and TYPE_CHECKING blocks included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gym."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("gym."))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_gym_modules_form_no_import_cycle():
    graph = {path.stem: imports_of(path) - {path.stem} for path in GYM.glob("*.py")}
    assert "engine" not in graph["episode"] and "environment" not in graph["episode"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"engine": {"environment"}, "environment": {"episode"}, "episode": {"engine"}}) == [
        ["engine", "environment", "episode", "engine"]
    ]
