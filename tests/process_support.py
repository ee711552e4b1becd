"""A host process's state as the kernel reports it, for tests that check no process outlives its owner."""

from __future__ import annotations

from pathlib import Path


def process_state(pid: int) -> str:
    """The state letter of ``/proc/PID/stat`` (``R``, ``S``, ``Z``, ...), or ``gone`` once the pid is reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
