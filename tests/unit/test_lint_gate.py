"""The lint gate: `make test` runs ruff (lint + format, configured in pyproject.toml) before pytest."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _test_recipe() -> list[str]:
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "test"], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if "ruff" in line or "pytest" in line]


def test_make_test_runs_ruff_check_and_format_check_before_pytest():
    recipe = _test_recipe()
    assert recipe[:2] == ["python3 -m ruff check .", "python3 -m ruff format --check ."], recipe
    assert recipe[2].startswith("python3 -m pytest"), recipe


def test_the_pinned_ruff_is_the_one_installed_and_configured():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [dep for dep in project["project"]["optional-dependencies"]["dev"] if dep.startswith("ruff==")]
    assert len(pins) == 1, "ruff must be pinned: another version formats differently"
    version = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[-1] == pins[0].split("==")[1]
    assert project["tool"]["ruff"]["line-length"] == 120


def test_the_gate_fails_on_a_lint_error_and_on_unformatted_code(tmp_path):
    # Checked with the project's own settings, so the gate is shown able to fail.
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = {'a':1}\n")
    config = ["--config", str(ROOT / "pyproject.toml")]
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", *config, str(bad)], capture_output=True, text=True)
    assert lint.returncode == 1 and "F401" in lint.stdout
    fmt = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *config, str(bad)], capture_output=True, text=True
    )
    assert fmt.returncode == 1
