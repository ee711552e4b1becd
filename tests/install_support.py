"""Fresh virtual environments that see this interpreter's packages, and pip run inside them, offline.

No network: a venv sees this interpreter's packages (``--system-site-packages``, and a .pth naming its
own site-packages for when it is itself a venv), and callers run pip ``--no-deps --no-build-isolation``.
The venvs are made ``--without-pip``: the pip and setuptools they would bundle (setuptools 65 on
Python 3.11) would shadow this interpreter's, and that setuptools cannot build a wheel without the
``wheel`` package; ``VENV/bin/python -m pip`` runs this interpreter's pip, installing into VENV
(docs/cli.md, "Installed").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gym.bench import venv as venvs
from gym.bench.venv import make_venv, printed

__all__ = ["make_venv", "printed"]  # the venv module's, re-exported for the tests that import them from here

# Venvs that hold other stacks (a torch release, verl, verifiers), built once and kept outside the checkout.
CACHE = venvs.HOME / "test-venvs"


def pip(python: Path, *args: str, cwd: Path) -> None:
    """``python -m pip ARGS`` (quiet), asserting it succeeded with the end of its output."""
    try:
        venvs.pip(python, *args, cwd=cwd)
    except venvs.VenvError as exc:
        raise AssertionError(str(exc)) from None


ROOT = Path(__file__).resolve().parents[1]


def source_copy(destination: Path) -> Path:
    """The files git tracks or would track (not ignored build outputs), so the wheel is built as a fresh
    clone would build it and the checkout gets no build/ or *.egg-info."""
    listed = (
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree stays listed until staged
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def cached_venv(name: str, *installs: Sequence[str]) -> Path:
    """The python of the venv ``CACHE/name`` (it sees this interpreter's packages) in which each ``pip install ARGS``
    of ``installs`` ran, in order. Built once and reused while its ``.complete`` marker names the same installs; an
    install that fails (no registry, no wheel for this Python) skips the calling test with the end of pip's error."""
    return _cached(CACHE / name, venvs.marker_of(installs), make_venv, installs, "here")


def cached_foreign_venv(interpreter: Path, name: str, *installs: Sequence[str]) -> Path:
    """As `cached_venv`, for a venv of another ``interpreter`` (a Python this project does not run on, for a library
    that needs one): it sees none of this interpreter's packages and installs with its own pip, from the configured
    package indexes. The marker names the interpreter's version too, so a new one rebuilds it."""
    version = printed(interpreter, "import sys; print(sys.version)")
    marker = venvs.marker_of(installs, version)
    return _cached(CACHE / name, marker, venvs.isolated_venv(interpreter), installs, f"for {interpreter}")


def _cached(venv: Path, marker: str, create, installs: Sequence[Sequence[str]], where: str) -> Path:
    """`gym.bench.venv.cached`, skipping the calling test when an install fails (pip fails ``where``)."""
    try:
        return venvs.cached(venv, marker, create, installs)
    except venvs.VenvError as exc:
        pytest.skip(f"{str(exc)[-600:]} (fails {where})")


def driven(python: Path, module: str, *args: str, path: Sequence[Path] = ()) -> dict:
    """What ``python -m MODULE ARGS`` prints as JSON on its last line: a test driver run by another venv's python from
    the checkout, with the checkout and ``path`` on its PYTHONPATH; it must exit 0 (else the end of its stderr)."""
    proc = subprocess.run(
        [str(python), "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def files(folder: Path) -> list[str]:
    """The files under ``folder`` (bytecode caches aside)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


def install_editable(python: Path, package: Path, cwd: Path) -> None:
    """``pip install -e PACKAGE`` offline into ``python``'s venv; the package folder must be left as it was."""
    before = files(package)
    pip(python, "install", "-e", str(package), "--no-deps", "--no-build-isolation", cwd=cwd)
    assert files(package) == before, f"the editable install left files in {package}"


def run_checkout(
    python: Path, *args: str, cwd: Path, module: str = "gym", timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` (the gym by default) with this checkout on the path, from ``cwd``."""
    return subprocess.run(
        [str(python), "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
