"""Attacks on the starvation grace (sandbox/runner/watch.py ``StarvationWatch``) by the program itself, in the real
sandbox on a host this module does not load: a program that fails (busy loop, sleep) must stay ``time_limit`` however
it bends what /proc shows the runner, never ``infra_error`` (masked) nor ``passed``, and the runner must not crash.

Each program is graded alone, one after another (none is another's host load), with a 0.2 s limit: CPU limit 0.25 s,
backstop 3 s, grace 6 s (cap 9 s). A program the watch misjudged as starved would run past 3 s; none may.
"""

from __future__ import annotations

import os

import pytest
import trio

from sandbox.failure import Verdict
from sandbox.pool import WorkspacePool
from tasks.grader import Grader, GraderConfig
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Limits, StdinTest
from tests.sandbox_support import sandbox_config
from tests.task_support import task

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LIMIT_S = 0.2
BACKSTOP_S = LIMIT_S * 10 + 1.0
CONFIG = GraderConfig(min_time_s=LIMIT_S, speed_factor=1.0, starved_grace_factor=2.0)

# Threads named with ')', spaces, newlines and a fake stat tail, all asleep: the tree reaches its backstop, where the
# runner parses every name (from the last ')').
ODD_NAMES = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None)
names = [b") R 1 2 3 4", b"a\nb) S 9", b"x ) ( y", b"))))))))))))))", b"\n\n\n"]
def named(name):
    libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    time.sleep(100)
for name in names:
    threading.Thread(target=named, args=(name,), daemon=True).start()
libc.prctl(15, ctypes.c_char_p(b"main) R 0 0"), 0, 0, 0)
time.sleep(100)
"""

# A process stops itself and a child resumes it every 50 ms: states T/S/R flip between readings while the tree sleeps
# on; zombies pile up unreaped; a thread churns short-lived threads so /proc reads race with exits.
STOP_CONT = r"""
import os, signal, threading, time
parent = os.getpid()
if os.fork() == 0:
    while True:
        time.sleep(0.05)
        os.kill(parent, signal.SIGCONT)
for _ in range(20):
    if os.fork() == 0:
        os._exit(0)  # zombies, never reaped
def churn():
    while True:
        t = threading.Thread(target=time.sleep, args=(0.001,))
        t.start()
        t.join()
        time.sleep(0.01)
threading.Thread(target=churn, daemon=True).start()
while True:
    os.kill(parent, signal.SIGSTOP)
    time.sleep(0.01)
"""

# Its own tasks keep one task waiting: 8 spinners beside a victim in the container's one-core quota (a wait without
# host load), the spinners yielding from 2.5 s on. The victim's wait is bought with the spinners' CPU, which the
# tree's CPU counts: it must end at its CPU limit. (Pinning them all to one CPU is refused: sched_setaffinity.)
SELF_STARVED = r"""
import os, threading, time
start = time.monotonic()
def spin():
    while time.monotonic() - start < 2.5:
        pass
    while True:
        os.sched_yield()
for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()
spin()
"""

# The runner shares the container's one-core quota and its CPU is not the tree's: a program that makes the runner
# busy (one-byte writes, each a wake-up, a read, a cgroup read in the runner) throttles the quota the tree waits on,
# while its own CPU stays low. A second thread just wants the CPU (it yields).
RUNNER_BUSY = r"""
import os, threading, time
def want():
    while True:
        os.sched_yield()
threading.Thread(target=want, daemon=True).start()
while True:
    os.write(2, b"x")
    time.sleep(0.0002)
"""

# The most threads the pids limit allows, all asleep: the runner reads ~128 tasks at every reading up to the backstop.
MANY_THREADS = r"""
import threading, time
made = 0
while True:
    try:
        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
        made += 1
    except RuntimeError:
        break
time.sleep(100)
"""

# Sleeps, then prints the right answer after its backstop: must be killed at the backstop, not run on.
LATE_SLEEPER = "import time\ntime.sleep(" + str(BACKSTOP_S + 1.0) + ")\nprint(input())\n"

PROGRAMS = {
    "odd thread names": ODD_NAMES,
    "stop and continue": STOP_CONT,
    "self-starved": SELF_STARVED,
    "runner made busy": RUNNER_BUSY,
    "many threads": MANY_THREADS,
    "late sleeper": LATE_SLEEPER,
}


@pytest.fixture(scope="module")
def graded() -> dict[str, TaskResult]:
    results: dict[str, TaskResult] = {}

    async def main() -> None:
        async with WorkspacePool(sandbox_config(pool={"size": 2})) as pool:
            await pool.wait_ready(120)
            grader = Grader(pool, CONFIG)
            for name, program in {**PROGRAMS, "pin, then unpin": UNPIN_AT_READINGS}.items():
                t = task(task_id=name, limits=Limits(time_s=LIMIT_S), tests=(StdinTest(input="7\n", output="7\n"),))
                results[name] = await grader.grade(t, Submission(task_id=name, completion=program))

    trio.run(main)
    return results


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_failing_program_that_bends_proc_is_time_limit_never_masked(graded, name):
    result = graded[name]
    (test,) = result.tests
    assert not result.infra_error and not result.passed, test
    assert test.verdict == Verdict.TIME_LIMIT, test
    # Not run on: at its CPU limit or killed at the backstop, never deep into the grace.
    assert test.wall_s < BACKSTOP_S + 1.0, test


# ---------------------------------------------------------------- a pin undone at every reading

# A failing program (a busy loop) pins itself to the host's last CPU H, where a busy container would keep it waiting,
# and a helper process unpins it 2.5 s after the process started, before the backstop reading: no reading shows a
# pin, and the load balancer can leave the loop waiting on H beside an idle CPU (measured with sched_setaffinity
# allowed: 8.5 s of wait in 7.7 s, cap reached, starved=True, infra_error). The sandbox refuses sched_setaffinity
# (sandbox/seccomp.py): the attack ends at its first pin, a runtime error, never masked nor run on.
H = max(os.sched_getaffinity(0))
UNPIN_AT_READINGS = f"""
import os, time
with open("/proc/self/stat") as f:
    ticks = int(f.read().rsplit(")", 1)[1].split()[19])
t0 = ticks / os.sysconf("SC_CLK_TCK") - time.clock_gettime(time.CLOCK_BOOTTIME) + time.monotonic()
H, ALL = {H}, os.sched_getaffinity(0)
main = os.getpid()
if os.fork() == 0:
    try:  # the helper ends quietly where the sandbox refuses it: the main process's error is the program's
        os.sched_setaffinity(0, ALL - {{H}})
        time.sleep(max(0.0, 2.5 - (time.monotonic() - t0)))
        os.sched_setaffinity(main, ALL)
        os.sched_setaffinity(0, ALL)
        time.sleep(100)
    finally:
        os._exit(1)
os.sched_setaffinity(0, {{H}})
while True:
    pass
"""


def test_a_busy_loop_cannot_pin_itself_to_a_busy_cpu_and_unpin_before_the_backstop(graded):
    result = graded["pin, then unpin"]
    (test,) = result.tests
    assert not result.infra_error and not result.passed, test
    assert test.verdict == Verdict.RUNTIME_ERROR and "PermissionError" in test.detail, test
    assert test.wall_s < BACKSTOP_S, test
