"""Ownership labels on everything the gym creates, and the liveness test behind `gym gc`.

An owner is one process on one host, identified by pid plus the process start
time (so a recycled pid is not mistaken for the owner).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Labels:
    """The labels of one gym container. ``owner`` is ``host:pid:start_ticks``."""

    owner: str
    created: float
    deadline: float
    role: str = "workspace"

    MARK = "gym.managed"

    @classmethod
    def for_this_process(cls, ttl_s: float, role: str = "workspace") -> Labels:
        now = time.time()
        return cls(owner=current_owner(), created=now, deadline=now + ttl_s, role=role)

    def as_dict(self) -> dict[str, str]:
        return {
            self.MARK: "1",
            "gym.owner": self.owner,
            "gym.created": f"{self.created:.3f}",
            "gym.deadline": f"{self.deadline:.3f}",
            "gym.role": self.role,
        }

    @classmethod
    def parse(cls, labels: dict[str, str]) -> Labels:
        return cls(
            owner=labels.get("gym.owner", ""),
            created=float(labels.get("gym.created", 0) or 0),
            deadline=float(labels.get("gym.deadline", 0) or 0),
            role=labels.get("gym.role", "workspace"),
        )


def current_owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the owning process still runs. Owners on another host are presumed alive."""
    host, _, rest = owner.partition(":")
    pid_text, _, ticks_text = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    ticks = _start_ticks(pid)
    return ticks is not None and str(ticks) == ticks_text
