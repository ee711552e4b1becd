"""Every test of the suite ends: a default pytest-timeout bound, a longer one for `slow` tests, and a hang fails."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import SLOW_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]


def test_the_suite_has_a_default_bound():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert options["timeout"] == 300


def test_an_unmarked_test_takes_the_default(request):
    assert request.node.get_closest_marker("timeout") is None


@pytest.mark.slow
def test_a_slow_test_gets_the_longer_bound(request):
    assert request.node.get_closest_marker("timeout").args == (SLOW_TIMEOUT_S,)


@pytest.mark.slow
@pytest.mark.timeout(7)
def test_a_test_naming_its_own_bound_keeps_it(request):
    assert request.node.get_closest_marker("timeout").args == (7,)


def test_a_hanging_test_fails_with_its_stack(tmp_path):
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hang():\n    time.sleep(60)\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=1", "test_hang.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "Timeout" in done.stdout and "time.sleep(60)" in done.stdout, done.stdout[-2000:]
