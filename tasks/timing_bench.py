"""`python -m gym bench timing`: do time limits judge the program or the machine? Side by side in one run.

A contest set with jury submissions is built from the generated family (`tasks.generator`): for each
of ``--problems`` tasks (round-robin over templates and levels), an *accepted* submission (the
reference after ``--work`` x the limit of pure CPU work per test: a jury solution that needs half its
limit when idle), a *wrong* one (the row's incorrect solution, after the same work) and a *too slow*
one (the reference after ``--slow-factor`` x the limit of CPU work per test).
Every submission is graded four times: idle and while ``--load`` containers of our own keep every core
busy (the load of RL rollouts: other workspaces running code), each under the ``cpu`` time model (the
default: CPU time of the process tree, a wall-clock backstop) and the ``wall`` model (a wall-clock
deadline). Figures per condition: the share of scored accepted submissions that pass, how many wrong and too
slow ones pass (a judge must keep both at 0), masked results (``infra_errors``) and how many of them the
host starved of CPU (``starved_masks``), borderline re-runs, and the CPU/wall ratio of the accepted
submissions' tests (p50): how much of a core a test got.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from images.inputs import runner_image
from sandbox.config import SandboxConfig
from tasks import generator
from tasks.formats import codecontests
from tasks.grader import STARVED_DETAIL, GraderConfig, grade_pairs
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Limits, Task

log = logging.getLogger(__name__)

KINDS = ("accepted", "wrong", "slow")
BURN = "import time as _t\n_end = _t.process_time() + {seconds}\nwhile _t.process_time() < _end:\n    pass\n"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problems", type=int, default=24, help="problems of the contest set")
    parser.add_argument("--load", type=int, default=4, help="busy containers during the loaded passes")
    parser.add_argument("--limit", type=float, default=1.0, help="time limit of every test (seconds)")
    parser.add_argument("--work", type=float, default=0.5, help="CPU of an accepted submission, x the limit, per test")
    parser.add_argument(
        "--slow-factor", type=float, default=2.0, help="CPU of a too-slow submission, x the limit, per test"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated problems")


def contest(
    problems: int, limit: float, work: float, slow_factor: float, seed: int
) -> list[tuple[str, Task, Submission]]:
    """``(kind, task, submission)`` for every jury submission of the set."""
    entries = []
    for spec in generator.draw("train", problems, seed):
        rendered = generator.render(spec, seed)
        parsed = codecontests.parse(0, rendered.row)
        task = parsed.model_copy(update={"limits": Limits(time_s=limit, memory_bytes=parsed.limits.memory_bytes)})
        busy = BURN.format(seconds=limit * work)
        programs = {
            "accepted": busy + rendered.reference,
            "wrong": busy + rendered.wrong,
            "slow": BURN.format(seconds=limit * slow_factor) + rendered.reference,
        }
        entries += [(kind, task, Submission(task_id=task.task_id, completion=programs[kind])) for kind in KINDS]
    return entries


@contextmanager
def busy_containers(count: int) -> Iterator[None]:
    """``count`` containers of our own (a fresh label) spinning a core each, removed on exit."""
    label = f"gym-bench-load={uuid.uuid4().hex[:12]}"
    try:
        for _ in range(count):
            subprocess.run(
                [
                    "docker",
                    "run",
                    "-d",
                    "--rm",
                    "--label",
                    label,
                    "--network",
                    "none",
                    "--entrypoint",
                    "python3",
                    runner_image(),
                    "-c",
                    "while 1: pass",
                ],
                check=True,
                capture_output=True,
            )
        time.sleep(1.0)
        yield
    finally:
        running = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label={label}"], capture_output=True, text=True
        ).stdout.split()
        if running:
            subprocess.run(["docker", "rm", "-f", *running], capture_output=True)


def starved(result: TaskResult) -> bool:
    """Masked because the host starved a test of CPU (the grader's detail says so), not for any other fault."""
    return result.infra_error and any(t.detail.startswith(STARVED_DETAIL) for t in result.tests)


def figures(entries: list[tuple[str, Task, Submission]], results: list[TaskResult]) -> dict[str, float]:
    """Per condition: ``accepted_pass_share`` is over the accepted submissions that were scored (a masked
    sample is not scored: `TaskResult.infra_error`); ``infra_errors`` counts every masked result and
    ``starved_masks`` those the host starved of CPU, so ``infra_errors - starved_masks`` is what anything
    else masked."""
    by_kind = {kind: [r for (k, _, _), r in zip(entries, results) if k == kind] for kind in KINDS}
    ratios = [t.cpu_s / t.wall_s for r in by_kind["accepted"] for t in r.tests if t.wall_s > 0]
    scored = [r for r in by_kind["accepted"] if not r.infra_error]
    return {
        "accepted_pass_share": sum(r.passed for r in scored) / max(len(scored), 1),
        "wrong_passed": float(sum(r.passed for r in by_kind["wrong"])),
        "slow_passed": float(sum(r.passed for r in by_kind["slow"])),
        "infra_errors": float(sum(r.infra_error for r in results)),
        "starved_masks": float(sum(map(starved, results))),
        "reruns": float(sum(r.reruns for r in results)),
        "cpu_wall_ratio_p50": statistics.median(ratios) if ratios else 0.0,
    }


def measure(entries: list[tuple[str, Task, Submission]], load: int) -> dict[str, float]:
    sandbox = SandboxConfig()
    sandbox = sandbox.model_copy(update={"episode": sandbox.episode.model_copy(update={"wall_s": 3600.0})})
    pairs = [(task, submission) for _, task, submission in entries]
    out: dict[str, float] = {}
    for condition in ("idle", "load"):
        for model in ("cpu", "wall"):
            config = GraderConfig(time_model=model, min_time_s=0.1, concurrency=2)
            started = time.monotonic()
            if condition == "load":
                with busy_containers(load):
                    results = grade_pairs(pairs, config, sandbox)
            else:
                results = grade_pairs(pairs, config, sandbox)
            log.info("%s, %s model: %d submissions in %.1fs", condition, model, len(pairs), time.monotonic() - started)
            out.update({f"{model}_{condition}_{k}": v for k, v in figures(entries, results).items()})
    return out


def run(args: argparse.Namespace) -> dict:
    entries = contest(args.problems, args.limit, args.work, args.slow_factor, args.seed)
    log.info(
        "bench timing: %d problems x %d submissions, limit %.2fs, %d busy containers under load",
        args.problems,
        len(KINDS),
        args.limit,
        args.load,
    )
    result = measure(entries, args.load)
    result.update(
        {
            "problems": args.problems,
            "limit_s": args.limit,
            "work": args.work,
            "load_containers": args.load,
            "host_cpus": os.cpu_count() or 0,
        }
    )
    return result
