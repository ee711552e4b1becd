"""Every budget and every FailureKind, classified from counters and exit status in a real container."""

from __future__ import annotations

import ast
import os
import time

import pytest
import trio

from sandbox.failure import FailureKind
from sandbox.on_demand import on_demand
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tests.sandbox_support import in_workspace, py, run_one, sh, small_config

pytestmark = pytest.mark.docker


def test_ok_and_nonzero_exit():
    assert run_one(sh("exit 0")).failure == FailureKind.OK
    failed = run_one(sh("exit 4"))
    assert failed.failure == FailureKind.NONZERO_EXIT and failed.exit_code == 4


def test_memory_bomb_is_oom():
    result = run_one(py("x = []\nwhile True: x.append(bytearray(16 << 20))"))
    assert result.failure == FailureKind.OOM, result


def test_fork_bomb_is_pids_limit():
    result = run_one(sh("bomb() { bomb | bomb & }; bomb; sleep 2", timeout_s=8))
    assert result.failure == FailureKind.PIDS_LIMIT, result


def test_filling_the_disk_is_disk_full():
    result = run_one(sh("dd if=/dev/zero of=/workspace/fill bs=1M count=500"))
    assert result.failure == FailureKind.DISK_FULL, result
    inodes = run_one(
        sh("mkdir d && cd d && for i in $(seq 1 100000); do : > f$i || exit 1; done"),
        small_config(budgets={"workspace_inodes": 500}),
    )
    assert inodes.failure == FailureKind.DISK_FULL, inodes


def test_file_size_limit_is_disk_full():
    config = small_config(budgets={"fsize_mb": 1})
    result = run_one(ExecRequest(argv=["dd", "if=/dev/zero", "of=/workspace/big", "bs=1M", "count=4"]), config)
    assert result.failure == FailureKind.DISK_FULL and result.signal == 25, result  # SIGXFSZ
    through_shell = run_one(sh("head -c 4194304 /dev/zero > /workspace/big"), config)
    assert through_shell.failure == FailureKind.DISK_FULL and through_shell.exit_code == 128 + 25


def test_endless_loop_times_out_within_deadline_plus_one_second():
    started = time.monotonic()
    result = run_one(py("while True: pass", timeout_s=1.5))
    host_wall = time.monotonic() - started
    assert result.failure == FailureKind.TIMEOUT
    assert 1.5 <= result.wall_s <= 2.5, result.wall_s
    assert host_wall < 10  # includes container start and removal


def test_sleep_forever_and_blocking_stdin_time_out():
    assert run_one(sh("sleep infinity", timeout_s=1)).failure == FailureKind.TIMEOUT
    result = run_one(ExecRequest(argv=["python3", "-c", "import os; os.read(0, 1)"], timeout_s=5))
    # stdin is closed right away, so a blocking read returns EOF instead of hanging
    assert result.failure == FailureKind.OK and result.wall_s < 2


def test_output_flood_is_truncated():
    for script in ("yes", "head -c 100000000 /dev/zero", "while true; do printf 'x'; done"):
        result = run_one(sh(script, output_limit_bytes=4096, timeout_s=10))
        assert result.failure == FailureKind.OUTPUT_TRUNCATED, (script, result.failure)
        assert len(result.stdout) + len(result.stderr) <= 4096 and result.truncated


def test_episode_call_budget_and_wall_clock():
    async def go(ws):
        first = [await ws.exec(sh("true")) for _ in range(3)]
        refused = await ws.exec(sh("true"))
        file_refused = await ws.read_file("x")
        return first, refused, file_refused

    first, refused, file_refused = in_workspace(go, small_config(episode={"max_calls": 3}))
    assert all(r.failure == FailureKind.OK for r in first)
    assert refused.failure == FailureKind.SANDBOX_DENIED and "3 tool calls" in refused.detail
    assert file_refused.failure == FailureKind.SANDBOX_DENIED

    async def slow(ws):
        capped = await ws.exec(sh("sleep 5", timeout_s=30))
        after = await ws.exec(sh("true"))
        return capped, after

    capped, after = in_workspace(slow, small_config(episode={"wall_s": 1.0}))
    assert capped.failure == FailureKind.TIMEOUT and capped.wall_s < 2.5  # capped by the episode's wall clock
    assert after.failure == FailureKind.TIMEOUT and "wall clock" in after.detail


def test_the_wall_clock_starts_when_the_workspace_is_handed_out_not_when_it_was_warmed():
    config = small_config(pool={"size": 1}, episode={"wall_s": 2.0})

    async def main():
        async with WorkspacePool(config) as pool:
            await pool.wait_ready()
            await trio.sleep(3.0)  # the warm workspace outlives the episode's wall clock in the pool
            async with pool.acquire("pytest") as ws:
                first = await ws.exec(sh("true"))
                await trio.sleep(2.5)
                late = await ws.exec(sh("true"))
            return pool.warm_hits, first, late

    warm_hits, first, late = trio.run(main)
    assert warm_hits == 1 and first.failure == FailureKind.OK, first
    assert late.failure == FailureKind.TIMEOUT and "wall clock" in late.detail  # the clock does run from the hand-out


def test_an_on_demand_workspace_starts_a_container_only_at_its_first_operation():
    async def main():
        async with WorkspacePool(small_config()) as pool:
            async with on_demand(pool, owner="pytest") as idle:
                assert not idle.started
            untouched = (pool.warm_hits + pool.cold_starts, len(pool.live))
            async with on_demand(pool, owner="pytest") as ws:
                wrote = await ws.write_file("a.txt", b"x")
                listed = await ws.list_dir(".")
                held = len(pool.live)
            await trio.sleep(0.5)
            return untouched, wrote, listed, held, pool.warm_hits + pool.cold_starts

    untouched, wrote, listed, held, started = trio.run(main)
    assert untouched == (0, 0) and held == 1 and started == 1
    assert wrote.failure == FailureKind.OK and [e.name for e in listed.entries] == ["a.txt"]


def test_cpu_quota_limits_a_multi_core_hog():
    code = (
        "import multiprocessing as m, time\n"
        "def spin():\n    while True: pass\n"
        "usage = lambda: int(open('/sys/fs/cgroup/cpuacct/cpuacct.usage').read())\n"
        "u0 = usage(); ps = [m.Process(target=spin) for _ in range(2)]; [p.start() for p in ps]\n"
        "time.sleep(2); print((usage() - u0) / 1e9); [p.kill() for p in ps]"
    )
    result = run_one(py(code, timeout_s=10), small_config(budgets={"cpus": 0.5}))
    assert result.failure == FailureKind.OK, result
    cpu_seconds = float(result.stdout_text)
    # Two spinning processes for 2 s would use ~4 CPU-seconds unthrottled; the quota allows ~1.
    assert 0.1 < cpu_seconds < 1.4, cpu_seconds


def test_cpuset_pins_the_workspace_to_the_named_cpus():
    cpu = max(os.sched_getaffinity(0))
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    pinned = run_one(py(code), small_config(budgets={"cpuset_cpus": str(cpu)}))
    assert pinned.failure == FailureKind.OK and pinned.stdout_text.strip() == f"[{cpu}]", pinned
    free = run_one(py(code))
    assert free.failure == FailureKind.OK and len(ast.literal_eval(free.stdout_text)) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("cpus", ["", "a", "1;2", "0-", "-1"])
def test_a_malformed_cpuset_is_refused_in_the_config(cpus):
    with pytest.raises(ValueError, match="cpuset_cpus"):
        small_config(budgets={"cpuset_cpus": cpus})
