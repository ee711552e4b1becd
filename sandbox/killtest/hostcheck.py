"""Host-side checks: what the attack left behind, seen from outside the container.

- ``survivors``: processes in the container besides init, the runner and its fork server, right after a call
  (``docker top``);
- ``rootfs_changes``: the container's writable root layer, against its state at acquire;
- ``removed``: after release the container is gone and no host process still sits in its cgroup;
- ``file_states``: the host's own files at the paths an attack targeted, before and after;
- ``daemon``: the engine still answers a ping quickly;
The neighbour's latency (``neighbour``) and the attacker's CPU time (``cpu_account``) have their own modules.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from pathlib import Path

import docker
import trio

from sandbox.docker_engine import RUNNER_COMMAND, Engine
from sandbox.errors import InfraError
from sandbox.killtest.judge import Check
from sandbox.wire import FORK_SERVER_TAG

log = logging.getLogger(__name__)
EXPECTED_PROCESSES = ("docker-init", RUNNER_COMMAND[-1])
REMOVAL_TIMEOUT_S = 20.0
SETTLE_S = 1.0  # zombies reparented to init are reaped asynchronously; give it this long
DAEMON_PING_LIMIT_S = 5.0


def fork_server(row: dict) -> bool:
    """The runner's fork server: root (no command of the sandbox user is) and started on its program."""
    return row.get("USER") == "root" and row.get("COMMAND", "").startswith(f"python3 -I -c {FORK_SERVER_TAG}")


class HostChecks:
    """The checks above, against one engine."""

    def __init__(self, engine: Engine):
        self.engine = engine

    async def survivors(self, container_id: str) -> list[str]:
        """Processes left in the container besides init and the runner (empty when the sweep held)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                top = await self.engine.call(
                    "top", self.engine.client.api.top, container_id, ps_args="-eo pid,user,stat,args"
                )
            except InfraError:
                info = await self.engine.call("inspect", self.engine.client.api.inspect_container, container_id)
                if not (info.get("State") or {}).get("Running"):
                    return []  # the container died (the observation says so): nothing survives in it
                raise
            titles = top.get("Titles") or []
            rows = [dict(zip(titles, row)) for row in top.get("Processes") or []]
            left = [
                f"pid {r.get('PID')} {r.get('USER')} {r.get('STAT')} {r.get('COMMAND', '')[:80]}"
                for r in rows
                if not any(marker in r.get("COMMAND", "") for marker in EXPECTED_PROCESSES) and not fork_server(r)
            ]
            # A zombie has left its cgroup, so `docker top` never lists it: ask the host for the children of
            # the container's own processes that wait to be reaped.
            kept = [int(r["PID"]) for r in rows if str(r.get("PID", "")).isdigit()]
            left += await trio.to_thread.run_sync(zombies_of, kept)
            if not left or time.monotonic() > deadline:
                return left
            await trio.sleep(0.05)

    async def rootfs_changes(self, container_id: str) -> set[str]:
        """Paths in the container's writable root layer.

        Read straight from the overlay upper directory when this host can see it (milliseconds);
        otherwise through the engine's diff, which walks the layers (about a second per call).
        """
        info = await self.engine.call("inspect", self.engine.client.api.inspect_container, container_id)
        upper = ((info.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
        if upper and os.access(upper, os.R_OK | os.X_OK):
            return await trio.to_thread.run_sync(layer_paths, upper)
        changes = await self.engine.call("diff", self.engine.client.api.diff, container_id)
        return {f"{c['Path']} (deleted)" if c["Kind"] == 2 else c["Path"] for c in changes or []}

    async def removed(self, container_id: str) -> Check:
        """The container is gone (within REMOVAL_TIMEOUT_S) and no host process is left in its cgroup."""
        deadline = time.monotonic() + REMOVAL_TIMEOUT_S
        while True:
            try:
                await self.engine.call("inspect", self.engine.client.api.inspect_container, container_id)
            except docker.errors.NotFound:
                break
            if time.monotonic() > deadline:
                return Check(name="removed", passed=False, detail=f"container {container_id[:12]} still exists")
            await trio.sleep(0.1)
        stray = await trio.to_thread.run_sync(host_processes_of, container_id)
        detail = f"container {container_id[:12]} removed; host processes in its cgroup: {stray or 'none'}"
        return Check(name="removed", passed=not stray, detail=detail)

    async def daemon(self) -> Check:
        started = time.monotonic()
        try:
            await self.engine.call("ping", self.engine.client.ping, timeout=DAEMON_PING_LIMIT_S)
        except InfraError as exc:
            return Check(name="daemon", passed=False, detail=str(exc))
        return Check(name="daemon", passed=True, detail=f"engine ping {1000 * (time.monotonic() - started):.0f} ms")


def zombies_of(parents: list[int]) -> list[str]:
    """Zombie children of the host pids ``parents`` (from the host's /proc; none where it cannot be read)."""
    wanted, found = set(parents), []
    for entry in os.listdir("/proc") if wanted else ():
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm, _, rest = text.rpartition(")")
        fields = rest.split()
        if len(fields) > 1 and fields[0] == "Z" and int(fields[1]) in wanted:
            found.append(f"pid {entry} zombie {comm.partition('(')[2][:40]} (child of {fields[1]}, never reaped)")
    return found


def host_processes_of(container_id: str) -> list[int]:
    """Host pids whose cgroup path names the container (none once it is really gone)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if container_id in Path(f"/proc/{entry}/cgroup").read_text():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def layer_paths(upper: str) -> set[str]:
    """Every path in an overlay upper directory; whiteouts (0:0 character devices) are deletions."""
    found = set()
    for root, dirs, files in os.walk(upper):
        for name in dirs + files:
            path = os.path.join(root, name)
            relative = "/" + os.path.relpath(path, upper)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            deleted = stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
            found.add(f"{relative} (deleted)" if deleted else relative)
    return found


def file_states(paths: tuple[str, ...]) -> dict[str, str]:
    """sha256 (or absent/unreadable) of the host's own files at ``paths``."""
    states = {}
    for path in paths:
        try:
            states[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
        except FileNotFoundError:
            states[path] = "absent"
        except OSError as exc:
            states[path] = f"unreadable ({exc.strerror})"
    return states


def files_unchanged(before: dict[str, str], after: dict[str, str]) -> Check:
    changed = [f"{p}: {before[p]} -> {after.get(p)}" for p in before if before[p] != after.get(p)]
    detail = "; ".join(changed) if changed else f"{len(before)} host paths unchanged"
    return Check(name="host_files", passed=not changed, detail=detail)


def rootfs_unchanged(baseline: set[str], after: set[str]) -> Check:
    new = sorted(after - baseline)
    return Check(
        name="rootfs",
        passed=not new,
        detail="root fs layer changed: " + ", ".join(new) if new else "root fs layer unchanged",
    )
