"""Virtual environments built once and kept outside the checkout, for stacks that must not enter ours.

A benchmark against another tool (`gym.bench.peers`) and a test against another library's release
(``tests/install_support.py``) both need that release installed from the package registry without
touching this interpreter's packages. `cached` makes the venv, runs each ``pip install ARGS`` in it and
writes a ``.complete`` marker naming those installs; the next call with the same installs returns the
venv's python at once, and different installs rebuild it. Two kinds:

* `make_venv`: sees this interpreter's packages (``--system-site-packages``, plus a .pth naming its own
  site-packages for when it is itself a venv) and is made ``--without-pip``: the pip and setuptools it
  would bundle (setuptools 65 on Python 3.11) would shadow this interpreter's, and that setuptools cannot
  build a wheel without the ``wheel`` package; ``VENV/bin/python -m pip`` runs this interpreter's pip,
  installing into VENV.
* `isolated_venv`: sees none of them and installs with its own pip (a peer's dependency pins then
  never meet ours).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# Venvs that hold other stacks, built once; tests keep theirs in test-venvs, the benchmarks in bench-venvs.
HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "code-rl-gym"
PIP_TIMEOUT_S = 600


class VenvError(RuntimeError):
    """A venv could not be made or a ``pip install`` in it failed: the command and the end of pip's output."""


def printed(python: Path, code: str) -> str:
    """What ``python -c code`` prints, stripped."""
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def make_venv(path: Path) -> Path:
    """A venv at ``path`` that sees this interpreter's packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = printed(python, "import sysconfig; print(sysconfig.get_path('purelib'))")
    (Path(purelib) / "outer_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def isolated_venv(interpreter: Path) -> Callable[[Path], None]:
    """What makes a venv of ``interpreter`` that sees none of its packages and has a pip of its own."""

    def create(path: Path) -> None:
        subprocess.run([str(interpreter), "-m", "venv", str(path)], check=True, capture_output=True)

    return create


def pip(python: Path, *args: str, cwd: Path) -> None:
    """``python -m pip ARGS`` (quiet); a failure is a `VenvError` with the end of pip's output."""
    proc = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise VenvError(f"pip {' '.join(args)} exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def cached(venv: Path, marker: str, create: Callable[[Path], object], installs: Sequence[Sequence[str]]) -> Path:
    """The python of ``venv``, made by ``create(venv)`` and each ``pip install ARGS`` of ``installs`` unless its
    ``.complete`` marker already says ``marker``. A failed install removes the venv and raises `VenvError`."""
    python = venv / "bin" / "python"
    complete = venv / ".complete"
    if complete.exists() and complete.read_text() == marker:
        return python
    with locked(venv):
        if complete.exists() and complete.read_text() == marker:  # built while this process waited for the lock
            return python
        return _build(venv, marker, create, installs)


def _build(venv: Path, marker: str, create: Callable[[Path], object], installs: Sequence[Sequence[str]]) -> Path:
    python = venv / "bin" / "python"
    complete = venv / ".complete"
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    create(venv)
    for args in installs:
        try:
            pip(python, "install", *args, cwd=venv)
        except (VenvError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(venv, ignore_errors=True)
            raise VenvError(f"pip install {' '.join(args)}: {str(exc)[-1500:]}") from None
    complete.write_text(marker)
    return python


@contextmanager
def locked(venv: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``venv`` across processes (a file lock beside it, released when the holder exits):
    two test workers that need one venv at once must not build it together, each removing what the other wrote."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def marker_of(installs: Sequence[Sequence[str]], *also: str) -> str:
    """The ``.complete`` text of a venv made with ``installs`` (and ``also``: an interpreter's version)."""
    return "\n".join([*also, *(" ".join(args) for args in installs)]) + "\n"
