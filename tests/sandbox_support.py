"""Helpers for tests that drive real workspaces from synchronous pytest functions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from sandbox.config import SandboxConfig
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest, ExecResult
from sandbox.workspace import Workspace

T = TypeVar("T")


def small_config(**overrides) -> SandboxConfig:
    """A cheap config for tests: small pool, small budgets."""
    data = {"pool": {"size": 0}, "budgets": {"memory_mb": 256, "workspace_mb": 64, "tmp_mb": 32, "pids": 64}}
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return SandboxConfig.model_validate(data)


def in_workspace(fn: Callable[[Workspace], Awaitable[T]], config: SandboxConfig | None = None) -> T:
    """Run ``fn(ws)`` in one fresh workspace and return its result."""

    async def main() -> T:
        async with WorkspacePool(config or small_config()) as pool:
            async with pool.acquire("pytest") as ws:
                return await fn(ws)

    return trio.run(main)


def sh(script: str, **fields) -> ExecRequest:
    return ExecRequest(argv=["bash", "-c", script], **fields)


def py(code: str, **fields) -> ExecRequest:
    return ExecRequest(argv=["python3", "-c", code], **fields)


def run_one(request: ExecRequest, config: SandboxConfig | None = None) -> ExecResult:
    async def go(ws: Workspace) -> ExecResult:
        return await ws.exec(request)

    return in_workspace(go, config)


def sandbox_config(**overrides) -> SandboxConfig:
    data = {"pool": {"size": 2}, "episode": {"wall_s": 3600.0}}
    data.update(overrides)
    return SandboxConfig.model_validate(data)


def kill_the_warm_workspace(config: SandboxConfig, before_kill: Callable[[WorkspacePool, str], None] | None = None):
    """Kill a one-workspace pool's warm container while it waits, then acquire and run ``echo ok``.

    Returns (the killed id, the id handed out, the exec result, ``pool.hung_up``); ``before_kill(pool, id)``
    may look at the warm workspace first.
    """

    async def main():
        async with WorkspacePool(config) as pool:
            await pool.wait_ready()
            (victim,) = pool.live
            if before_kill is not None:
                before_kill(pool, victim)
            await pool.engine.call("kill", pool.engine.client.api.kill, victim)
            await trio.sleep(1.0)  # the attach connection ends as the container dies
            async with pool.acquire("pytest") as ws:
                return victim, ws.id, await ws.exec(sh("echo ok")), pool.hung_up

    return trio.run(main)


SANDBOX_USER_PIDS = r"""
def sandbox_user_pids(settle_s=0.0):  # the sandbox user's processes (uid 1000) but this one
    # With settle_s, a zombie is waited for up to that long (init reaps orphans in its own time: late on a loaded
    # host); a live process is returned at once.
    import time
    deadline = time.monotonic() + settle_s
    while True:
        mine, live = [], False
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    with open("/proc/%s/status" % pid) as handle:
                        lines = handle.read().splitlines()
                except OSError:
                    continue
                if any(line.startswith("Uid:") and line.split()[1] == "1000" for line in lines):
                    mine.append(pid)
                    live = live or not any(line.startswith("State:") and "Z" in line.split()[1] for line in lines)
        if not mine or live or time.monotonic() >= deadline:
            return mine
        time.sleep(0.01)
"""
"""Source of a function for programs run in a workspace (they import ``os`` first)."""
