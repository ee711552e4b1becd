"""The package installs beside another stack and keeps its torch (issue 44, install beside other stacks).

A venv that already holds torch 2.14.1 (a CUDA build; its wheels lie on this machine's disk) installs the wheel of
this checkout with its dependencies resolved: torch stays 2.14.1 (the metadata takes a range; bin/setup, not the
package, picks the CPU wheel of this machine), the test, lint, bench and Ray stacks stay out (they are extras), and
the import-level tests pass on that torch. The control: the exact pin the package had before (`torch==2.13.0`)
would have replaced it, as pip's own dry run reports.

The venv is built once and cached outside the checkout (``$XDG_CACHE_HOME/code-rl-gym/test-venvs``, 4.4 GB, ~30 s
from the local wheels), so a fresh clone reuses it; no package hub is reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.install_support import make_venv, pip, printed, source_copy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OTHER_TORCH = "2.14.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "code-rl-gym" / "test-venvs"


def _other_torch_venv() -> Path:
    """A venv holding torch ``OTHER_TORCH`` (built once, then reused); its python."""
    venv = CACHE / f"torch-{OTHER_TORCH}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    make_venv(venv)
    try:
        pip(python, "install", f"torch=={OTHER_TORCH}", cwd=venv)
    except AssertionError as exc:
        shutil.rmtree(venv, ignore_errors=True)
        pytest.skip(f"torch {OTHER_TORCH} cannot be installed here: {str(exc)[-300:]}")
    (venv / ".complete").write_text(OTHER_TORCH + "\n")
    return python


def _version(python: Path, name: str) -> str:
    return printed(python, f"import importlib.metadata as md; print(md.version({name!r}))")


@pytest.fixture(scope="module")
def beside(tmp_path_factory) -> Path:
    """The venv with the other torch and this checkout's wheel installed with its dependencies resolved."""
    python = _other_torch_venv()
    assert _version(python, "torch").startswith(OTHER_TORCH)
    work = tmp_path_factory.mktemp("beside")
    source = source_copy(work / "src")
    pip(python, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source), cwd=work)
    (wheel,) = (work / "dist").glob("code_rl_gym-*.whl")
    pip(python, "install", "--force-reinstall", "--no-deps", str(wheel), cwd=work)  # the package itself, fresh
    pip(python, "install", str(wheel), cwd=work)  # then its dependencies, resolved against what the venv holds
    return python


def test_installing_the_package_keeps_the_users_torch(beside):
    assert _version(beside, "torch").startswith(OTHER_TORCH)
    assert printed(beside, "import torch; print(torch.__version__)").startswith(OTHER_TORCH)
    metadata = printed(beside, "import importlib.metadata as md; print('\\n'.join(md.requires('code-rl-gym')))")
    runtime = [line for line in metadata.splitlines() if "extra ==" not in line]
    assert any(line.startswith("torch") and "==" not in line for line in runtime), runtime
    stacks = ("pytest", "hypothesis", "ruff", "trl", "ray")
    assert not [line for line in runtime if line.split("<")[0].split(">")[0].split("=")[0] in stacks], runtime


def test_the_old_exact_pin_would_have_replaced_it(beside, tmp_path):
    """The control: the check above can fail. pip's dry run in the same venv installs torch for `torch==2.13.0`."""
    report = tmp_path / "report.json"
    pip(beside, "install", "--dry-run", "--no-deps", "--report", str(report), "torch==2.13.0", cwd=tmp_path)
    installs = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installs == ["torch"]


def test_the_extras_name_the_stacks_the_runtime_leaves_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"dev", "ray", "bench", "all"} <= set(extras)
    assert any(dep.startswith("pytest-xdist") for dep in extras["dev"]) and extras["ray"] and extras["bench"]
    assert not [
        dep for dep in project["dependencies"] if dep.startswith(("pytest", "ruff", "trl", "ray", "hypothesis"))
    ]


def test_the_import_level_tests_pass_on_the_other_torch(beside):
    done = subprocess.run(
        [str(beside), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
        + ["tests/unit/test_layers.py", "tests/unit/test_kernels_dispatch.py", "tests/unit/test_policy_engine.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert printed(beside, "import torch; print(torch.__version__)").startswith(OTHER_TORCH)
