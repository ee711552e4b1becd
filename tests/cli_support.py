"""Runs of ``python -m gym`` in a subprocess and the one-line error contract they are checked against."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent.sock"}


def gym(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    # 120 s bounds a run on a loaded 2-core machine; each takes a few seconds idle (serve and train import torch)
    return subprocess.run(
        [sys.executable, "-m", "gym", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},  # the checkout from any cwd
    )


def one_line(done: subprocess.CompletedProcess[str], code: int, *named: str) -> str:
    """The whole of stderr: one ``gym: error:`` line with a fix after the dash, naming each of ``named``."""
    assert done.returncode == code, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    line = done.stderr.rstrip("\n")
    problem, dash, fix = line.partition(" — ")
    assert problem.startswith("gym: error: ") and dash and fix.strip(), line
    for text in named:
        assert text in line, (text, line)
    return line
