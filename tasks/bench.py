"""`python -m gym bench grader`: CP tests per second, three ways, side by side in one run.

* ``tests_per_s_grader``: the grader end to end with the default sandbox
  (host compile check, a container from the warm pool: a new one, or one reset
  after tasks of other problems and inputs, ``pool.disjoint_uses``; one ``exec_batch`` per task,
  host judging), ``--concurrency`` tasks at a time. The pool is warmed first, as
  in a long-running gym; refilling it during the run is counted.
* ``tests_per_s_grader_fresh``: the same grading with ``fork_server: false`` (a fresh
  interpreter per test instead of a child of the workspace's fork server).
* ``tests_per_s_grader_new_containers``: the same grading with ``disjoint_uses: 0``,
  a new container for every task.
* ``tests_per_s_grader_recycled``: the same grading from a pool with
  ``recycle_uses: 32`` (every container reset and reused, whatever it served; the trusted opt-in of
  docs/sandbox.md, "Recycling").
* ``tests_per_s_bare``: the very same processes (argv, stdin) as bare host
  subprocesses, judged the same way, with the same concurrency: the
  no-sandbox limit. The interpreter is this process's own binary (a pyenv
  shim would add a shell start) with ``-I -S``, so host site-packages
  ``.pth`` hooks do not slow the baseline down: the strictest comparison.
* ``tests_per_s_docker_run``: one ``docker run --rm -i`` per test with the same
  image and the hardening flags the workspaces use (network none, cap-drop
  ALL, no-new-privileges, our seccomp profile, read-only root, tmpfs /tmp,
  pids/memory/cpu limits, ulimits, init, uid 1000), the program bind-mounted
  read-only; measured on the first ``--docker-tests`` tests only (it is slow).

The task set is the shipped ``bench`` set (CodeContests layout, 8 tasks of 40
tests) with its reference solutions; every test must pass in every mode or the
figures are refused. The modes run interleaved, ``--concurrency`` tasks per
round (see `measure`), so load drifting on a shared machine hits them alike; each
grader mode has its own pool.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind, Verdict
from sandbox.labels import Labels
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest, ExecResult
from sandbox.seccomp import profile
from tasks.catalog import SAMPLES_DIR
from tasks.grader import Grader, GraderConfig, Judge, pair_submissions
from tasks.loader import load_tasks
from tasks.result import TestResult
from tasks.submission import Submission, program, read_submissions
from tasks.task import Task

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, default=SAMPLES_DIR / "bench.jsonl", help="task file (shipped bench set)")
    parser.add_argument("--solutions", type=Path, default=SAMPLES_DIR / "bench.solutions.jsonl", help="solutions")
    parser.add_argument("--concurrency", type=int, default=2, help="tasks (grader) or tests (baselines) at once")
    parser.add_argument("--docker-tests", type=int, default=24, help="tests measured with one docker run each")


# ------------------------------------------------------------------ bare host subprocesses


def _host_python(request: ExecRequest, config: GraderConfig) -> ExecRequest:
    """``request`` with the container interpreter argv replaced by the host's real interpreter."""
    prefix = list(config.python)
    if request.argv[: len(prefix)] != prefix:
        return request
    argv = [os.path.realpath(sys.executable), "-I", "-S", *request.argv[len(prefix) :]]
    return request.model_copy(update={"argv": argv})


def _bare_result(request: ExecRequest, cwd: str) -> ExecResult:
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            request.argv, cwd=cwd, input=request.stdin, capture_output=True, timeout=request.timeout_s
        )
    except subprocess.TimeoutExpired:
        return ExecResult(failure=FailureKind.TIMEOUT, wall_s=time.perf_counter() - started)
    failure = FailureKind.OK if proc.returncode == 0 else FailureKind.NONZERO_EXIT
    return ExecResult(
        exit_code=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        failure=failure,
        wall_s=time.perf_counter() - started,
    )


def _plans(grader: Grader, pairs: list[tuple[Task, Submission]]) -> list[tuple[str, ExecRequest, Judge]]:
    return [(task.task_id, *grader.plan(task, i, test)) for task, _ in pairs for i, test in enumerate(task.tests)]


def run_bare(pairs: list[tuple[Task, Submission]], config: GraderConfig, concurrency: int) -> tuple[float, int]:
    """``(seconds, tests passed)`` running every test as a host subprocess."""
    with tempfile.TemporaryDirectory(prefix="gym-bench-bare-") as root:
        jobs = []
        for n, (task, submission) in enumerate(pairs):
            directory = Path(root) / str(n)
            directory.mkdir()
            (directory / "solution.py").write_text(program(task, submission))
            grader = Grader(None, config, program_path=str(directory / "solution.py"))
            plans = _plans(grader, [(task, submission)])
            jobs += [(str(directory), _host_python(request, config), judge) for _, request, judge in plans]
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as executor:
            results = list(executor.map(lambda job: job[2](_bare_result(job[1], job[0])), jobs))
        return time.perf_counter() - started, sum(r.verdict == Verdict.PASSED for r in results)


# ------------------------------------------------------------------ one docker run per test


def docker_run_argv(sandbox: SandboxConfig, seccomp_file: Path, workdir: str, labels: dict[str, str]) -> list[str]:
    """``docker run`` with the workspace hardening flags (the program directory mounted read-only)."""
    budgets, hard = sandbox.budgets, sandbox.hardening
    argv = ["docker", "run", "--rm", "-i", "--network", hard.network, "--init", "--log-driver", "none"]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"] if hard.drop_caps else []
    argv += ["--security-opt", f"seccomp={seccomp_file}"] if hard.seccomp == "strict" else []
    argv += ["--read-only"] if hard.read_only_rootfs else []
    argv += ["--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={budgets.tmp_mb}m,mode=1777"]
    argv += ["--pids-limit", str(budgets.pids or -1), "--memory", f"{budgets.memory_mb}m"]
    argv += ["--memory-swap", f"{budgets.memory_mb}m"] + (["--cpus", str(budgets.cpus)] if budgets.cpus else [])
    argv += [
        "--ulimit",
        f"nofile={budgets.nofile}",
        "--ulimit",
        f"fsize={budgets.fsize_mb << 20}",
        "--ulimit",
        "core=0",
    ]
    argv += ["--user", "1000:1000", "-v", f"{workdir}:/workspace:ro", "-w", "/workspace"]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    return argv + [sandbox.image]


def run_docker(
    pairs: list[tuple[Task, Submission]], config: GraderConfig, sandbox: SandboxConfig, limit: int, concurrency: int
) -> tuple[float, int, int]:
    """``(seconds, tests run, tests passed)`` with one ``docker run`` per test (first ``limit`` tests)."""
    labels = Labels.for_this_process(sandbox.pool.ttl_s).as_dict()
    with tempfile.TemporaryDirectory(prefix="gym-bench-docker-") as root:
        os.chmod(root, 0o755)
        seccomp_file = Path(root) / "seccomp.json"
        seccomp_file.write_text(json.dumps(profile()))
        jobs = []
        for n, (task, submission) in enumerate(pairs):
            directory = Path(root) / str(n)
            directory.mkdir(mode=0o755)
            (directory / "solution.py").write_text(program(task, submission))
            os.chmod(directory / "solution.py", 0o644)
            prefix = docker_run_argv(sandbox, seccomp_file, str(directory), labels)
            jobs += [
                (prefix, request, judge) for _, request, judge in _plans(Grader(None, config), [(task, submission)])
            ]
        jobs = jobs[:limit]

        def one(job: tuple[list[str], ExecRequest, Judge]) -> TestResult:
            prefix, request, judge = job
            timed = request.model_copy(update={"argv": prefix + request.argv, "timeout_s": request.timeout_s + 30})
            return judge(_bare_result(timed, root))

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as executor:
            results = list(executor.map(one, jobs))
        return time.perf_counter() - started, len(jobs), sum(r.verdict == Verdict.PASSED for r in results)


# ------------------------------------------------------------------ the three, interleaved


GRADER_MODES = ("grader", "grader_fresh", "grader_new_containers", "grader_recycled")


def mode_sandboxes(sandbox: SandboxConfig) -> dict[str, SandboxConfig]:
    """The sandbox of each grader mode: the default, the default again (its grader turns the fork server off), a
    new container per task, every container recycled."""
    pool = sandbox.pool
    return {
        "grader": sandbox,
        "grader_fresh": sandbox,
        "grader_new_containers": sandbox.model_copy(update={"pool": pool.model_copy(update={"disjoint_uses": 0})}),
        "grader_recycled": sandbox.model_copy(update={"pool": pool.model_copy(update={"recycle_uses": 32})}),
    }


class _Totals:
    """Seconds, tests run and tests passed per mode, summed over the rounds."""

    def __init__(self) -> None:
        modes = (*GRADER_MODES, "bare", "docker_run")
        self.seconds = dict.fromkeys(modes, 0.0)
        self.tests = dict.fromkeys(modes, 0)
        self.passed = dict.fromkeys(modes, 0)

    def add(self, mode: str, seconds: float, tests: int, passed: int) -> None:
        self.seconds[mode] += seconds
        self.tests[mode] += tests
        self.passed[mode] += passed

    def rate(self, mode: str) -> float:
        return self.tests[mode] / self.seconds[mode]


async def measure(
    pairs: list[tuple[Task, Submission]], config: GraderConfig, sandbox: SandboxConfig, docker_tests: int
) -> tuple[_Totals, dict]:
    """Rounds of ``concurrency`` tasks, each graded, then run bare, then (a few tests) by docker run.

    Interleaving keeps the ratios honest on a machine whose load drifts. The grader's time of a
    round runs until the pool is full again, so the container starts that replace the used ones are
    charged to the grader (and do not steal CPU from the baselines).
    """
    totals = _Totals()
    await trio.to_thread.run_sync(lambda: config.speed)  # measured once per process: before the first round, not in it
    size = config.concurrency
    rounds = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    per_round = -(-docker_tests // len(rounds))
    async with AsyncExitStack() as stack:
        pools = {}
        for mode, config_of_mode in mode_sandboxes(sandbox).items():
            pools[mode] = await stack.enter_async_context(WorkspacePool(config_of_mode, gc_at_start=not pools))
        for pool in pools.values():
            await pool.wait_ready(120)
        graders = {
            mode: Grader(pool, config.model_copy(update={"fork_server": False}) if mode == "grader_fresh" else config)
            for mode, pool in pools.items()
        }
        for n, chunk in enumerate(rounds):
            tests = sum(len(task.tests) for task, _ in chunk)
            for mode, grader in graders.items():
                started = time.perf_counter()
                results = await grader.grade_many(chunk)
                await grader.pool.wait_ready(120)
                passed = sum(t.verdict == Verdict.PASSED for r in results for t in r.tests)
                totals.add(mode, time.perf_counter() - started, tests, passed)
            seconds, passed = await trio.to_thread.run_sync(run_bare, chunk, config, size)
            totals.add("bare", seconds, tests, passed)
            seconds, ran, passed = await trio.to_thread.run_sync(run_docker, chunk, config, sandbox, per_round, size)
            totals.add("docker_run", seconds, ran, passed)
            log.info(
                "round %d/%d: grader %.1f (fresh interpreters %.1f, new containers %.1f, all recycled %.1f), "
                "bare %.1f, docker run %.1f tests/s so far",
                n + 1,
                len(rounds),
                *(totals.rate(mode) for mode in (*GRADER_MODES, "bare", "docker_run")),
            )
        return totals, pools["grader"].stats()


def run(args: argparse.Namespace) -> dict:
    loaded = load_tasks(args.tasks)
    submissions, _ = read_submissions(args.solutions)
    pairs, _ = pair_submissions(loaded.tasks, [s for s in submissions if s.expect in (None, "passed")])
    config = GraderConfig(concurrency=args.concurrency)
    sandbox = SandboxConfig()
    sandbox = sandbox.model_copy(update={"episode": sandbox.episode.model_copy(update={"wall_s": 3600.0})})
    log.info(
        "bench: %d tasks, %d tests, concurrency %d", len(pairs), sum(len(t.tests) for t, _ in pairs), args.concurrency
    )
    totals, stats = trio.run(measure, pairs, config, sandbox, args.docker_tests)
    if totals.passed != totals.tests:
        raise RuntimeError(f"reference solutions must pass in every mode: passed {totals.passed} of {totals.tests}")
    grader, bare, docker = totals.rate("grader"), totals.rate("bare"), totals.rate("docker_run")
    fresh = totals.rate("grader_fresh")
    return {
        "tests_per_s_grader": grader,
        "tests_per_s_grader_fresh": fresh,
        "fork_server_speedup": grader / fresh,
        "tests_per_s_grader_new_containers": totals.rate("grader_new_containers"),
        "recycling_speedup": grader / totals.rate("grader_new_containers"),
        "tests_per_s_grader_recycled": totals.rate("grader_recycled"),
        "grader_recycled_vs_bare": totals.rate("grader_recycled") / bare,
        "tests_per_s_bare": bare,
        "tests_per_s_docker_run": docker,
        "grader_vs_bare": grader / bare,
        "grader_vs_docker_run": grader / docker,
        "tasks": len(pairs),
        "tests": totals.tests["grader"],
        "docker_run_tests": totals.tests["docker_run"],
        "concurrency": args.concurrency,
        "cold_starts": int(stats["cold_starts"]),
        "recycled": int(stats["recycled"]),
        "resets_refused": int(stats["resets_refused"]),
        "host_cpus": os.cpu_count() or 0,
        "host_load_1min": round(os.getloadavg()[0], 2),
    }
