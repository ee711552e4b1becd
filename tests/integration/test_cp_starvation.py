"""A test the host starves of CPU is the host's failure, never the program's; a program that sleeps, blocks or
deprioritizes itself is still ``time_limit`` (the grader's cpu time model, in the real sandbox).

Starvation is made, not hoped for: this module starts its own busy container (a busy loop with ``cpu_shares``
262144 against the graders' default 1024, so a grading container gets well under 1% of a core), labelled with a
key of its own and removed at the end. The busy loop ends itself when the host writes a stop file it watches (a
read-only bind mount): the moment the host frees up is the test's, not the Docker daemon's (a busy daemon took
seconds to remove the containers in a fresh-clone CI). It and this module's workspaces are pinned to the host's last CPU
(``cpuset_cpus``): other tests' and other suites' containers move to the other CPUs and are not starved. (The
busy loop that tries to pin itself to the busy CPU runs in a workspace on every CPU.) Under them a correct program
cannot finish: it is ``infra_error`` at the end of its starvation grace (masked), or passes when the busy
containers go away during the grace. Beside the same busy containers a sleeper, a sleeper whose children sleep,
and a busy loop that niced itself are ``time_limit``; one that chooses SCHED_IDLE or pins itself is refused by
the sandbox. On an idle host, a tree whose own processes keep each other waiting (a herd of 100 processes woken at
once, and 64 busy processes) is ``time_limit`` too: its summed wait for a
CPU is large, but no single task waited because of the host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import docker
import pytest
import trio

from images.inputs import runner_image
from sandbox.failure import Verdict
from sandbox.pool import WorkspacePool
from tasks.grader import Grader, GraderConfig
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Limits, StdinTest
from tests.sandbox_support import sandbox_config
from tests.task_support import task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one busy, the rest for other tests"),
]

LIMIT_S = 0.5  # CPU limit 0.625 s; wall-clock backstop 10 x 0.5 + 1 = 6 s
BACKSTOP_S = 6.0
HOG_SHARES = 262144  # the largest cpu_shares of cgroup v1; graders keep the default 1024
CPU = str(max(os.sched_getaffinity(0)))  # the busy container and this module's workspaces share this one CPU
# After grading starts: past every backstop and the end of the short grace (the runner, starved too, reads the
# tree up to ~1.5 s late), far inside the long grace (a correct program finishes ~1 s after the busy loops end).
HOGS_LEAVE_S = 10.5
SHORT = GraderConfig(min_time_s=LIMIT_S, speed_factor=1.0, starved_grace_factor=0.25)  # grace 1.5 s: cap 7.5 s
LONG = GraderConfig(min_time_s=LIMIT_S, speed_factor=1.0, starved_grace_factor=3.0)  # grace 18 s: cap 24 s
HOG = "import os\nwhile not os.path.exists('/stop/now'):\n    pass\n"  # a busy loop until the host says stop

BURN = """
import time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
"""
CORRECT = BURN + "burn(0.2)\nprint(input())\n"  # 0.2 s of CPU, then the right answer
STARVED = {  # name -> (program, config): run together beside the busy containers
    "correct, short grace": (CORRECT, SHORT),
    "correct, long grace": (CORRECT, LONG),
    "sleeper": ("import time\ntime.sleep(100)\n", LONG),
    "forking sleeper": (
        "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        time.sleep(100)\ntime.sleep(100)\n",
        LONG,
    ),
    "niced busy loop": ("import os\nos.nice(19)\nwhile True:\n    pass\n", LONG),
    # runs in a workspace on every CPU (the others, on the busy one only) and pins itself to the busy one
    "pinned busy loop": (f"import os\nos.sched_setaffinity(0, {{{CPU}}})\nwhile True:\n    pass\n", LONG),
    "SCHED_IDLE busy loop": (
        "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n",
        LONG,
    ),
}
# 100 processes wake at once every 0.5 s and each computes ~0.15 ms: ~0.05 of a core in all, so the backstop
# comes before the CPU limit, and every wake-up makes the later ones wait. At 5 s the parent prints the summed
# and the largest run delay of its children, read from their schedstat. (The spin reads the wall clock: under
# RLIMIT_CPU, which the runner sets, CLOCK_PROCESS_CPUTIME_ID advances by scheduler ticks, and a 0.15 ms spin on
# it burns a whole tick.)
HERD = """
import os, time
def delays(pids):
    rows = []
    for pid in pids:
        with open("/proc/%d/schedstat" % pid) as f:
            rows.append(int(f.read().split()[1]) / 1e9)
    return rows
start, pids = time.time(), []
for _ in range(100):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(0.5 - time.time() % 0.5)
            end = time.perf_counter() + 0.00015
            while time.perf_counter() < end:
                pass
    pids.append(pid)
time.sleep(max(0.0, 5.0 - (time.time() - start)))
rows = delays(pids)
print("sum=%.3f max=%.3f wall=%.3f" % (sum(rows), max(rows), time.time() - start), flush=True)
time.sleep(100)
"""
# Graded in a workspace on every CPU: the busy loop that pins itself (to the busy CPU), and the 64 busy processes,
# whose runner must see the tree pass its CPU limit: on the one CPU this module pins, a second suite's busy
# containers (cpu_shares 262144 there too) starved the runner itself, and the wall clock ended the tree (1.04 s of
# CPU in 19.5 s: two fresh-clone suites side by side).
ON_ALL = {"pinned busy loop", "64 busy processes"}
BURNERS = "import os\nfor _ in range(63):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
IDLE = {"herd": (HERD, LONG), "64 busy processes": (BURNERS, LONG)}


def _task(name: str) -> tuple:
    return task(task_id=name, limits=Limits(time_s=LIMIT_S), tests=(StdinTest(input="7\n", output="7\n"),))


def _grade_all(programs: dict[str, tuple[str, GraderConfig]], hogs_leave_s: float | None) -> dict[str, TaskResult]:
    """Grade the programs in warm containers: with ``hogs_leave_s``, all at once beside busy containers started
    once the containers are warm and removed that many seconds after grading starts; without, one after another
    (none is the host load of another)."""
    client = docker.from_env()
    label = {"gym-test-starvation": uuid.uuid4().hex[:12]}
    results: dict[str, TaskResult] = {}
    stop_dir = tempfile.mkdtemp(prefix="gym-starvation-")
    os.chmod(stop_dir, 0o755)  # the image's user reads it

    def start_hogs() -> None:
        client.containers.run(
            runner_image(),
            ["-c", HOG],
            entrypoint="python3",
            detach=True,
            auto_remove=True,
            network_mode="none",
            cpu_shares=HOG_SHARES,
            cpuset_cpus=CPU,
            labels=label,
            volumes={stop_dir: {"bind": "/stop", "mode": "ro"}},
        )

    def stop_hogs() -> None:
        with open(os.path.join(stop_dir, "now"), "w"):
            pass

    def remove_hogs() -> None:
        for container in client.containers.list(all=True, filters={"label": [f"{k}={v}" for k, v in label.items()]}):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:  # a stopped loop's auto-removal already under way
                if error.status_code != 409:
                    raise

    async def main() -> None:
        on_one = sandbox_config(pool={"size": len(programs)}, budgets={"cpuset_cpus": CPU})
        async with WorkspacePool(on_one) as pool, WorkspacePool(sandbox_config(pool={"size": 1})) as on_all:
            await pool.wait_ready(120)
            await on_all.wait_ready(120)
            if hogs_leave_s is not None:
                await trio.to_thread.run_sync(start_hogs)
                await trio.sleep(1.0)

            async def one(name: str, program: str, config: GraderConfig) -> None:
                results[name] = await Grader(on_all if name in ON_ALL else pool, config).grade(
                    _task(name), Submission(task_id=name, completion=program)
                )

            if hogs_leave_s is None:
                for name, (program, config) in programs.items():
                    await one(name, program, config)
                return
            async with trio.open_nursery() as nursery:
                for name, (program, config) in programs.items():
                    nursery.start_soon(one, name, program, config)
                await trio.sleep(hogs_leave_s)
                stop_hogs()

    try:
        trio.run(main)
    finally:
        stop_hogs()
        remove_hogs()
        client.close()
        shutil.rmtree(stop_dir, ignore_errors=True)
    return results


@pytest.fixture(scope="module")
def starved() -> dict[str, TaskResult]:
    return _grade_all(STARVED, hogs_leave_s=HOGS_LEAVE_S)


@pytest.fixture(scope="module")
def idle() -> dict[str, TaskResult]:
    return _grade_all(IDLE, hogs_leave_s=None)


def _only(result: TaskResult):
    (test,) = result.tests
    return test


def test_a_correct_program_still_starved_at_the_end_of_its_grace_is_infra_error(starved):
    result = starved["correct, short grace"]
    test = _only(result)
    assert test.verdict == Verdict.INFRA_ERROR and result.infra_error and not result.passed, test
    assert "starved of CPU by the host" in test.detail
    assert BACKSTOP_S * 1.25 <= test.wall_s < BACKSTOP_S * 2.5 and test.cpu_s < 0.2  # at its cap, short of 0.2 s


def test_a_correct_program_starved_past_its_backstop_passes_when_the_host_frees_up(starved):
    result = starved["correct, long grace"]
    test = _only(result)
    assert result.passed and test.verdict == Verdict.PASSED, test
    assert BACKSTOP_S < test.wall_s < BACKSTOP_S * 2.5 and 0.2 <= test.cpu_s < LIMIT_S  # it ran on past 6 s


@pytest.mark.parametrize("name", ["sleeper", "forking sleeper", "niced busy loop"])
def test_a_sleeper_or_a_deprioritized_busy_loop_beside_busy_containers_is_still_time_limit(starved, name):
    # Each may run on past its backstop while its own start-up is starved; none reaches the end of its grace.
    result = starved[name]
    test = _only(result)
    assert test.verdict == Verdict.TIME_LIMIT and not result.infra_error and not result.passed, test
    assert BACKSTOP_S <= test.wall_s < BACKSTOP_S * 2.5


@pytest.mark.parametrize("name", ["SCHED_IDLE busy loop", "pinned busy loop"])
def test_choosing_its_own_scheduling_is_refused_by_the_sandbox(starved, name):
    # The seccomp profile denies sched_setscheduler and sched_setaffinity: the attack fails before its loop (the
    # runner would also refuse to run on a SCHED_IDLE, SCHED_BATCH or pinned task: tests/unit/test_starvation.py).
    result = starved[name]
    test = _only(result)
    assert test.verdict == Verdict.RUNTIME_ERROR and "PermissionError" in test.detail, test


def test_a_herd_whose_processes_keep_each_other_waiting_is_time_limit_at_its_backstop(idle):
    result = idle["herd"]
    test = _only(result)
    assert test.verdict == Verdict.TIME_LIMIT and not result.infra_error, test
    assert BACKSTOP_S <= test.wall_s < BACKSTOP_S + 1.5 and test.cpu_s < LIMIT_S  # not run on
    figures = {key: float(value) for key, value in (field.split("=") for field in test.output_head.split())}
    # Summed over the herd, the wait for a CPU beyond twice the tree's CPU time (what its own processes and quota
    # can explain) passes half the wall time: a sum-over-tasks test would call it starved and mask it. Its most
    # delayed process waited far less (measured 0.08-0.11 s of 5 s on an idle host, 0.66 s at load average 16).
    assert figures["sum"] - 2 * test.cpu_s >= 0.5 * figures["wall"] > figures["max"] - 2 * test.cpu_s, figures


def test_many_busy_processes_end_at_their_cpu_limit(idle):
    # The runner's own record of which limit ended the tree, not the wall clock: at load average 28 a fresh-clone
    # CI's tree passed its CPU limit but was killed 12.8 s after its start (the runner, too, waited for a CPU).
    result = idle["64 busy processes"]
    test = _only(result)
    assert test.verdict == Verdict.TIME_LIMIT and not result.infra_error, test
    assert LIMIT_S * 1.25 <= test.cpu_s and "killed at its CPU limit" in test.detail, test
