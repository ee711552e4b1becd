"""Release on every exit path, GC after SIGKILL, 16 workspaces at once, and a failing engine."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import pytest
import trio

from images.inputs import runner_image
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.labels import Labels, current_owner
from sandbox.pool import WorkspacePool
from tests.sandbox_support import kill_the_warm_workspace, sh, small_config

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


def _containers(owner: str) -> list[dict]:
    # The low-level list: no per-container inspect that races with removals elsewhere.
    client = docker.from_env(version="auto")
    try:
        return client.api.containers(all=True, filters={"label": f"gym.owner={owner}"})
    finally:
        client.close()


def test_sixteen_workspaces_in_parallel_all_released():
    results = []

    async def main():
        async with WorkspacePool(small_config(pool={"size": 4})) as pool:

            async def one(i):
                async with pool.acquire(f"task-{i}") as ws:
                    results.append((await ws.exec(sh(f"echo {i}; sleep 0.2"))).stdout_text.strip())

            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(one, i)

    trio.run(main)
    assert sorted(results, key=int) == [str(i) for i in range(16)]
    assert _containers(current_owner()) == []


def test_exception_and_cancellation_release_the_workspace():
    seen = []

    async def main():
        async with WorkspacePool(small_config()) as pool:
            with pytest.raises(RuntimeError):
                async with pool.acquire("boom") as ws:
                    seen.append(ws.id)
                    raise RuntimeError("task failed")
            with trio.move_on_after(0.5):
                async with pool.acquire("cancelled") as ws:
                    seen.append(ws.id)
                    await ws.exec(sh("sleep 5"))
            await trio.sleep(0.5)  # background removal
            return set(pool.live)

    live_inside = trio.run(main)
    assert not (set(seen) & live_inside)
    assert _containers(current_owner()) == []


OWNER_SCRIPT = """
import sys, trio
sys.path.insert(0, {root!r})
from sandbox.pool import WorkspacePool
from tests.sandbox_support import small_config
async def main():
    async with WorkspacePool(small_config(pool={{"size": 2}})) as pool:
        await pool.wait_ready()
        async with pool.acquire("doomed"):
            print("ready", flush=True)
            await trio.sleep(600)
trio.run(main)
"""


def test_sigkill_mid_episode_then_gc_leaves_nothing():
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        owner_prefix = f"{socket.gethostname()}:{proc.pid}:"
        owned = [c for c in _all_gym() if c["Labels"]["gym.owner"].startswith(owner_prefix)]
        assert len(owned) >= 2  # the acquired workspace and at least one warm one
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        gc = subprocess.run([sys.executable, "-m", "gym", "gc"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert gc.returncode == 0, gc.stderr
        left = [c for c in _all_gym() if c["Labels"]["gym.owner"].startswith(owner_prefix)]
        assert left == []
        # Another suite's pool on the same daemon may collect these orphans first (pools collect dead
        # owners at start), and this gc may collect other dead owners' too: what counts is that none of
        # this owner's is left, whoever removed them.
        assert gc.stdout.splitlines()[-1].endswith(" containers"), gc.stdout
    finally:
        proc.kill()


def _all_gym() -> list[dict]:
    client = docker.from_env(version="auto")
    try:
        return client.api.containers(all=True, filters={"label": Labels.MARK})
    finally:
        client.close()


def test_sigterm_runs_the_synchronous_cleanup():
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        owner_prefix = f"{socket.gethostname()}:{proc.pid}:"
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert [c for c in _all_gym() if c["Labels"]["gym.owner"].startswith(owner_prefix)] == []
    finally:
        proc.kill()


def test_pool_start_collects_orphans_and_expired_containers():
    client = docker.from_env(version="auto")
    dead = Labels(owner=f"{socket.gethostname()}:999999:1", created=time.time(), deadline=time.time() + 3600)
    expired = Labels(owner=current_owner(), created=time.time() - 10, deadline=time.time() - 1)
    ids = [
        client.containers.create(runner_image(), command=["true"], labels=labels.as_dict()).id
        for labels in (dead, expired)
    ]
    client.close()

    async def main():
        async with WorkspacePool(small_config()):
            pass

    trio.run(main)
    remaining = {c["Id"] for c in _all_gym()}
    assert not (set(ids) & remaining)


def test_a_warm_workspace_killed_while_it_waited_is_not_handed_out():
    victim, handed, result, hung_up = kill_the_warm_workspace(small_config(pool={"size": 1}))
    assert handed != victim and hung_up == 1
    assert result.failure == FailureKind.OK and result.stdout_text == "ok\n"


def test_container_killed_mid_call_is_infra_error_not_a_hang():
    async def main():
        async with WorkspacePool(small_config()) as pool:
            async with pool.acquire("victim") as ws:

                async def kill_soon():
                    await trio.sleep(0.5)
                    await pool.engine.call("kill", pool.engine.client.api.kill, ws.id)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kill_soon)
                    started = time.monotonic()
                    during = await ws.exec(sh("sleep 20", timeout_s=30))
                    elapsed = time.monotonic() - started
                after = await ws.exec(sh("true"))
                return during, elapsed, after

    during, elapsed, after = trio.run(main)
    assert during.failure == FailureKind.INFRA_ERROR and elapsed < 5
    assert "killed from outside" in during.detail, during  # SIGKILL without an OOM kill: not the candidate's doing
    assert after.failure == FailureKind.INFRA_ERROR and "unusable" in after.detail


def test_unreachable_engine_fails_fast_with_a_clear_error(tmp_path):
    config = small_config(engine={"base_url": f"unix://{tmp_path}/no-such.sock", "timeout_s": 2})

    async def main():
        async with WorkspacePool(config):
            pass

    started = time.monotonic()
    with pytest.raises(InfraError, match="Docker engine"):
        trio.run(main)
    assert time.monotonic() - started < 5


def test_engine_that_never_answers_times_out(tmp_path):
    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accept and never answer
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    config = small_config(engine={"base_url": f"unix://{path}", "timeout_s": 2})

    async def main():
        async with WorkspacePool(config):
            pass

    started = time.monotonic()
    try:
        with pytest.raises(InfraError, match="did not answer within 2s"):
            trio.run(main)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert time.monotonic() - started < 10


def test_removals_of_one_container_at_once_all_succeed():
    """Several removers of one container at once (a dying owner's release and another pool's start-up gc, as a CI
    run once had): the engine answers all but one 409 "removal already in progress"; each is a removal done, not an
    InfraError that fails a pool's start."""
    from sandbox.docker_engine import Engine

    client = docker.from_env(version="auto")
    labels = Labels(owner=current_owner(), created=time.time(), deadline=time.time() + 3600)
    container = client.containers.create(runner_image(), command=["sleep", "60"], labels=labels.as_dict())
    container.start()
    client.close()
    engine = Engine(small_config())

    async def main():
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(engine.remove, container.id)

    try:
        trio.run(main)
    finally:
        engine.close()
    assert container.id not in {c["Id"] for c in _all_gym()}
