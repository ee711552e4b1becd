"""`python -m gym bench math`: math answer checks per second through the fork server and through a fresh
interpreter per check, side by side in one run.

The answers are the shipped math samples' (GSM8K, competition and plain rows, `tasks/samples/math_*.jsonl`): each
task's reference answer (must pass) and its gold plus one (must fail), ``--rounds`` times (``--answers N``: the first
N of those 72). Each round grades the
whole set both ways, ``--concurrency`` checks at a time, one mode after the other (the order alternates by round),
so load drifting on a shared machine hits both alike. Every verdict must be the expected one in both modes, or the
figures are refused.

JSON keys: ``checks_per_s_forked``, ``checks_per_s_fresh``, ``forked_vs_fresh`` (the ratio), ``check_p50_ms_forked``,
``check_p50_ms_fresh`` (one check's wall time, as the grader reports it), ``checks`` (per mode), ``concurrency``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import trio

from tasks.catalog import SAMPLES_DIR
from tasks.loader import load_tasks
from tasks.math.grader import MathGrader, MathGraderConfig
from tasks.math.problem import MathTask
from tasks.result import TaskResult

SETS = ("gsm8k", "competition", "plain")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rounds", type=_at_least_one, default=3, help="times the whole answer set is graded in each mode"
    )
    parser.add_argument(
        "--concurrency", type=_at_least_one, default=2, help="checks at once (the grader's concurrency)"
    )
    parser.add_argument(
        "--answers", type=_at_least_one, default=None, help="the first N answers of the set (default all 72)"
    )


def answers() -> list[tuple[MathTask, str, bool]]:
    """``(task, answer, should pass)``: every shipped sample's reference answer and its gold plus one."""
    rows = []
    for name in SETS:
        tasks = {t.task_id: t for t in load_tasks(SAMPLES_DIR / f"math_{name}.jsonl", "math").tasks}
        for line in (SAMPLES_DIR / f"math_{name}.solutions.jsonl").read_text().splitlines():
            row = json.loads(line)
            task = tasks[row["task_id"]]
            rows += [(task, row["completion"], True), (task, f"{task.gold} + 1", False)]
    return rows


async def _grade_all(grader: MathGrader, items: list[tuple[MathTask, str, bool]]) -> list[TaskResult]:
    results: list[TaskResult | None] = [None] * len(items)
    limiter = trio.CapacityLimiter(grader.config.concurrency)  # a check's wall_s then holds no wait for a turn

    async def one(index: int) -> None:
        task, answer, _ = items[index]
        async with limiter:
            results[index] = await grader.grade(task, answer)

    async with trio.open_nursery() as nursery:
        for index in range(len(items)):
            nursery.start_soon(one, index)
    return results  # type: ignore[return-value]


def run(args: argparse.Namespace) -> dict:
    items = answers()[: args.answers]
    graders = {
        mode: MathGrader(MathGraderConfig(concurrency=args.concurrency, fork_server=mode == "forked"))
        for mode in ("forked", "fresh")
    }
    trio.run(_grade_all, graders["forked"], items[:1])  # the server's start is a one-off, not a check's cost
    spent = {mode: 0.0 for mode in graders}
    walls: dict[str, list[float]] = {mode: [] for mode in graders}
    for round_ in range(args.rounds):
        for mode in ("forked", "fresh") if round_ % 2 == 0 else ("fresh", "forked"):
            started = time.monotonic()
            results = trio.run(_grade_all, graders[mode], items)
            spent[mode] += time.monotonic() - started
            wrong = [
                (task.task_id, answer, result.tests[0].verdict.value, result.detail)
                for (task, answer, should), result in zip(items, results)
                if result.passed != should or result.infra_error
            ]
            if wrong:
                raise RuntimeError(f"{mode} checks gave unexpected verdicts: {wrong[:5]}")
            walls[mode] += [result.wall_s for result in results]
    checks = len(items) * args.rounds
    forked, fresh = checks / spent["forked"], checks / spent["fresh"]
    return {
        "checks_per_s_forked": round(forked, 2),
        "checks_per_s_fresh": round(fresh, 2),
        "forked_vs_fresh": round(forked / fresh, 2),
        "check_p50_ms_forked": round(statistics.median(walls["forked"]) * 1000, 1),
        "check_p50_ms_fresh": round(statistics.median(walls["fresh"]) * 1000, 1),
        "checks": checks,
        "concurrency": args.concurrency,
    }
