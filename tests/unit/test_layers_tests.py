"""Test modules import shared fakes and helpers from tests/fakes.py and tests/*_support.py, never from each other.

A test module that imports another one runs (and couples to) that module's tests and fixtures.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TEST_PACKAGES = ("tests.unit.test_", "tests.integration.test_")


def imports_of_test_modules(source: str) -> list[str]:
    """Dotted names of test modules (``tests.unit.test_*``, ``tests.integration.test_*``) that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [name for name in names if name.startswith(TEST_PACKAGES)][:1]
    return found


def test_the_check_catches_every_import_form():
    source = (
        "from tests.unit.test_episode_loop import FakePool\nimport tests.integration.test_trainer_masked\n"
        "from tests.unit import test_policy_model\ndef f():\n    from tests.unit.test_cp_grader import task\n"
    )
    assert imports_of_test_modules(source) == [
        "tests.unit.test_episode_loop",
        "tests.integration.test_trainer_masked",
        "tests.unit.test_policy_model",
        "tests.unit.test_cp_grader",
    ]
    assert imports_of_test_modules("from tests.fakes import FakePool\nfrom tests.sandbox_support import sh\n") == []


def test_no_test_module_imports_another():
    offenders = {
        str(path.relative_to(TESTS.parent)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := imports_of_test_modules(path.read_text()))
    }
    assert not offenders, f"import shared code from tests/fakes.py or tests/*_support.py instead: {offenders}"
