"""Run directories: a fresh run never mixes its files with an earlier run's, and what it writes survives a crash.

``set_aside(RUN)`` moves an existing, non-empty ``RUN`` to ``RUN.<timestamp>`` (the
rule `train` follows for a run it does not resume, trainer/loop.py), so old
trajectories and bundles are kept whole and never appended to or mixed in.
``write_atomic`` replaces a file in one step (a temporary file in the same folder,
flushed to disk, then renamed), so a reader finds the old text or the new, never half.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)


def set_aside(run_dir: Path) -> Path | None:
    """Move an earlier run out of ``run_dir`` to ``RUN.<timestamp>``; returns where, or None when there was none.

    A file at ``run_dir`` raises NotADirectoryError (exit 6, gym.fault); a non-empty ``run_dir`` that is the
    working directory or holds it (``--out .``, ``--out ..``, ``/``) raises `CommandError` (exit 2): moving it
    would pull the ground from under this process and the shell that started it."""
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a run directory", str(run_dir))
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return None
    movable(run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = run_dir.with_name(f"{run_dir.name}.{stamp}")
    suffix = 1
    while aside.exists():  # two runs set aside within one second: never rename onto the first
        aside = run_dir.with_name(f"{run_dir.name}.{stamp}.{suffix}")
        suffix += 1
    run_dir.rename(aside)
    log.warning("%s held an earlier run: moved to %s", run_dir, aside)
    return aside


def writable(run_dir: Path) -> None:
    """Make ``run_dir`` and raise a host fault (exit 6) now when it cannot be written, whatever the OSError
    (``/proc/x`` reads as ENOENT, a file in the way as EEXIST): a run directory is the host's refusal, never a
    data file's. An empty directory left behind is no earlier run to set aside."""
    from gym.fault import HOST_FAULTS, CommandError, ExitCode

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as exc:
        code, fix = HOST_FAULTS.get(exc.errno, (ExitCode.INPUT, ""))
        raise CommandError(
            f"run directory {run_dir} cannot be written: {exc.strerror or exc}",
            fix if code is ExitCode.HOST else "use a path this user may write",
            ExitCode.HOST,
        ) from exc


def movable(run_dir: Path) -> None:
    """Raise `CommandError` (exit 2) when a non-empty ``run_dir`` is the working directory or holds it, so a
    fresh run could not set it aside (`set_aside`; train checks it before the policy is built)."""
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    where, cwd = run_dir.resolve(), Path.cwd().resolve()
    if not where.name or where == cwd or where in cwd.parents:
        from gym.fault import CommandError, ExitCode

        raise CommandError(
            f"{run_dir} ({where}) holds the working directory and an earlier run: it cannot be moved aside",
            "pass a new directory for the run (e.g. runs/NAME)",
            ExitCode.USAGE,
        )


def write_atomic(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) in one step: a temporary file beside it, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
