"""Reading and checking a config loads no model library: a typo in a train, plan or serve config is reported
without torch's and transformers' ~3 s of import (the config modules are pydantic over the architecture's sizes;
`policies.hf_config` and `trainer.checkpoint` hold what needs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers")


@pytest.mark.parametrize("module", ["trainer.config", "policies.serve_config", "policies.config", "gym.cli"])
def test_a_config_module_imports_no_model_library(module):
    program = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "", f"{module} loads {loaded.stdout.strip()}"


def test_the_check_sees_a_model_library():
    """Control: the same check names transformers for the module that does load it."""
    program = f"import sys, policies.hf_config; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "transformers" in loaded.stdout.split()
