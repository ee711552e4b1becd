"""Layers import one way (STYLE.md rule 1), checked on the source: every import of every module.

    images, sandbox  <-  tasks  <-  gym  ->  policies.sampling (the RolloutEngine interface)
                                              policies  <-  kernels ... ; trainer uses them all

Imports are read with `ast`, at module level and inside functions alike (a lazy import is still an
arrow), plus ``importlib.import_module("literal")`` calls. Names kept as strings in a lazy registry
(`gym.cli.COMMANDS`, `gym.commands.bench.BENCHES`, `gym.policy_client.ENGINES`, `gym.fault.KNOWN`) are not
imports of the registry's package: the module they name is imported only when its command runs.
Each exception below names the module, what it imports and why.

The task-family seam (`tasks.family`) is checked the same way: outside ``tasks/`` no code tests a task's
type (``isinstance``/``issubclass``, ``type(x) is``, a ``case`` pattern) against a task class a registered
family owns (`tasks.families.TASK_TYPES`, under any name it is imported as); it asks the task's family
(``tasks.families.kind_of(task)``) instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sandbox", "images", "tasks", "gym", "policies", "kernels", "trainer")

# importer package -> project packages it may import (itself always)
ALLOWED: dict[str, frozenset[str]] = {
    "images": frozenset({"sandbox"}),
    "sandbox": frozenset({"images"}),  # sandbox.config's default image tag: images.inputs (no Docker I/O)
    "tasks": frozenset({"sandbox", "images"}),
    "gym": frozenset({"sandbox", "images", "tasks"}),
    "kernels": frozenset(),
    "policies": frozenset({"kernels"}),
    "trainer": frozenset(PACKAGES),
}

# module -> modules it may import beyond ALLOWED, with the reason
INTERFACES: dict[str, str] = {
    "policies.sampling": "the RolloutEngine interface and its request/response types (torch-free): "
    "how the gym reaches any policy",
}
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("gym.policy_client", "policies.hf_adapter"): "`checkpoint:DIR` policy spec: import_module only when that spec "
    "is named (torch loads there, never on `import gym`)",
    ("gym.policy_client", "policies.generation"): "same `checkpoint:DIR` loader: the generation engine in process",
    ("gym.policy_client", "policies.vllm_engine"): "`vllm:URL` policy spec: the vLLM client lives with the other "
    "engines in policies (torch-free: httpx on trio); imported only when that spec is named",
    ("policies.serve_config", "sandbox.config_file"): "the project's one YAML/TOML config loader and error "
    "formatter (issue 18 item 5); dependency-free, it has no home below both stacks",
    ("policies.serve_cli", "gym.format.openai_chat"): "`gym serve`'s chat completions speak the model family's chat "
    "format, which the gym owns (torch-free): imported only when serve starts, handed to the server as a "
    "`policies.chat_tools.ChatRenderer`, so the server itself never imports the gym",
    ("policies.serve_cli", "gym.format.template"): "same: the chat format's error type, for a one-line config error",
    ("policies.serve_cli", "gym.format.tokenizer"): "same: the tokenizer's error type, for a one-line config error",
}
# packages that never import torch, at any level (STYLE.md rule 1)
TORCH_FREE = ("sandbox", "images", "tasks", "gym")


def _task_type_names() -> frozenset[str]:
    from tasks.families import TASK_TYPES

    return frozenset(task_type.__name__ for task_type in TASK_TYPES)


def _names(node: ast.AST | None) -> set[str]:
    """Every bare name and attribute name in an expression (``SweInstance``, ``problem.MathTask``, a tuple, a union)."""
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def type_tests(root: Path, task_types: frozenset[str]) -> list[str]:
    """Every test of a task's type outside ``tasks/`` in ``root``'s packages, as ``file:line: what``: a call of
    ``isinstance``/``issubclass``, a ``type(x) is``/``==`` comparison or a ``case`` class pattern naming one of
    ``task_types``, or a name imported from ``tasks`` as one of them (``from tasks.task import Task as T``)."""
    found = []
    for package in PACKAGES:
        if package == "tasks":
            continue
        for path in modules(root, package):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            aliases = {
                alias.asname or alias.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tasks"
                for alias in node.names
                if alias.name in task_types
            }
            banned = task_types | aliases
            for node in ast.walk(tree):
                named: set[str] = set()
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
                    if node.func.id in ("isinstance", "issubclass"):
                        named = _names(node.args[1])
                elif isinstance(node, ast.Compare) and any(isinstance(op, ast.Is | ast.Eq) for op in node.ops):
                    sides = [node.left, *node.comparators]
                    if any(
                        isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "type" for s in sides
                    ):
                        named = set().union(*(_names(s) for s in sides))
                elif isinstance(node, ast.MatchClass):
                    named = _names(node.cls)
                if named & banned:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.append(f"{where}: tests a task's type ({', '.join(sorted(named & banned))})")
    return found


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted module)`` of every absolute import in ``path`` (any depth) and every
    ``importlib.import_module("...")`` with a literal name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in PACKAGES:  # `from policies import generation` imports policies.generation
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def modules(root: Path, package: str) -> list[Path]:
    """The package's modules: files in directories with an ``__init__.py`` all the way up (the SWE
    repositories vendored under tasks/swe/repos are task data, not our code)."""
    return [
        path
        for path in sorted((root / package).rglob("*.py"))
        if all((parent / "__init__.py").exists() for parent in path.parents if parent.is_relative_to(root / package))
    ]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def allowed(importer: str, imported: str) -> bool:
    source, target = importer.split(".")[0], imported.split(".")[0]
    if target == source or target in ALLOWED[source]:
        return True
    if source == "gym" and any(imported == name or imported.startswith(name + ".") for name in INTERFACES):
        return True
    return (importer, imported) in EXCEPTIONS


def violations(root: Path) -> list[str]:
    """Every import in ``root``'s packages that the rules above forbid, as ``file:line: a -> b``."""
    bad = []
    for package in PACKAGES:
        for path in modules(root, package):
            importer = module_name(root, path)
            for line, imported in imports(path):
                top = imported.split(".")[0]
                where = f"{path.relative_to(root)}:{line}: {importer} -> {imported}"
                if top == "torch" and package in TORCH_FREE:
                    bad.append(where + " (torch)")
                elif top in PACKAGES and not allowed(importer, imported):
                    bad.append(where)
    return bad


def package_cycles(root: Path) -> list[list[str]]:
    """Cycles among the packages, counting every import but the documented exceptions."""
    edges: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for package in PACKAGES:
        for path in modules(root, package):
            importer = module_name(root, path)
            for _, imported in imports(path):
                top = imported.split(".")[0]
                if top in PACKAGES and top != package and (importer, imported) not in EXCEPTIONS:
                    edges[package].add(top)
    cycles, path = [], []

    def visit(node: str) -> None:
        if node in path:
            cycles.append(path[path.index(node) :] + [node])
            return
        path.append(node)
        for nxt in sorted(edges[node]):
            visit(nxt)
        path.pop()

    for package in PACKAGES:
        visit(package)
    return cycles


def empty_packages(root: Path) -> None:
    """Every project package as an empty one under ``root`` (the checks run on a tree made for the test)."""
    for name in PACKAGES:
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("")


def test_every_import_follows_the_layers():
    assert violations(ROOT) == []


def test_the_packages_form_no_cycle():
    assert package_cycles(ROOT) == []


def test_no_code_outside_tasks_tests_a_tasks_type():
    """What differs per family is asked of the task's family, never of its type (`tasks.families.kind_of`)."""
    assert type_tests(ROOT, _task_type_names()) == []


def test_every_registered_familys_task_types_are_checked():
    """The check reads the registry: a family added there is covered without editing this file."""
    names = _task_type_names()
    assert {"Task", "SweInstance", "MathTask"} <= names


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("isinstance(task, SweInstance)", "a plain isinstance"),
        ("isinstance(task, (Task, MathTask))", "a tuple of types"),
        ("isinstance(task, problem.MathTask | int)", "an attribute in a union"),
        ("not isinstance(task, Instance)", "an alias it was imported as"),
        ("type(task) is Task", "a type comparison"),
        ("issubclass(type(task), MathTask)", "issubclass"),
    ],
)
def test_a_type_test_outside_tasks_is_caught(tmp_path, line, why):
    """The check can fail: one task-type test in a gym module, even inside a function, is reported."""
    empty_packages(tmp_path)
    source = f"from tasks.swe.instance import SweInstance as Instance\n\n\ndef later(task):\n    return {line}\n"
    (tmp_path / "gym" / "added.py").write_text(source)
    (tmp_path / "tasks" / "family.py").write_text(source)  # inside tasks/ it is the seam's own business
    found = type_tests(tmp_path, _task_type_names())
    assert len(found) == 1 and found[0].startswith("gym/added.py:5: "), why


def test_a_case_pattern_on_a_task_type_is_caught(tmp_path):
    empty_packages(tmp_path)
    source = "def later(task):\n    match task:\n        case MathTask():\n            return 1\n"
    (tmp_path / "trainer" / "added.py").write_text(source)
    assert [line.split(": ")[0] for line in type_tests(tmp_path, _task_type_names())] == ["trainer/added.py:3"]


def test_every_exception_is_still_an_import():
    """An exception the code no longer needs is deleted, not kept as a hole in the rule."""
    seen = set()
    for package in PACKAGES:
        for path in modules(ROOT, package):
            seen |= {(module_name(ROOT, path), imported) for _, imported in imports(path)}
    assert set(EXCEPTIONS) <= seen


def test_the_cli_registries_name_modules_that_exist():
    """The lazy registries are strings: a moved module must be renamed there too."""
    text = "\n".join(
        (ROOT / p).read_text(encoding="utf-8") for p in ("gym/cli.py", "gym/commands/bench.py", "gym/policy_client.py")
    )
    dotted = set(re.findall(r'"((?:%s)(?:\.\w+)+)' % "|".join(PACKAGES), text))
    assert dotted, "no registry entries found"
    missing = [
        name
        for name in sorted(dotted)
        if not (ROOT / (name.replace(".", "/") + ".py")).exists()
        and not (ROOT / name.replace(".", "/") / "__init__.py").exists()
        and not (ROOT / (name.rsplit(".", 1)[0].replace(".", "/") + ".py")).exists()
    ]
    assert missing == []


def module_cycles(root: Path) -> list[list[str]]:
    """Cycles among the project's modules, counting every import (lazy ones and those under ``TYPE_CHECKING`` too):
    two modules that need each other's types share a third that holds them. ``from pkg import name`` is an import
    of the module ``pkg.name`` when there is one, else of ``pkg``; a module's own packages are not counted (Python
    runs a package's ``__init__`` before any of its modules)."""
    names = {module_name(root, path): path for package in PACKAGES for path in modules(root, package)}
    edges: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets = {alias.name for alias in node.names}
            else:
                continue
            edges[name] |= {t for t in targets if t in names and t != name and not name.startswith(t + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(names):
        if node not in index:
            visit(node)
    return cycles


def test_no_two_modules_import_each_other():
    assert module_cycles(ROOT) == []


def test_a_type_only_cycle_is_caught(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "__init__.py").write_text("")
    (tmp_path / "policies" / "engine.py").write_text("from policies.decode import step\n")
    (tmp_path / "policies" / "decode.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from policies.engine import Cache\n"
    )
    assert module_cycles(tmp_path) == [["policies.decode", "policies.engine"]]


def bench_imports(root: Path) -> list[str]:
    """Every import of a benchmark module (one `gym.commands.bench.BENCHES` names, or one under ``gym/bench/``) by
    library code, as ``file:line: a -> b``: only the CLI (`gym.commands.bench`) and other benchmarks import them."""
    from gym.commands.bench import BENCHES

    benches = {module for module, _, _ in BENCHES.values()}

    def is_bench(name: str) -> bool:
        return name in benches or name == "gym.bench" or name.startswith("gym.bench.")

    found = []
    for package in PACKAGES:
        for path in modules(root, package):
            importer = module_name(root, path)
            if is_bench(importer) or importer == "gym.commands.bench":
                continue
            found += [
                f"{path.relative_to(root)}:{line}: {importer} -> {name}"
                for line, name in imports(path)
                if is_bench(name)
            ]
    return found


def test_no_library_code_imports_a_benchmark():
    assert bench_imports(ROOT) == []


def test_a_benchmark_imported_by_library_code_is_caught(tmp_path):
    (tmp_path / "gym").mkdir()
    (tmp_path / "gym" / "__init__.py").write_text("")
    (tmp_path / "gym" / "episode.py").write_text("from gym.bench.report import record\n")
    assert bench_imports(tmp_path) == ["gym/episode.py:1: gym.episode -> gym.bench.report"]


@pytest.mark.parametrize(
    ("package", "line", "why"),
    [
        ("gym", "from trainer.loop import train", "gym -> trainer"),
        ("sandbox", "import tasks.grader", "sandbox -> tasks"),
        ("tasks", "from gym.episode import Episode", "tasks -> gym"),
        ("images", "from tasks.swe import instance", "images -> tasks"),
        ("gym", "from policies.generation import GenerationEngine", "gym -> policies beyond the interface"),
        ("policies", "from gym.rollout import run", "policies -> gym"),
        ("tasks", "import torch", "torch in a torch-free layer"),
    ],
)
def test_an_upward_import_is_caught(tmp_path, package, line, why):
    """The check can fail: one upward import, even inside a function, is reported."""
    empty_packages(tmp_path)
    (tmp_path / package / "added.py").write_text(f"def later():\n    {line}\n")
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].startswith(f"{package}/added.py:2: "), why


def test_a_loop_between_packages_is_caught(tmp_path):
    empty_packages(tmp_path)
    (tmp_path / "images" / "a.py").write_text("import sandbox.engine\n")
    (tmp_path / "sandbox" / "b.py").write_text("import images.inputs\n")
    assert violations(tmp_path) == []  # each arrow is allowed alone...
    assert package_cycles(tmp_path)  # ...but together they are a loop
