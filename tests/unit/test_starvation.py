"""A test the host starved of CPU is told from one that slept or deprioritized itself, on fake scheduler readings:
the runner's pure parts (schedstat and stat parsing, the starved and wants-CPU decisions, the watch at a
deadline), the grader's verdict of a starved kill, and how far the host waits for a call that may run on."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import ExecRequest, ExecResult
from sandbox.runner import watch as runner_watch
from sandbox.runner.watch import (
    Thread,
    Waits,
    deprioritized,
    parse_schedstat,
    parse_stat,
    parse_voluntary,
    starved,
    wants_cpu,
    window_of,
)
from sandbox.workspace import SWEEP_ALLOWANCE_S, Workspace
from tasks.grader import Grader, GraderConfig, deadline_kill
from tasks.submission import Submission
from tasks.task import Limits, StdinTest
from tests.task_support import task

S = 1_000_000_000  # nanoseconds
MS = S // 1000


def test_schedstat_stat_and_status_are_parsed():
    assert parse_schedstat("123456 7890 42\n") == (123456, 7890, 42)
    # A command name may hold spaces and parentheses: fields are counted from the last ')'.
    fields = ["R"] + ["0"] * 15 + ["19"] + ["0"] * 21 + ["5"] + ["0"] * 10
    line = b"4242 (a) b (c) " + " ".join(fields).encode() + b"\n"
    assert parse_stat(line) == ("R", 19, 5)
    with open(f"/proc/{os.getpid()}/stat", "rb") as handle:  # this kernel's own layout
        state, nice, policy = parse_stat(handle.read())
    assert state == "R" and policy in (0, 3, 5) and -20 <= nice <= 19
    with open(f"/proc/{os.getpid()}/status") as handle:
        assert parse_voluntary(handle.read()) >= 0
    with pytest.raises(ValueError):
        parse_voluntary("Name:\tx\n")


@pytest.mark.parametrize(
    ("task", "why"),
    [
        (Thread(7, "R", 0, 0, 0), ""),
        (Thread(7, "R", 0, 0, 0, nice=19), "nice 19"),
        (Thread(7, "R", 0, 0, 0, policy=5), "policy 5"),  # SCHED_IDLE
        (Thread(7, "R", 0, 0, 0, policy=3), "policy 3"),  # SCHED_BATCH
        (Thread(7, "R", 0, 0, 0, pinned=True), "pinned"),
    ],
)
def test_a_tree_that_made_itself_wait_is_deprioritized(task, why):
    found = deprioritized([Thread(1, "S", 0, 0, 0), task])
    assert (why in found) if why else found == ""


def test_starved_means_one_task_waited_half_the_wall_time_beyond_what_the_tree_explains():
    # The CI case: 0.6 s of CPU in 11 s, runnable all along.
    assert starved(wait_s=10.4, cpu_s=0.6, wall_s=11.0, cpu_limit=1.25, throttle=2.0)
    # A sleeper waits for nothing; a tree over its CPU limit is not starved whatever it waited.
    assert not starved(wait_s=0.01, cpu_s=0.01, wall_s=11.0, cpu_limit=1.25, throttle=2.0)
    assert not starved(wait_s=10.4, cpu_s=1.3, wall_s=11.0, cpu_limit=1.25, throttle=2.0)
    # Two busy processes on a one-core quota each wait half the time: their own CPU use (throttle x CPU)
    # explains it.
    assert not starved(wait_s=3.0, cpu_s=3.0, wall_s=6.0, cpu_limit=6.25, throttle=2.0)
    # A herd of 100 processes woken at once (measured in the sandbox: 5.1 s of run delay in sum, 0.08 s at most,
    # 0.31 s of CPU in 5 s): its sum would pass, its most-delayed task does not.
    assert starved(wait_s=5.1, cpu_s=0.31, wall_s=5.0, cpu_limit=0.625, throttle=2.0)
    assert not starved(wait_s=0.08, cpu_s=0.31, wall_s=5.0, cpu_limit=0.625, throttle=2.0)


def test_a_wait_still_going_on_is_credited_from_the_first_reading_that_shows_it():
    waits = Waits()
    assert waits.update([Thread(9, "R", 5 * MS, 2 * S, 10)], now=100.0) == {9: 2 * S}
    # Runnable, same CPU time and timeslices 0.5 s later: it never ran, so it waited all along.
    assert waits.update([Thread(9, "R", 5 * MS, 2 * S, 10)], now=100.5) == {9: 2 * S + S // 2}
    assert waits.update([Thread(9, "R", 5 * MS, 2 * S, 10)], now=101.0) == {9: 3 * S}
    # It ran: its run_delay now holds the whole wait, nothing is counted twice.
    assert waits.update([Thread(9, "R", 6 * MS, 3 * S + 100 * MS, 11)], now=101.5) == {9: 3 * S + 100 * MS}
    # Asleep, or running (its CPU time moved): nothing is credited.
    assert waits.update([Thread(9, "S", 6 * MS, 3 * S + 100 * MS, 11)], now=102.0) == {9: 3 * S + 100 * MS}
    assert waits.update([Thread(9, "R", 7 * MS, 3 * S + 100 * MS, 11)], now=102.5) == {9: 3 * S + 100 * MS}


def test_a_window_tells_a_computing_or_waiting_tree_from_a_sleeper():
    before = {1: (Thread(1, "R", 0, 0, 0, voluntary=3), 0), 2: (Thread(2, "S", 0, 0, 0, voluntary=3), 0)}
    # Task 1 ran 10 ms and stayed runnable with no voluntary switch: it waited the other 490 ms, though its
    # run_delay does not show it yet; task 2 slept.
    after = {1: (Thread(1, "R", 10 * MS, 0, 1, voluntary=3), 0), 2: (Thread(2, "S", 0, 0, 0, voluntary=4), 0)}
    spans = window_of(before, after, 0.5)
    assert spans == {1: (10 * MS, 490 * MS), 2: (0, 0)} and wants_cpu(spans, 0.5)
    # Runnable at both readings but it slept in between (a voluntary switch): only its counted waits.
    after = {
        1: (Thread(1, "R", 10 * MS, 20 * MS, 3, voluntary=5), 20 * MS),
        2: (Thread(2, "S", 0, 0, 0, voluntary=4), 0),
    }
    spans = window_of(before, after, 0.5)
    assert spans == {1: (10 * MS, 20 * MS), 2: (0, 0)} and not wants_cpu(spans, 0.5)
    # A task born in the window counts from nothing.
    assert window_of(before, {3: (Thread(3, "R", 0, 300 * MS, 1), 300 * MS)}, 0.5) == {3: (0, 300 * MS)}


class FakeClock:
    cgroup_start = 0.0

    def __init__(self) -> None:
        self.cpu = 0.01

    def used(self) -> float:
        return self.cpu


def _watch(monkeypatch, readings):
    """A watch spawned at t=0 with a cap at t=9 s, reading ``readings`` (lists of Tasks) one after another."""
    monkeypatch.setattr(runner_watch, "tree_tasks", lambda affinity: readings.pop(0))
    clock = FakeClock()
    return runner_watch.StarvationWatch(clock, spawned=0.0, cap=9.0, cpu_limit=0.625, throttle=2.0), clock


def _starving(n: int, state: str = "R", voluntary: int = 2, **fields) -> list[Thread]:
    """The n-th reading of one task that runs 1 ms per 0.5 s and waits the rest (the wait it last ended)."""
    return [Thread(8, state, n * MS, n * 499 * MS, 1 + n, voluntary, **fields)]


def test_the_watch_runs_a_starved_tree_on_and_marks_it_starved_at_its_cap(monkeypatch):
    watch, clock = _watch(monkeypatch, [_starving(n) for n in range(19)])
    for t in range(12):  # read every 0.5 s until the deadline at 6 s
        watch.sample(t * 0.5)
    assert watch.later(6.0) == 6.5  # starved at its deadline: runs on
    watch.sample(6.2)  # past the deadline only `later` reads
    for t in (6.5, 7.0, 7.5, 8.0, 8.5):
        assert watch.later(t) == min(t + 0.5, 9.0)
    assert watch.later(9.0) is None and watch.starved  # the cap
    assert watch.wait_s == pytest.approx(8.982) and watch.wall_s == 9.0


def test_a_tree_whose_start_up_was_starved_and_that_sleeps_now_is_not_starved_at_its_cap(monkeypatch):
    # Starved up to 8 s (its interpreter starting), then asleep: a sleeper, whatever it waited before.
    readings = [_starving(n) for n in range(17)] + [_starving(16, state="S", voluntary=3)] * 2
    watch, clock = _watch(monkeypatch, readings)
    for t in range(12):
        watch.sample(t * 0.5)
    assert watch.later(6.0) == 6.5
    for t in (6.5, 7.0, 7.5, 8.0):
        assert watch.later(t) == t + 0.5
    assert watch.later(8.5) is None and not watch.starved  # asleep: killed before its cap, time_limit


def test_at_the_cap_a_sleeper_is_not_starved_however_long_it_waited_to_start(monkeypatch):
    readings = [_starving(n) for n in range(16)] + [_starving(15, state="S", voluntary=3)] * 2
    watch, clock = _watch(monkeypatch, readings)
    watch.cap = 8.0
    for t in range(12):
        watch.sample(t * 0.5)
    for t in (6.0, 6.5, 7.0, 7.5):
        assert watch.later(t) == t + 0.5
    assert watch.later(8.0) is None and not watch.starved


@pytest.mark.parametrize(
    "tasks",
    [
        [Thread(8, "S", 10 * MS, 10 * MS, 5)],  # a sleeper
        _starving(12, nice=19),  # starved, but it niced itself
        _starving(12) + [Thread(9, "S", 0, 0, 1, policy=5)],  # one SCHED_IDLE thread
    ],
)
def test_the_watch_kills_at_the_deadline_a_sleeper_or_a_deprioritized_tree(monkeypatch, tasks):
    watch, clock = _watch(monkeypatch, [tasks])
    assert watch.later(6.0) is None and not watch.starved


def test_without_a_grace_the_runner_keeps_the_old_deadline():
    clock = FakeClock()
    assert runner_watch.StarvationWatch.of(clock, 0.0, 6.0, None, 0.625) is None
    assert runner_watch.StarvationWatch.of(clock, 0.0, 6.0, 3.0, None) is None
    clock.cgroup_start = None  # the cgroup cannot be read: nothing to judge the CPU by
    assert runner_watch.StarvationWatch.of(clock, 0.0, 6.0, 3.0, 0.625) is None


# ------------------------------------------------------------------ host side


def test_a_grace_needs_a_cpu_limit():
    with pytest.raises(ValueError, match="cpu_limit_s"):
        ExecRequest(argv=["x"], timeout_s=6.0, starved_grace_s=3.0)


def test_the_host_waits_out_the_grace_and_never_past_the_episode():
    ws = Workspace("c" * 64, None, SandboxConfig.model_validate({"episode": {"wall_s": 20.0}}), owner="t")
    request = ExecRequest(argv=["x"], timeout_s=6.0, cpu_limit_s=0.625, starved_grace_s=20.0)
    resolved = ws._resolve_exec(request)
    assert resolved.timeout_s == 6.0 and 13.9 < resolved.starved_grace_s <= 14.0  # cut to the episode's 20 s
    resolved = ws._resolve_exec(request.model_copy(update={"starved_grace_s": 3.0}))
    assert resolved.starved_grace_s == 3.0
    assert ws._backstop(resolved) == 6.0 + 3.0 + ws.config.calls.grace_s + SWEEP_ALLOWANCE_S


def _killed(wall_s: float, cpu_s: float, starved_: bool) -> ExecResult:
    return ExecResult(failure=FailureKind.TIMEOUT, wall_s=wall_s, cpu_s=cpu_s, run_delay_s=5.9, starved=starved_)


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        (_killed(7.5, 0.01, True), Verdict.INFRA_ERROR),  # starved at the end of its grace: the host's failure
        (_killed(7.5, 0.01, False), Verdict.TIME_LIMIT),  # a sleeper at its deadline
        (_killed(7.5, 0.7, True), Verdict.TIME_LIMIT),  # ran on to its CPU limit: the program's failure
    ],
)
def test_a_starved_deadline_kill_is_infra_error_and_every_other_kill_time_limit(result, verdict):
    grader = Grader(None, GraderConfig(speed_factor=1.0, min_time_s=0.5))
    t = task(limits=Limits(time_s=0.5))
    request, judge = grader.plan(t, 0, t.tests[0])
    assert request.timeout_s == 6.0 and request.starved_grace_s == 12.0 and request.cpu_limit_s == 0.625
    got = grader._verdict(0, judge, request, result)
    assert got.verdict == verdict
    if verdict == Verdict.INFRA_ERROR:
        assert "starved of CPU by the host: waited 5.90s for a CPU in 7.50s of wall time" in got.detail


def test_a_cpu_limit_kill_past_the_deadline_is_no_deadline_kill():
    request = ExecRequest(argv=["x"], timeout_s=6.0, cpu_limit_s=0.625, starved_grace_s=3.0)
    assert deadline_kill(request, _killed(6.2, 0.01, False))
    assert not deadline_kill(request, _killed(8.0, 0.7, False))  # the batch goes on: it computed, it did not sleep


def test_starvation_can_be_left_unjudged():
    grader = Grader(None, GraderConfig(speed_factor=1.0, min_time_s=0.5, starved_grace_factor=None))
    t = task(limits=Limits(time_s=0.5))
    assert grader.plan(t, 0, t.tests[0])[0].starved_grace_s is None


class GraceRecorder:
    """A pool whose containers have an episode of ``wall_s`` and record the graces they are asked to run under."""

    def __init__(self, wall_s: float = 30.0) -> None:
        self.graces: list[float | None] = []
        self.wall_s = wall_s

    @contextlib.asynccontextmanager
    async def acquire(self, owner: str, keys: frozenset[str] | None = None):
        graces = self.graces
        wall_s = self.wall_s

        class Workspace:
            config = SimpleNamespace(episode=SimpleNamespace(wall_s=wall_s))

            async def write_file(self, path, data):
                return SimpleNamespace(failure=FailureKind.OK, detail="")

            async def exec_batch(self, request):
                graces.extend(item.starved_grace_s for item in request.items)
                return SimpleNamespace(
                    results=[ExecResult(stdout=b"1\n", cpu_s=0.1, wall_s=0.1, exit_code=0) for _ in request.items]
                )

        yield Workspace()


def test_the_grace_is_cut_to_what_the_episode_leaves():
    t = task(limits=Limits(time_s=1.0), tests=(StdinTest(input="1\n", output="1\n"),) * 3)
    pool = GraceRecorder()
    grader = Grader(pool, GraderConfig(speed_factor=1.0))  # backstop 11 s, grace 22 s
    result = trio.run(grader.grade, t, Submission(task_id="t", completion="print(1)"))
    assert result.passed
    # 3 x 1 s of limits and the 11 s backstop leave 16 s of the 30 s episode: the three graces together fit in them
    # (each test may run on while starved, and all three could in turn)
    assert pool.graces == [pytest.approx(16.0 / 3)] * 3
    roomy = GraceRecorder(wall_s=3600.0)
    assert trio.run(
        Grader(roomy, GraderConfig(speed_factor=1.0)).grade, t, Submission(task_id="t", completion="print(1)")
    ).passed
    assert roomy.graces == [pytest.approx(22.0)] * 3  # room to spare: the configured 2 x backstop
