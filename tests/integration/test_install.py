"""The distribution installs (editable and as a wheel) and its `code-rl-gym` command works from any directory.

No network: the venvs (tests/install_support.py) see this interpreter's packages and pip runs
``--no-deps --no-build-isolation``. A venv made with pip would bundle a setuptools too old to build a
wheel; pyproject.toml's ``[build-system] requires`` says so (setuptools>=70.1): pip's
``--check-build-dependencies`` refuses the bundled one by that line (docs/cli.md, "Installed").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.install_support import make_venv, pip, printed, source_copy

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SHIPPED = [
    "configs/cp_grpo_tiny.yaml",
    "configs/cp_smoke.yaml",
    "tasks/samples/taco.jsonl",
    "tasks/samples/humaneval.jsonl.gz",
    "tasks/driver.py",
    "sandbox/killtest/prelude.py",
    "sandbox/killtest/prelude.sh",
    "sandbox/killtest/posture.json",
    "images/runner/Dockerfile",
    "images/swe/base.Dockerfile",
    "gym/cli.py",
    "trainer/loop.py",
]
SHIPPED_GLOBS = [
    "configs/*.yaml",
    "configs/models/*/config.json",
    "tasks/samples/*",
    "tasks/swe/specs/*.yaml",
    "images/swe/*.Dockerfile",
]

pytestmark = pytest.mark.slow


def command(venv: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    script = venv / "bin" / "code-rl-gym"
    return subprocess.run(
        [str(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        check=False,
    )


def test_editable_install_runs_from_another_directory_on_the_shipped_files(tmp_path):
    before = set(os.listdir(ROOT)), set(os.listdir(ROOT / "build")) if (ROOT / "build").is_dir() else set()
    venv = tmp_path / "venv"
    pip(make_venv(venv), "install", "-e", str(ROOT), "--no-deps", "--no-build-isolation", cwd=tmp_path)
    after = set(os.listdir(ROOT)), set(os.listdir(ROOT / "build")) if (ROOT / "build").is_dir() else set()
    assert after == before, f"the install left files in the checkout: {after[0] - before[0]} {after[1] - before[1]}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    top = command(venv, "--help", cwd=elsewhere)
    assert top.returncode == 0 and "COMMAND" in top.stdout and "rollout" in top.stdout, top.stderr
    tasks = command(venv, "tasks", "--help", cwd=elsewhere)
    assert tasks.returncode == 0 and "build-swe" in tasks.stdout, tasks.stderr
    # the examples name the program run (`python -m gym` works only from the repository root)
    assert "\n  code-rl-gym tasks generate --out " in tasks.stdout and "python -m gym" not in tasks.stdout
    nested = command(venv, "bench", "sandbox", "--help", cwd=elsewhere)
    assert nested.returncode == 0 and "examples:\n  code-rl-gym bench sandbox\n" in nested.stdout, nested.stdout
    version = command(venv, "--version", cwd=elsewhere)
    assert version.returncode == 0 and version.stdout.split() == ["code-rl-gym", VERSION]

    # The shipped config, its task files and the checkout's tokenizer are found from `elsewhere`; the run
    # gets as far as Docker (absent on purpose): exit 3, not 2 (config) or 5 (task file).
    rollout = command(
        venv,
        "rollout",
        "configs/cp_smoke.yaml",
        "--episodes",
        "1",
        "--out",
        str(tmp_path / "run"),
        cwd=elsewhere,
        DOCKER_HOST="unix:///nonexistent.sock",
    )
    assert rollout.returncode == 3, rollout.stderr[-3000:]
    assert rollout.stderr.splitlines()[-1].startswith("gym: error: the Docker engine at unix:///nonexistent.sock")
    assert not (elsewhere / "configs").exists() and "Traceback" not in rollout.stderr


def test_the_wheel_holds_the_package_data_and_no_tests_and_runs_installed(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the source files")
    source = source_copy(tmp_path / "src")
    builder = make_venv(tmp_path / "builder")
    pip(builder, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source), cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("code_rl_gym-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"code_rl_gym-{VERSION}.dist-info/entry_points.txt").decode()
    shipped = {p.relative_to(source).as_posix() for g in SHIPPED_GLOBS for p in source.glob(g) if p.is_file()}
    expected = set(SHIPPED) | shipped  # (tasks/samples/published/, test data, is a folder: not shipped)
    assert expected - names == set()
    assert not [name for name in names if name.startswith("tests/")]
    assert "code-rl-gym = gym.cli:main" in entry_points

    venv = tmp_path / "venv"
    pip(make_venv(venv), "install", "--no-deps", str(wheel), cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listing = command(venv, "killtest", "--list", cwd=elsewhere)  # reads the attack catalog and preludes
    assert listing.returncode == 0 and "fork_bomb_shell" in listing.stdout, listing.stderr
    # The default tokenizer of a wheel lives in the user's cache and is never trained unasked.
    cache = tmp_path / "cache"
    info = command(venv, "tokenizer", "info", "bpe", cwd=elsewhere, XDG_CACHE_HOME=str(cache))
    assert info.returncode == 2 and "Traceback" not in info.stderr
    assert info.stderr.strip() == info.stderr.strip().splitlines()[-1]  # one line
    assert (
        f"{cache}/code-rl-gym/tokenizer/tokenizer.json is not built: run `code-rl-gym tokenizer train`" in info.stderr
    )
    assert not cache.exists()


def test_build_requires_names_the_setuptools_a_wheel_build_needs(tmp_path):
    """A venv made with pip bundles setuptools 65, which cannot build without ``wheel``: without build
    isolation pip would fail deep in the build (`invalid command 'bdist_wheel'`); the build requirement lets
    ``--check-build-dependencies`` refuse it up front, naming it."""
    venv = tmp_path / "with_pip"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    bundled = printed(python, "import setuptools; print(setuptools.__version__)")
    if tuple(int(part) for part in bundled.split(".")[:2]) >= (70, 1):
        pytest.skip(f"this Python's venv bundles setuptools {bundled}, new enough to build without wheel")
    proc = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "install", "-e", str(ROOT)]
        + ["--no-deps", "--no-build-isolation", "--check-build-dependencies", "--no-index"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert f"setuptools=={bundled} is incompatible with setuptools>=70.1" in proc.stdout + proc.stderr, proc.stderr
