"""The harness's pytest plugin (tasks/swe/harness_plugin.py) in real pytest processes on the host: loaded with
``-p`` from its own folder as grading loads it, it records every outcome under the run's key, deletes the key before
any repository code runs, and names what package code did to pytest (a hook of its own, pytest's internals
replaced, a test file rewritten, an exit outside pytest); a pytest started inside a test records nothing."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.swe import testlog
from tasks.swe.harness import PLUGIN, SOURCE, judge, parse_record, settings_of
from tasks.swe.testlog import TestStatus
from tests.swe_tamper_support import CLASS_SWAP, HOOK_WRAPPER, PYTEST_INTERNALS

TESTS = """\
import pytest

from pkg import add


def test_ok():
    assert add(1, 2) == 3


def test_fixed():
    assert add(2, 2) == 4


@pytest.mark.xfail(reason="known")
def test_known():
    assert add(0, 0) == 1


@pytest.mark.parametrize("x", [1, 2])
def test_many(x):
    assert add(x, 0) == x


def test_optional():
    pytest.skip("no optional dependency")
"""
BROKEN = "def add(a, b):\n    return a + b if a != 2 else 0\n"


def run(
    tmp_path: Path, package: dict[str, str], tests: str = TESTS
) -> tuple[subprocess.CompletedProcess, bytes, bytes]:
    """``python -m pytest -rA`` over ``tests`` with ``package`` changed from the pristine one (``pkg/__init__.py``:
    the broken ``add``); returns the process, the record and the key."""
    repo, pristine, folder = tmp_path / "repo", tmp_path / "pristine", tmp_path / "harness"
    for root in (repo, pristine):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text(BROKEN)
        (root / "tests").mkdir()
        (root / "tests" / "test_pkg.py").write_text(tests)
    for rel, text in package.items():
        (repo / rel).write_text(text)
    folder.mkdir()
    shutil.copy(SOURCE, folder / f"{PLUGIN}.py")
    key = secrets.token_bytes(32)
    (folder / "key").write_bytes(key)
    (folder / "settings.json").write_text(settings_of(["tests/test_pkg.py"], str(repo), str(pristine)))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))},
        "PYTHONPATH": f"{folder}{os.pathsep}{repo}",
        "PYTEST_ADDOPTS": f"-p {PLUGIN}",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONSAFEPATH": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_pkg.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not (folder / "key").exists()  # read and deleted before any code of the repository ran
    record = (folder / "record").read_bytes() if (folder / "record").exists() else b""
    return proc, record, key


def test_an_honest_run_is_recorded_as_pytest_reports_it(tmp_path):
    fixed = "def add(a, b):\n    return a + b\n"
    proc, raw, key = run(tmp_path, {"pkg/__init__.py": fixed})
    record = parse_record(raw, key)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert record.statuses == {
        "tests/test_pkg.py::test_ok": TestStatus.PASSED,
        "tests/test_pkg.py::test_fixed": TestStatus.PASSED,
        "tests/test_pkg.py::test_known": TestStatus.XFAIL,
        "tests/test_pkg.py::test_many[1]": TestStatus.PASSED,
        "tests/test_pkg.py::test_many[2]": TestStatus.PASSED,
        "tests/test_pkg.py::test_optional": TestStatus.SKIPPED,
    }
    assert record.tampering == [] and record.end == 0 and record.finish == (0, 6, 0)
    log = testlog.parse(proc.stdout)
    assert judge(raw, "", key, log, proc.returncode)[0] is None
    broken, raw, key = run(tmp_path / "broken", {})
    record = parse_record(raw, key)
    assert broken.returncode == 1 and record.statuses["tests/test_pkg.py::test_fixed"] == TestStatus.FAILED
    assert record.tampering == [] and judge(raw, "", key, testlog.parse(broken.stdout), 1)[0] is None


def imported(name: str, source: str) -> dict[str, str]:
    """``pkg/<name>.py`` holding ``source``, imported by the broken ``pkg/__init__.py``."""
    return {
        f"pkg/{name}.py": source.replace("toolz-passing", "pkg-passing"),
        "pkg/__init__.py": f"from . import {name}\n{BROKEN}",
    }


@pytest.mark.parametrize(
    ("name", "source", "seen"),
    [
        ("passing", HOOK_WRAPPER, "hook pytest_runtest_makereport"),
        ("lenient", PYTEST_INTERNALS, "patched _pytest.python.Function.runtest"),
        (
            "rewrite",
            "import pathlib\npathlib.Path('tests/test_pkg.py').write_text('def test_fixed(): pass\\n')\n",
            "changed",
        ),
        ("plant", "import pathlib\npathlib.Path('tests/conftest.py').write_text('')\n", "changed"),
        ("sorting", "import builtins\nbuiltins.sorted = lambda *a, **k: []\n", "patched builtins.sorted"),
    ],
)
def test_package_code_that_acts_on_pytest_is_named(tmp_path, name, source, seen):
    proc, raw, key = run(tmp_path, imported(name, source))
    record = parse_record(raw, key)
    assert any(line.startswith(seen) for line in record.tampering), (record.tampering, proc.stdout[-2000:])
    problem, _ = judge(raw, "", key, testlog.parse(proc.stdout), proc.returncode)
    assert problem is not None and f"interfered with pytest: {seen}" in problem, problem


def test_the_forgeries_fool_the_log_without_the_harness(tmp_path):
    """Control: the hook wrapper and the patched internals make pytest itself report the broken test passing (exit 0,
    a log that adds up), so only the harness's record tells."""
    for name, source in (("passing", HOOK_WRAPPER), ("lenient", PYTEST_INTERNALS)):
        proc, _, _ = run(tmp_path / name, imported(name, source))
        log = testlog.parse(proc.stdout)
        assert proc.returncode == 0 and log.consistency_problem() is None, (name, proc.stdout[-2000:])
        assert log.statuses["tests/test_pkg.py::test_fixed"] == TestStatus.PASSED, name


def test_an_exit_outside_pytest_leaves_no_end(tmp_path):
    exiting = "import os\n\n\ndef add(a, b):\n    os._exit(0)\n"
    proc, raw, key = run(tmp_path, {"pkg/__init__.py": exiting})
    record = parse_record(raw, key)
    assert proc.returncode == 0 and record.end is None and record.finish is None


def test_a_module_class_swap_is_seen_at_run_time(tmp_path):
    """Swapping the test module's class changes only what its tests call (pytest reports the passes itself, nothing
    of pytest changed): the harness looks at the collected test modules' class."""
    proc, raw, key = run(tmp_path, imported("wrap", CLASS_SWAP))
    record = parse_record(raw, key)
    assert record.statuses["tests/test_pkg.py::test_fixed"] == TestStatus.PASSED, proc.stdout[-2000:]
    assert any(line.startswith("patched test_pkg.__class__") for line in record.tampering), record.tampering


def test_a_pytest_started_inside_a_test_records_nothing(tmp_path):
    nested = TESTS + (
        "\n\ndef test_nested(tmp_path):\n"
        "    import subprocess, sys\n"
        "    (tmp_path / 'test_inner.py').write_text('def test_inner(): pass\\n')\n"
        "    proc = subprocess.run([sys.executable, '-m', 'pytest', str(tmp_path)], capture_output=True, text=True)\n"
        "    assert proc.returncode == 0, proc.stdout\n"
    )
    proc, raw, key = run(tmp_path, {"pkg/__init__.py": "def add(a, b):\n    return a + b\n"}, tests=nested)
    record = parse_record(raw, key)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert record.statuses["tests/test_pkg.py::test_nested"] == TestStatus.PASSED
    assert not any("inner" in test_id for test_id in record.statuses) and record.end == 0


HONEST_REBINDING = """\
import builtins
from unittest import mock

import pytest

import pkg
from pkg import Counter, add

LIMIT = 3
seen = []


def setup_module(module):
    module.shared = Counter()  # a repository object under a new name of the module's own


def helper():
    return 1


def test_fixed():
    global LIMIT
    LIMIT = 4  # a test rebinding its module's constant to data
    seen.append(add(2, 2))
    assert add(2, 2) == LIMIT and shared.n == 0


def test_monkeypatched(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules[__name__], "helper", lambda: 2)  # its own module, code of the test file
    assert helper() == 2


def test_mocked_open():
    with mock.patch(__name__ + ".open", mock.mock_open(read_data="x"), create=True):
        assert open("anything").read() == "x"
    assert builtins.open is open
"""
COUNTER = "class Counter:\n    n = 0\n\n\ndef add(a, b):\n    return a + b\n"
REWRITES = {
    "code": "import sys\n\n\ndef add(a, b):\n"
    "    m = sys.modules.get('test_pkg')\n"
    "    f = getattr(m, 'test_fixed', None)\n"
    "    if f is not None:\n"
    "        setattr(f, '__co' + 'de__', (lambda *a, **k: None).__code__)\n"
    "    return a + b if a != 2 else 0\n",
    "builtin": "import sys\n\n\nclass _Any(list):\n    def __eq__(self, other):\n        return True\n\n\n"
    "def add(a, b):\n"
    "    m = sys.modules.get('test_pkg')\n"
    "    if m is not None:\n"
    "        setattr(m, 'list', _Any)\n"
    "    return [a + b if a != 2 else 0]\n",
}
REWRITTEN_TESTS = """\
from pkg import add


def test_ok():
    assert list(add(1, 2)) == [3]


def test_fixed():
    assert list(add(2, 2)) == [4]
"""


def test_honest_tests_that_rebind_their_own_module_are_not_named(tmp_path):
    """Control for the harness's look at the collected tests: a setup function storing a repository object under a
    new name, a test rebinding its module's constant, monkeypatch and mock.patch of the test module's own names
    (code of the test file, the standard library) are no tampering."""
    proc, raw, key = run(tmp_path, {"pkg/__init__.py": COUNTER}, tests=HONEST_REBINDING)
    record = parse_record(raw, key)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert record.tampering == [] and judge(raw, "", key, testlog.parse(proc.stdout), 0)[0] is None, record.tampering


@pytest.mark.parametrize("how", sorted(REWRITES))
def test_package_code_that_rewrites_a_collected_test_is_named(tmp_path, how):
    """Attack: package code, called by an earlier test, swaps a later test's ``__code__`` for a no-op or shadows
    ``list`` in the test module; the broken ``add`` then passes test_fixed. The harness names it."""
    tests = TESTS if how == "code" else REWRITTEN_TESTS
    proc, raw, key = run(tmp_path, {"pkg/__init__.py": REWRITES[how]}, tests=tests)
    record = parse_record(raw, key)
    assert record.statuses["tests/test_pkg.py::test_fixed"] == TestStatus.PASSED  # the rewrite worked
    seen = {"code": "patched test_pkg.test_fixed changed since collected", "builtin": "patched test_pkg.list"}[how]
    assert any(line.startswith(seen) for line in record.tampering), record.tampering
    problem, _ = judge(raw, "", key, testlog.parse(proc.stdout), proc.returncode)
    assert problem is not None and seen in problem, problem
