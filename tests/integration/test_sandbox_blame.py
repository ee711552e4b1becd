"""Programs that try to hide behind masking: a failure the candidate causes is scored, never ``infra_error``.

Each attack is a real program in a real workspace. Before the fixes these came back ``infra_error``
(masked): a command that ignores its stdin killed the runner with SIGPIPE, memory parked outside any
process let the OOM killer take the runner, a deep tree crashed the copy-out, zombies of
``clone(CLONE_PARENT)`` children filled the pids budget. Only a failure of the engine, the daemon or the
host may mask (the last test: a container removed from outside; one killed from outside is in
test_sandbox_lifecycle.py).
"""

from __future__ import annotations

import time

import pytest
import trio

from sandbox.failure import FailureKind
from sandbox.pool import WorkspacePool
from sandbox.protocol import BatchExecRequest, ExecRequest
from sandbox.workspace import Workspace, classify_loss
from tests.sandbox_support import in_workspace, py, sh, small_config

pytestmark = pytest.mark.docker

FOUR_MIB = b"1 2\n" * (1 << 20)

# Fills the container's memory with System V shared memory (it outlives every process, so the OOM killer
# cannot free it by killing the candidate), leaves a few MiB, then makes the runner allocate: a large
# output it must buffer. Whatever the kernel kills, it is the candidate's own doing.
PARK_SHM = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def usage():
    return int(open('/sys/fs/cgroup/memory/memory.usage_in_bytes').read())
limit = int(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read())
chunk = 8 << 20
while limit - usage() > {leave}:
    ident = libc.shmget(0, chunk, 0o1600)
    if ident < 0:
        break
    addr = libc.shmat(ident, None, 0)
    ctypes.memset(addr, 1, chunk)
    libc.shmdt(ctypes.c_void_p(addr))
os.write(1, b'x' * {output})
"""


def test_commands_that_ignore_their_stdin_never_lose_the_runner():
    """The SIGPIPE class: 4 MiB of stdin to programs that exit at once, crash, or read one byte."""
    programs = [
        ExecRequest(argv=["python3", "-c", "print(42)"], stdin=FOUR_MIB),
        ExecRequest(argv=["true"], stdin=FOUR_MIB),
        ExecRequest(argv=["head", "-c1"], stdin=FOUR_MIB),
        ExecRequest(argv=["python3", "-c", "import sys; sys.exit(3)"], stdin=FOUR_MIB),
        sh("echo 'def f(:' > bad.py && python3 bad.py", stdin=b"2\n1 2\n"),
    ]

    async def go(ws: Workspace):
        results = [await ws.exec(request) for request in programs * 3]
        batch = await ws.exec_batch(BatchExecRequest(items=programs))
        return results, batch.results, await ws.exec(sh("echo alive"))

    results, batch, alive = in_workspace(go)
    kinds = [r.failure for r in results + batch]
    assert FailureKind.INFRA_ERROR not in kinds and not any(r.failure == FailureKind.WORKSPACE_LOST for r in results)
    assert [r.stdout for r in results[:3]] == [b"42\n", b"", b"1"]
    assert results[3].exit_code == 3 and results[4].failure == FailureKind.NONZERO_EXIT
    assert alive.failure == FailureKind.OK and alive.stdout == b"alive\n"


@pytest.mark.parametrize(
    # 2 MiB left is no longer a certain OOM since each container holds a fork server: measured, the runner then
    # fitted 512 KiB and 1 MiB of output (the usage the program reads counts the server's pages too)
    "leave_mb, output_kb, must_oom",
    [(1, 1024, True), (1, 512, True), (2, 512, False), (8, 1024, False), (24, 64, False)],
)
def test_memory_parked_outside_processes_is_the_candidates_oom(leave_mb, output_kb, must_oom):
    """With a few MiB left the runner may or may not fit the output; with 1 MiB it cannot."""
    code = PARK_SHM.format(leave=leave_mb << 20, output=output_kb << 10)

    async def go(ws: Workspace):
        during = await ws.exec(py(code, timeout_s=20))
        after = await ws.exec(sh("echo alive"))
        return during, after

    during, after = in_workspace(go, small_config(budgets={"memory_mb": 128, "workspace_mb": 32, "tmp_mb": 16}))
    assert during.failure == FailureKind.OOM if must_oom else during.failure in (FailureKind.OK, FailureKind.OOM), (
        during
    )
    # The runner either survived (the kernel killed the command) or went down with the container; then
    # every later call of the workspace is the same scored failure, never infra_error.
    assert after.failure in (FailureKind.OK, FailureKind.OOM), after


def test_a_batch_keeps_the_results_before_the_item_that_took_the_runner_down():
    code = PARK_SHM.format(leave=1 << 20, output=1 << 20)
    items = [sh("echo one"), sh("echo two"), py(code, timeout_s=20), sh("echo four")]

    async def go(ws: Workspace):
        return (await ws.exec_batch(BatchExecRequest(items=items))).results

    results = in_workspace(go, small_config(budgets={"memory_mb": 128, "workspace_mb": 32, "tmp_mb": 16}))
    assert [r.stdout for r in results[:2]] == [b"one\n", b"two\n"]
    assert results[2].failure == FailureKind.OOM, results[2]
    assert len(results) == 4 and results[3].failure in (FailureKind.OK, FailureKind.OOM)
    assert FailureKind.INFRA_ERROR not in [r.failure for r in results]


def test_a_tree_too_deep_to_copy_out_is_a_tool_error():
    """tarfile recurses per directory level: a deep tree raised RecursionError in the runner (-> infra)."""
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('a'); os.chdir('a')\nprint('made')"

    async def go(ws: Workspace):
        made = await ws.exec(py(deep, timeout_s=30))
        archive = await ws._file_op("get_archive", _archive_request(ws, "a"))
        listing = await ws.list_dir(".")
        return made, archive, listing

    made, archive, listing = in_workspace(go)
    assert made.stdout == b"made\n", made
    assert archive.failure == FailureKind.TOOL_ERROR and "RecursionError" in archive.detail, archive
    assert listing.failure == FailureKind.OK and [e.name for e in listing.entries] == ["a"]


def _archive_request(ws: Workspace, path: str):
    from sandbox.protocol import GetArchiveRequest

    return GetArchiveRequest(path=ws.path(path), max_bytes=64 << 20)


CLONE_PARENT_ZOMBIES = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_PARENT, SIGCHLD = 0x00008000, 17
made = 0
for _ in range({n}):
    pid = libc.syscall(56, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)  # raw clone(): the child is the runner's
    if pid == 0:
        os._exit(0)
    made += pid > 0
print(made)
"""


def test_clone_parent_children_never_pile_up_as_zombies():
    config = small_config(budgets={"pids": 40})

    async def go(ws: Workspace):
        made = [await ws.exec(py(CLONE_PARENT_ZOMBIES.format(n=30))) for _ in range(4)]
        forks = await ws.exec(sh("for i in $(seq 1 25); do sleep 1 & done; wait; echo forked", timeout_s=10))
        return made, forks

    made, forks = in_workspace(go, config)
    created = sum(int(r.stdout or b"0") for r in made)
    # 4 x 30 children of the runner: more than the pids budget of 40 if any stayed a zombie.
    assert created >= 100 or all(r.failure == FailureKind.NONZERO_EXIT for r in made), made
    assert forks.failure == FailureKind.OK and forks.stdout == b"forked\n", forks


def test_a_container_removed_from_outside_is_infra_error():
    async def main():
        async with WorkspacePool(small_config()) as pool:
            async with pool.acquire("victim") as ws:

                async def remove_soon():
                    await trio.sleep(0.5)
                    await pool.engine.remove(ws.id)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(remove_soon)
                    started = time.monotonic()
                    during = await ws.exec(sh("sleep 20", timeout_s=30))
                return during, time.monotonic() - started

    during, elapsed = trio.run(main)
    assert during.failure == FailureKind.INFRA_ERROR and elapsed < 10, (during, elapsed)


@pytest.mark.parametrize(
    "state, answered, expected",
    [
        ({"Running": False, "OOMKilled": True, "ExitCode": 137}, True, FailureKind.OOM),
        ({"Running": False, "OOMKilled": False, "ExitCode": 1}, True, FailureKind.WORKSPACE_LOST),
        ({"Running": False, "OOMKilled": False, "ExitCode": 141}, True, FailureKind.WORKSPACE_LOST),
        ({"Running": False, "OOMKilled": False, "ExitCode": 137}, True, FailureKind.INFRA_ERROR),
        ({"Running": False, "OOMKilled": False, "ExitCode": 143}, True, FailureKind.INFRA_ERROR),
        ({"Running": True, "OOMKilled": False, "ExitCode": 0}, False, FailureKind.TIMEOUT),
        ({"Running": True, "OOMKilled": False, "ExitCode": 0}, True, None),
    ],
)
def test_classify_loss(state, answered, expected):
    assert classify_loss(state, answered=answered)[0] == expected


IPC_FLOOD = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
counts = []
for make in (lambda: libc.msgget(0, 0o1600), lambda: libc.shmget(0, 4096, 0o1600), lambda: libc.semget(0, 1, 0o1600)):
    made = 0
    while made < 40000 and make() >= 0:
        made += 1
    counts.append(made)
print(*counts)
"""


def test_ipc_floods_are_bounded_so_their_cleanup_stays_short():
    """IPC objects outlive their process; the runner removes them after the call. Uncapped (32000 of each
    kind) that clean-up ran far past the call's deadline; the namespace now holds 256 of each."""

    async def go(ws: Workspace):
        started = time.monotonic()
        flood = await ws.exec(py(IPC_FLOOD, timeout_s=20))
        return flood, time.monotonic() - started, await ws.exec(py(IPC_FLOOD, timeout_s=20))

    flood, host_wall, again = in_workspace(go)
    assert flood.failure == FailureKind.OK and flood.stdout.split() == [b"256", b"256", b"256"], flood
    assert host_wall < 10, host_wall
    assert again.stdout == flood.stdout  # the first call's objects were all removed
