"""Recycled workspaces (sandbox/pool.py, sandbox/runner/reset.py) in real Docker: a container that served one task
serves the next only when its reset leaves it as a new one is, and nothing one candidate leaves reaches the next.

Each attack runs as a candidate in a one-container pool; then the pool hands out a workspace again and the test
compares what a candidate sees there (every entry of the writable filesystems with its mode, owner and extended
attributes, System V objects, POSIX queues, the processes) with what it saw in the container before the attack.
Either the same container came back and looks exactly as it did new, or its reset said no and a new one came.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import docker
import pytest
import trio

from sandbox.failure import FailureKind, Verdict
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tests.recycling_support import FINGERPRINT, ZOMBIE_COUNT, grade_in_one_container, one_container

pytestmark = pytest.mark.docker


DAEMON = r"""
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            for path in ("/tmp/.answers", "/workspace/.answers", "/dev/shm/answers"):
                try:
                    open(path, "w").write("42")
                except OSError:
                    pass
            time.sleep(0.005)
    os._exit(0)
time.sleep(0.2)
"""

FILES = r"""
import os
path = "/workspace"
for i in range(120):
    path = os.path.join(path, "d")
    os.mkdir(path)
    if i % 10 == 0:
        open(os.path.join(path, ".hidden"), "w").write("x")
os.mkfifo("/workspace/fifo")
os.symlink("/", "/workspace/root")
os.symlink("/workspace", "/tmp/loop")
os.link("/workspace/d/.hidden", "/tmp/hardlink")
open("/tmp/answers", "w").write("42")
open("/dev/shm/answers", "w").write("42")
os.makedirs("/tmp/locked/inner")
open("/tmp/locked/inner/x", "w").write("x")
os.chmod("/tmp/locked/inner", 0)
os.chmod("/tmp/locked", 0)
os.chmod("/workspace/d", 0)
os.chmod("/workspace", 0o777)
os.chmod("/tmp", 0o700)
"""

QUEUES = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
assert libc.shmget(0x51, 4096, 0o1000 | 0o666) >= 0
assert libc.msgget(0x52, 0o1000 | 0o666) >= 0
assert libc.semget(0x53, 1, 0o1000 | 0o666) >= 0
rt.mq_open.restype = ctypes.c_int
assert rt.mq_open(b"/answers", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0, ctypes.get_errno()
assert os.listdir("/dev/mqueue") == ["answers"]
"""

XATTR = r"""
import os
os.setxattr("/workspace", "user.answers", b"42")
os.setxattr("/tmp", "user.answers", b"42")
"""

STOPPED = r"""
import os, signal
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
os.waitpid(pid, 0)
for _ in range(200):
    if os.fork() == 0:
        os._exit(0)
"""

INODES = r"""
import os
made = 0
try:
    for i in range(20000):
        open("/workspace/f%d" % i, "w").close()
        made += 1
except OSError:
    pass
print(made)
"""

ATTACKS = {
    "a daemon that outlives its call": [DAEMON],
    "files everywhere, locked and linked": [FILES],
    "System V objects and a POSIX queue": [QUEUES],
    "extended attributes on the mount roots": [XATTR],
    "stopped grandchildren and exited children": [STOPPED],
    "the workspace's inodes all used": [INODES],
    "all of it, through the fork server": [DAEMON, FILES, QUEUES, STOPPED],
}


async def fingerprint(ws) -> dict:
    result = await ws.exec(ExecRequest(argv=["python3", "-c", FINGERPRINT], timeout_s=30.0))
    assert result.failure == FailureKind.OK, result
    return json.loads(result.stdout)


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_nothing_a_candidate_leaves_reaches_the_next_task(attack):
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("first") as ws:
                first, new = ws.id, await fingerprint(ws)
                for program in ATTACKS[attack]:
                    await ws.exec(
                        ExecRequest(argv=["python3", "-I", "-c", program], timeout_s=30.0, fork_server="fork" in attack)
                    )
            released = pool.stats()
            async with pool.acquire("second") as ws:
                again, seen = ws.id, await fingerprint(ws)
            return first, again, new, seen, released

    first, again, new, seen, stats = trio.run(main)
    assert seen == new
    if again == first:
        assert stats["recycled"] == 1
    else:
        assert stats["resets_refused"] == 1, stats


def test_a_change_the_reset_does_not_undo_destroys_the_container():
    """The check reads the result: an extended attribute on a mount root is nothing the reset removes, so the
    container is not handed out again (tmpfs keeps user attributes on this kernel, or the attack is refused)."""

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("first") as ws:
                first = ws.id
                planted = await ws.exec(ExecRequest(argv=["python3", "-c", XATTR]))
            async with pool.acquire("second") as ws:
                return first, ws.id, planted, pool.stats()

    first, again, planted, stats = trio.run(main)
    if planted.failure != FailureKind.OK:
        pytest.skip(f"this kernel's tmpfs refuses user attributes: {planted.stderr[-200:]!r}")
    assert again != first and stats["resets_refused"] == 1 and stats["recycled"] == 0, stats


OOM = r"""
chunks = []
while True:
    chunks.append(bytearray(16 << 20))
"""


def test_a_container_that_saw_an_oom_kill_is_never_recycled():
    """The engine marks a container OOMKilled for any OOM kill in its life, and the blame of a lost runner reads
    that mark: in a recycled container a later task killed from outside would be blamed for an earlier one's OOM."""

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("first") as ws:
                first = ws.id
                hog = await ws.exec(ExecRequest(argv=["python3", "-c", OOM], timeout_s=60.0))
            async with pool.acquire("second") as ws:
                return first, ws.id, hog, pool.stats()

    first, again, hog, stats = trio.run(main)
    assert hog.failure == FailureKind.OOM, hog
    assert again != first and stats["resets_refused"] == 1 and stats["recycled"] == 0, stats


def test_a_clean_release_recycles_and_the_container_serves_as_new():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            ids, fingerprints = [], []
            for n in range(4):
                async with pool.acquire(f"task {n}") as ws:
                    ids.append(ws.id)
                    fingerprints.append(await fingerprint(ws))
                    forked = await ws.exec(ExecRequest(argv=["python3", "-I", "-c", "print(6 * 7)"], fork_server=True))
                    assert forked.stdout == b"42\n", forked
                    await ws.write_file("/workspace/solution.py", b"print(1)\n")
            return ids, fingerprints, pool.stats()

    ids, fingerprints, stats = trio.run(main)
    assert len(set(ids)) == 1 and stats["recycled"] == 4 and stats["cold_starts"] == 0, stats
    assert all(seen == fingerprints[0] for seen in fingerprints)


def test_a_container_serves_recycle_uses_tasks_and_an_aborted_use_is_never_recycled():
    async def main():
        async with WorkspacePool(one_container(recycle_uses=2)) as pool:
            await pool.wait_ready(60)
            ids = []
            for n in range(4):
                async with pool.acquire(f"task {n}") as ws:
                    ids.append(ws.id)
            with pytest.raises(RuntimeError):
                async with pool.acquire("raises") as ws:
                    aborted = ws.id
                    raise RuntimeError("the task's own failure")
            async with pool.acquire("after") as ws:
                after = ws.id
            return ids, aborted, after

    ids, aborted, after = trio.run(main)
    assert ids[0] == ids[1] != ids[2]  # two tasks at most (the third may find a new one warm, or start one)
    assert max(ids.count(container) for container in ids) == 2
    assert after != aborted


HONEST = """
import os
n = int(input())
os.makedirs("/tmp/cache", exist_ok=True)
open("/tmp/cache/%d" % n, "w").write(str(n * 7))
open("/workspace/cache_%d" % n, "w").write(str(n * 7))
print(n * 7)
"""
CHEAT = """
import os
n = int(input())
for path in ("/tmp/cache/%d" % n, "/workspace/cache_%d" % n):
    if os.path.exists(path):
        print(open(path).read())
        break
else:
    print(0)
"""


def test_a_candidate_cannot_pass_on_what_an_earlier_candidate_left_and_honest_ones_always_pass():
    results, stats = grade_in_one_container(HONEST, CHEAT, HONEST, HONEST, CHEAT)
    assert stats["recycled"] >= 4, stats  # the same container served them: the path under test ran
    honest = [results[0], results[2], results[3]]
    assert all(t.verdict == Verdict.PASSED for r in honest for t in r.tests), honest
    for cheat in (results[1], results[4]):
        assert not any(t.verdict == Verdict.PASSED for t in cheat.tests), cheat
        assert all(t.verdict == Verdict.WRONG_ANSWER for t in cheat.tests), cheat


def test_without_recycling_every_released_workspace_is_destroyed_and_its_runner_keeps_no_start():
    """recycle_uses and disjoint_uses 0: a new container per task; its runner records no start, so a reset asked of it
    anyway is refused, never a container handed on. (By default, acquires that name no keys are destroyed too:
    test_sandbox_recycling_disjoint.py.)"""

    async def main():
        async with WorkspacePool(one_container(recycle_uses=0, disjoint_uses=0)) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("first") as ws:
                first = ws.id
                refused = await ws.reset()
            async with pool.acquire("second") as ws:
                return first, ws.id, refused, pool.stats()

    first, again, refused, stats = trio.run(main)
    assert again != first and stats["recycled"] == 0, stats
    assert not refused.clean and "no start" in refused.detail, refused


# A program that leaves children behind: its own exit makes them orphans of the container's init (docker-init, pid 1).
ORPHANS = r"""
import os, time
for _ in range(16):
    if os.fork() == 0:
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        time.sleep(60)
        os._exit(0)
print("forked")
"""


def test_orphans_the_sweep_killed_are_inits_to_reap_and_the_container_is_recycled():
    """The sweep after a call kills the program's orphans; init reaps their zombies in its own time (on a busy host
    after the reset has begun). The reset waits for zombies to go before judging them left behind, so an honest
    program that leaves children does not cost its container. Here init is stopped (SIGSTOP from the host) while the
    orphans die, and let go 0.1 s after the release begins: without that wait the reset sees 16 zombies and refuses.
    """
    client = docker.from_env(timeout=60)

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("orphans") as ws:
                first = ws.id
                init = client.containers.get(ws.id).attrs["State"]["Pid"]  # docker-init, pid 1 in the container
                os.kill(init, signal.SIGSTOP)
                try:
                    left = await ws.exec(ExecRequest(argv=["python3", "-I", "-c", ORPHANS], timeout_s=30))
                    zombies = await ws.exec(ExecRequest(argv=["python3", "-I", "-c", ZOMBIE_COUNT], timeout_s=30))
                finally:
                    threading.Timer(0.1, os.kill, (init, signal.SIGCONT)).start()
            async with pool.acquire("next") as ws:
                again = ws.id
                after = await ws.exec(ExecRequest(argv=["python3", "-I", "-c", ZOMBIE_COUNT], timeout_s=30))
            return first, again, left, zombies, after, pool.stats()

    first, again, left, zombies, after, stats = trio.run(main)
    assert left.failure == FailureKind.OK and left.stdout == b"forked\n", left
    assert zombies.stdout == b"16\n", zombies  # the path under test ran: init had not reaped them yet
    assert again == first and stats["recycled"] == 2 and stats["resets_refused"] == 0, stats
    assert after.stdout == b"0\n", after  # and the next task sees none of them
