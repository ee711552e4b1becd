"""Grading a math answer on the host: ``tasks/math/check.py`` in its own process, under a deadline.

The answer is the text of the policy's final-channel message; nothing of it runs in a container,
so nothing is compared inside one (the candidate never sees the gold either way). math-verify
parses with sympy, which a crafted expression (a power tower, a 10^6-term sum) can keep busy for
minutes or grow without bound, so the check runs in a child process with an address-space limit
and is killed at ``timeout_s``: a ``time_limit`` or ``memory_limit`` verdict, the candidate's failure,
scored 0. An answer longer than ``max_chars`` is refused without starting the check.

One ``TaskResult`` with one test: ``passed`` when the answer is equivalent to the gold. A gold the
checker cannot read, or a checker that cannot start, is ``infra_error`` (masked): neither is
anything the candidate did.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from sandbox.failure import Verdict
from tasks.grader import TaskResult
from tasks.judge import TestResult
from tasks.math.problem import MathTask

CHECK = Path(__file__).with_name("check.py")


class MathGraderConfig(BaseModel):
    """Bounds of one math-verify check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(20.0, gt=0, description="Wall-clock deadline of one check (process start included).")
    memory_mb: int = Field(2048, ge=256, description="Address-space limit of the check process.")
    max_chars: int = Field(512, ge=1, description="Longest answer read; a longer one is wrong unread.")
    max_answers: int = Field(8, ge=1, description="Most separate answers a reply may state before it is refused.")
    concurrency: int = Field(2, ge=1, description="Checks run at once.")


class MathGrader:
    """Checks final answers against a task's gold (see the module docstring)."""

    def __init__(self, config: MathGraderConfig | None = None) -> None:
        self.config = config or MathGraderConfig()
        self._limiter = trio.CapacityLimiter(self.config.concurrency)

    async def grade(self, task: MathTask, answer: str) -> TaskResult:
        started = time.monotonic()
        verdict, detail = await self._check(task.gold, answer)
        wall = round(time.monotonic() - started, 6)
        if verdict == "infra_error":
            return TaskResult(
                task_id=task.task_id,
                passed=False,
                fraction=0.0,
                infra_error=True,
                tests=(TestResult(index=0, verdict=Verdict.INFRA_ERROR, detail=detail),),
                detail=detail,
                wall_s=wall,
            )
        test = TestResult(index=0, verdict=Verdict(verdict), wall_s=wall, detail=detail)
        passed = test.verdict == Verdict.PASSED
        return TaskResult(
            task_id=task.task_id, passed=passed, fraction=float(passed), tests=(test,), detail=detail, wall_s=wall
        )

    async def _check(self, gold: str, answer: str) -> tuple[str, str]:
        """``(verdict, detail)``: a ``Verdict`` value, or ``infra_error``."""
        config = self.config
        if len(answer.strip()) > config.max_chars:
            return "wrong_answer", f"answer of {len(answer.strip())} characters (at most {config.max_chars} are read)"
        request = json.dumps(
            {"gold": gold, "answer": answer, "max_chars": config.max_chars, "max_answers": config.max_answers}
        ).encode("utf-8", errors="replace")
        limit = config.memory_mb << 20
        async with self._limiter:
            with trio.move_on_after(config.timeout_s) as scope:
                try:
                    done = await trio.run_process(
                        [sys.executable, "-I", str(CHECK)],
                        stdin=request,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
                    )
                except OSError as exc:
                    return "infra_error", f"the math check could not start: {exc}"
        if scope.cancelled_caught:
            return "time_limit", f"the check of this answer ran past {config.timeout_s:g} s"
        try:
            reply = json.loads(done.stdout)
            verdict, detail = str(reply["verdict"]), str(reply["detail"])
        except (ValueError, KeyError, TypeError):
            tail = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or [""]
            if done.returncode != 0 and "MemoryError" in tail[0]:
                return "memory_limit", f"the check of this answer ran out of its {config.memory_mb} MB"
            return "infra_error", f"the math check failed (exit {done.returncode}): {tail[0][:300]}"
        if verdict == "gold_error":
            return "infra_error", detail
        return verdict, detail


def grade_sync(grader: MathGrader, task: MathTask, answer: str) -> TaskResult:
    """``grader.grade`` outside an event loop (tests, scripts)."""
    return trio.run(grader.grade, task, answer)
