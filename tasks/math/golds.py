"""Reading every gold when math tasks are loaded: a gold the check cannot grade against is a finding about the task,
reported with its reason, and the task is skipped, never an episode masked for every answer.

The check (`tasks/math/check.py`, in ``golds`` mode) reads each gold as it would at grading time and then grades
the gold itself as the answer (`tasks.math.check.gold_finding`): a gold it cannot read, one that raises, and one
that does not pass for itself (so no answer could earn reward) are each an `UnreadGold`. It runs in child
processes as grading does (sympy can hang on a gold: ``9^{9^{9^9}}``), ``MathGraderConfig.concurrency`` of them,
with the grader's memory limit; a gold not read within ``timeout_s`` (the first within ``start_timeout_s`` more, the
process's start) is reported as such and the reading goes on with the next gold in a fresh process.
"""

from __future__ import annotations

import json
import logging
import resource
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict

from tasks.math.grader import CHECK, MathGraderConfig
from tasks.math.problem import MathTask

log = logging.getLogger(__name__)


class UnreadGold(BaseModel):
    """A task whose gold the check cannot grade against, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    gold: str
    reason: str


def unread_golds(tasks: Sequence[MathTask], config: MathGraderConfig | None = None) -> list[UnreadGold]:
    """Each of ``tasks`` whose gold the check cannot grade against, in task order (see the module docstring)."""
    config = config or MathGraderConfig()
    golds = list(dict.fromkeys(task.gold for task in tasks))
    shares = [golds[i :: config.concurrency] for i in range(config.concurrency)]
    with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        findings = {gold: why for found in pool.map(lambda share: _read(share, config), shares) for gold, why in found}
    return [
        UnreadGold(task_id=task.task_id, gold=task.gold, reason=findings[task.gold])
        for task in tasks
        if findings.get(task.gold)
    ]


def _read(golds: list[str], config: MathGraderConfig) -> list[tuple[str, str]]:
    """``(gold, why)`` for each of ``golds`` ("" when it can be graded against), one check process after another."""
    found: list[tuple[str, str]] = []
    while len(found) < len(golds):
        found += _run(golds[len(found) :], config)
    return found


def _run(golds: list[str], config: MathGraderConfig) -> list[tuple[str, str]]:
    """Read ``golds`` in one check process until it ends or stalls; the gold it stalled or died on is the last
    finding, so the caller goes on after it."""
    limit = config.memory_mb << 20
    request = {"golds": golds, "max_chars": config.max_chars, "max_answers": config.max_answers}
    process = subprocess.Popen(
        [sys.executable, "-I", str(CHECK)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    found: list[tuple[str, str]] = []
    try:
        assert process.stdin is not None
        process.stdin.write(json.dumps(request).encode("utf-8", errors="replace"))
        process.stdin.close()
        for gold, (line, why) in zip(golds, _lines(process, config)):
            if line is None:
                return [*found, (gold, f"the check {why} reading the gold {gold[:80]!r}")]
            found.append((gold, str(json.loads(line)["why"])))
        return found
    finally:
        process.kill()
        process.wait()


def _lines(process: subprocess.Popen, config: MathGraderConfig):
    """``(line, "")`` for each line the check writes, then ``(None, why)`` once it stalls past its bound (the first
    line may also take the start's) or ends."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffer, bound, started = b"", config.start_timeout_s + config.timeout_s, time.monotonic()
    while True:
        while b"\n" not in buffer:
            left = bound - (time.monotonic() - started)
            if left <= 0 or not selector.select(left):
                yield None, f"ran past {bound:g} s"
                return
            if not (chunk := process.stdout.read1(1 << 16)):
                yield None, f"died (exit {process.wait()})"
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield line.decode("utf-8", errors="replace"), ""
        bound, started = config.timeout_s, time.monotonic()


def readable(tasks: Sequence[MathTask], config: MathGraderConfig | None, source: str) -> tuple[list, list[UnreadGold]]:
    """``(tasks but those whose gold the check cannot grade against, those as findings)``, each finding logged as a
    skipped task of ``source``."""
    unread = unread_golds(tasks, config)
    for finding in unread:
        log.warning("%s: skipped task %s: %s", source, finding.task_id, finding.reason)
    skipped = {finding.task_id for finding in unread}
    return [task for task in tasks if task.task_id not in skipped], unread
