"""Attacks on the starvation watch's reading of /proc, on crafted and real kernel data: odd thread names, a task caught
just woken, a thread id reused between readings. A program must not make its sleep or its own CPU look like a wait
for a CPU the host caused, nor crash the parsers."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from sandbox.runner import watch as runner_watch
from sandbox.runner.watch import Thread, Waits, parse_stat, read_task, starved, window_of

S = 1_000_000_000
MS = S // 1000


def _stat(name: bytes, state: str = "R", nice: int = 0, policy: int = 0) -> bytes:
    fields = [state] + ["0"] * 15 + [str(nice)] + ["0"] * 21 + [str(policy)] + ["0"] * 10
    return b"4242 (" + name + b") " + " ".join(fields).encode() + b"\n"


@pytest.mark.parametrize(
    "name",
    [b") R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 0", b"a\nb) S 9", b"))))))))))))))", b"\n\n\n", b"x ) ( y", b""],
)
def test_a_thread_name_cannot_forge_its_state_nice_or_policy(name):
    assert parse_stat(_stat(name, "S", 19, 5)) == ("S", 19, 5)


def test_a_real_thread_named_to_forge_a_stat_line_is_read_as_it_is():
    # prctl(PR_SET_NAME) on a thread of this process; the kernel truncates at 15 bytes.
    libc = ctypes.CDLL(None, use_errno=True)
    ready, done, tid = threading.Event(), threading.Event(), []

    def named() -> None:
        libc.prctl(15, ctypes.c_char_p(b") R 0 0 0\n) S 1"), 0, 0, 0)
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(5)

    thread = threading.Thread(target=named)
    thread.start()
    try:
        ready.wait(5)
        for _ in range(200):  # until it is asleep in done.wait (just after ready.set() it may still run)
            task = read_task(os.getpid(), tid[0], os.sched_getaffinity(0))
            if task is not None and task.state == "S":
                break
            time.sleep(0.01)
        assert task is not None and task.state == "S" and task.nice == os.getpriority(os.PRIO_PROCESS, 0)
        with open(f"/proc/{os.getpid()}/task/{tid[0]}/comm", "rb") as handle:
            assert b")" in handle.read()  # the forged name is really there
    finally:
        done.set()
        thread.join()


def test_a_sleeper_caught_just_woken_is_not_credited_the_whole_interval_as_a_wait():
    # Asleep at one reading, runnable (woken, not yet run) at the next with the same counters: it slept, then
    # waited for at most what the next reading shows. Crediting it the interval would let a sleeper's wake-up,
    # timed to a reading, add STARVED_SAMPLE_S of wait per reading.
    waits = Waits()
    assert waits.update([Thread(9, "S", 5 * MS, 2 * MS, 10)], now=100.0) == {9: 2 * MS}
    assert waits.update([Thread(9, "R", 5 * MS, 2 * MS, 10)], now=100.5) == {9: 2 * MS}
    # Runnable and standing still at two readings in a row: that one did wait all along.
    assert waits.update([Thread(9, "R", 5 * MS, 2 * MS, 10)], now=101.0) == {9: 2 * MS + S // 2}


def test_a_reused_thread_id_is_a_new_task_not_a_negative_cpu_and_a_long_wait():
    # Thread 5 ran 400 ms and exited; a new thread got id 5 and ran 1 ms. Both runnable, no voluntary switch:
    # the new one is born in the window, its wait is what it shows, not the window less a negative CPU time.
    before = {5: (Thread(5, "R", 400 * MS, 0, 40, voluntary=0), 0)}
    after = {5: (Thread(5, "R", 1 * MS, 0, 1, voluntary=0), 0)}
    spans = window_of(before, after, 0.5)
    cpu, wait = spans[5]
    assert cpu == 1 * MS and wait <= 0.5 * S - 1 * MS
    assert not starved(wait / S, 0.3, 0.5, 0.625, 2.0)


def test_a_task_whose_counters_went_back_is_born_anew_in_the_ongoing_wait():
    waits = Waits()
    waits.update([Thread(5, "R", 400 * MS, 10 * MS, 40)], now=100.0)
    # Same id, counters lower: another task; its ongoing wait starts at this reading.
    assert waits.update([Thread(5, "R", 1 * MS, 0, 1)], now=100.5) == {5: 0}


class Clock:
    """A tree clock that reads 10 ms of CPU at every reading."""

    cgroup_start = 0.0

    @staticmethod
    def used() -> float:
        return 0.01


def test_the_watch_survives_a_tree_that_changes_under_every_reading(monkeypatch):
    # Tasks appear, vanish, change state and reuse ids between readings: no reading raises.
    readings = []
    for n in range(30):
        tid = 100 + n % 3
        readings.append([Thread(tid, "RSTtD"[n % 5], (n * 7) % 11 * MS, n * MS, n % 4, voluntary=n % 2)])
    monkeypatch.setattr(runner_watch, "tree_tasks", lambda affinity: readings.pop(0))

    watch = runner_watch.StarvationWatch(Clock(), spawned=0.0, cap=9.0, cpu_limit=0.625, throttle=2.0)
    for t in range(12):
        watch.sample(t * 0.5)
    assert watch.later(6.0) is None and not watch.starved  # a sleeper-like tree: killed at its deadline


def _pinned_then_unpinned(n: int) -> list[Thread]:
    """The n-th reading of a busy loop that waits on a busy CPU, not pinned at any reading (it unpinned itself)."""
    return [Thread(8, "R", n * MS, n * 499 * MS, 1 + n, voluntary=2)]


@pytest.mark.parametrize(("idle_per_s", "runs_on"), [(1.0, False), (0.0, True)])
def test_a_wait_beside_an_idle_cpu_is_not_the_hosts(monkeypatch, idle_per_s, runs_on):
    # A task waited all along, no reading shows it pinned: starved, if every CPU it may use was busy. One of its CPUs
    # sat idle the whole time: it put itself on the busy one (pinned, then unpinned between readings) and the balancer
    # left it there; the wait is its own, killed at the deadline (time_limit), never run on nor marked starved.
    readings = [_pinned_then_unpinned(n) for n in range(19)]
    monkeypatch.setattr(runner_watch, "tree_tasks", lambda affinity: readings.pop(0))
    clock = {"t": 0.0}
    monkeypatch.setattr(runner_watch, "idle_cpu_s", lambda cpus: 1000.0 + idle_per_s * clock["t"])

    watch = runner_watch.StarvationWatch(Clock(), spawned=0.0, cap=9.0, cpu_limit=0.625, throttle=2.0)
    for t in range(12):
        clock["t"] = t * 0.5
        watch.sample(t * 0.5)
    clock["t"] = 6.0
    got = watch.later(6.0)
    if not runs_on:
        assert got is None and not watch.starved and "idle" in watch.why
        return
    assert got == 6.5
    for t in (6.5, 7.0, 7.5, 8.0, 8.5):
        clock["t"] = t
        assert watch.later(t) == min(t + 0.5, 9.0)
    clock["t"] = 9.0
    assert watch.later(9.0) is None and watch.starved


def test_idle_cpu_seconds_are_read_from_proc_stat():
    idle = runner_watch.idle_cpu_s(os.sched_getaffinity(0))
    assert idle is not None and idle >= 0
    assert runner_watch.idle_cpu_s(set()) == 0.0


def test_the_wait_credited_to_the_host_excludes_the_time_a_cpu_beside_it_sat_idle():
    # A busy loop put itself on a busy CPU while another CPU of the container sat idle 35% of the time (measured:
    # other tests loading the host): 0.5 s of wait in a 0.5 s window, 0.175 s of it beside an idle CPU.
    assert starved(0.5, 0.01, 0.5, 0.625, 2.0)
    assert not starved(0.5, 0.01, 0.5, 0.625, 2.0, idle_s=0.26)
    # The host's own starvation of a container pinned to one busy CPU: nothing idle, unchanged.
    assert starved(0.5, 0.01, 0.5, 0.625, 2.0, idle_s=0.0)
