"""The grading service every adapter calls: a task and an answer in, a `Score` out, from any thread.

Another library's trainer calls its reward hook from plain threads (verl's reward loop runs ``compute_score`` in an
executor, TRL calls it in its training loop, verifiers from asyncio). The graders are trio code over a warm pool of
Docker workspaces, so a `Scorer` runs one trio loop in a thread of its own (`gym.integrations.loop_thread`), started
on first use, and callers block on it (`trio.from_thread`). The pool is opened on the first program to grade (math needs no Docker) and closed by
`Scorer.close` (also at interpreter exit).

* Programs: `tasks.grader.Grader` in a fresh container each, ``concurrency`` at once over every caller and thread.
* Math answers: the gold is read first by the check (`tasks.math.golds.unread_golds`, once per gold, cached): a
  gold the check cannot grade against is the ground truth's fault, a refused sample scored 0 with the reason, never
  masked; then `tasks.math.grader.MathGrader`.
* A sample the sandbox or the host failed (``infra_error``) is graded again, ``infra_retries`` times; still failing,
  its `Score` is masked (``reward`` None): the answer did nothing wrong, so it is not a 0. Each adapter says what
  its library gets then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import trio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym.integrations.loop_thread import LoopThread, LoopThreadError
from sandbox.config import SandboxConfig
from sandbox.config_file import load_config
from sandbox.failure import Verdict
from sandbox.fleet import open_pool
from tasks.families import check_family_settings, grade_with_family, is_plugin, kind_of
from tasks.family import FamilyResources
from tasks.grader import Grader, GraderConfig
from tasks.math.family import MATH
from tasks.math.golds import unread_golds
from tasks.math.grader import MathGrader, MathGraderConfig
from tasks.math.problem import MathTask
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Task

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # the service thread's trio loop answers within this, or the scorer cannot start


class ScorerError(Exception):
    """Base of the errors an adapter raises to its library (never for what an answer does)."""


class ScorerConfigError(ScorerError, ValueError):
    """A scorer config file that cannot be used; the message names the file and the field."""


class SandboxUnavailable(ScorerError, RuntimeError):
    """Samples the sandbox or the host failed to grade, ``infra_retries`` times over (never the answer's fault)."""


def _default_sandbox() -> SandboxConfig:
    config = SandboxConfig()
    # A task's tests run in one batch: let a long task finish instead of tripping the episode clock (as `gym grade`).
    return config.model_copy(update={"episode": config.episode.model_copy(update={"wall_s": 3600.0})})


class ScorerConfig(BaseModel):
    """What a `Scorer` grades with and how far it goes (YAML: `ScorerConfig.from_file`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sandbox: SandboxConfig = Field(default_factory=_default_sandbox, description="the workspaces programs run in")
    grader: GraderConfig = Field(default_factory=GraderConfig, description="limits and comparison of program tests")
    math: MathGraderConfig = Field(default_factory=MathGraderConfig, description="bounds of the math check")
    concurrency: int = Field(2, ge=1, le=64, description="programs graded at once over all callers, a container each")
    reward: Literal["passed", "fraction"] = Field(
        "passed", description="a program's reward: 1.0 when every test passes, else 0.0; or the fraction passed"
    )
    infra_retries: int = Field(2, ge=0, le=10, description="times a sample the sandbox failed is graded again")
    max_response_chars: int = Field(1 << 20, ge=1, description="longest response read; a longer one scores 0 unread")
    max_ground_truth_chars: int = Field(
        32 << 20, ge=1, description="longest ground truth read; a longer one scores 0 before it is decoded"
    )
    gold_cache: int = Field(4096, ge=1, description="math golds whose reading is remembered")
    families: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="installed task families' own settings by name, each checked by the family's settings model",
    )

    @field_validator("families")
    @classmethod
    def _family_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return check_family_settings(value)

    @classmethod
    def from_file(cls, path: str | Path) -> ScorerConfig:
        return load_config(path, cls, ScorerConfigError)


class Score(BaseModel):
    """The grade of one sample, as every adapter reports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: float | None = Field(description="the reward; None: masked, the sandbox or host failed (not the answer)")
    passed: bool = Field(description="every test passed (math: the answer is the gold's value)")
    fraction: float = Field(description="fraction of tests passed")
    verdict: str = Field(description="passed, the first failing test's verdict, refused (input unusable), infra_error")
    reason: str = Field("", description="why it is not a pass, as the grader or the adapter says it")

    @property
    def masked(self) -> bool:
        return self.reward is None


def refused(reason: str) -> Score:
    """The score of a sample whose input cannot be graded (a malformed ground truth, an oversized response): 0."""
    log.info("scored 0 unread: %s", reason)
    return Score(reward=0.0, passed=False, fraction=0.0, verdict="refused", reason=reason[:500])


def masked(reason: str) -> Score:
    """The score of a sample the sandbox or the host failed to grade: no reward at all."""
    return Score(reward=None, passed=False, fraction=0.0, verdict="infra_error", reason=reason[:500])


def score_of(result: TaskResult, reward: Literal["passed", "fraction"] = "passed") -> Score:
    """A grader's result as a `Score`."""
    failed = next((test for test in result.tests if test.verdict != Verdict.PASSED), None)
    verdict = "passed" if failed is None else str(getattr(failed.verdict, "value", failed.verdict))
    reason = "" if failed is None else (failed.detail or result.detail)
    if result.infra_error:
        return masked(reason)
    value = float(result.passed) if reward == "passed" else result.fraction
    return Score(reward=value, passed=result.passed, fraction=result.fraction, verdict=verdict, reason=reason[:500])


class Scorer:
    """Grades (task, answer) pairs from any thread (see the module docstring)."""

    def __init__(self, config: ScorerConfig | None = None) -> None:
        self.config = config or ScorerConfig()
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None
        self._golds: dict[str, str] = {}  # gold -> why the check cannot grade against it ("" when it can)
        self.in_flight = 0  # programs being graded now
        self.peak_in_flight = 0  # the most at once so far

    # ------------------------------------------------------------ lifecycle

    def _started(self) -> LoopThread:
        """The service's loop, started (again, after a close or a failure) when it is not running."""
        with self._lock:
            if self._loop is None or self._loop.ended:
                self._loop = LoopThread("gym-scorer", self._serve, START_TIMEOUT_S)
            loop = self._loop
        try:
            loop.start()
        except LoopThreadError as exc:
            raise SandboxUnavailable(str(exc)) from None
        return loop

    @asynccontextmanager
    async def _serve(self, closing: trio.Event) -> AsyncIterator[None]:
        self._closing = closing  # the pool's holder closes it (its drain is shielded) once it is set
        self._pool_lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(self.config.concurrency)
        self._math = MathGrader(self.config.math)
        self._grader: Grader | None = None
        self._reading: dict[str, trio.Event] = {}
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            yield

    def close(self) -> None:
        """Stop the service and destroy its containers; idempotent. A later call starts it again."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    # ------------------------------------------------------------ grading

    def score(self, task: Task | MathTask, answer: str) -> Score:
        """The score of ``answer`` (a model's response: a program, or a math answer) to ``task``."""
        return self.score_many([(task, answer)])[0]

    def score_many(self, pairs: Sequence[tuple[Task | MathTask, str]]) -> list[Score]:
        """The scores of ``pairs``, in order, graded concurrently (programs ``concurrency`` at a time)."""
        if not pairs:
            return []
        loop = self._started()
        try:
            return loop.run(self._score_many, list(pairs))
        except trio.RunFinishedError:
            raise SandboxUnavailable(f"the scorer's event loop has ended: {loop.failed!r}") from None
        except LoopThreadError as exc:  # closed by another thread between the start and the call
            raise SandboxUnavailable(str(exc)) from None

    async def _score_many(self, pairs: list[tuple[Task | MathTask, str]]) -> list[Score]:
        scores: list[Score | None] = [None] * len(pairs)

        async def one(i: int, task: Task | MathTask, answer: str) -> None:
            scores[i] = await self._score(task, answer)

        async with trio.open_nursery() as nursery:
            for i, (task, answer) in enumerate(pairs):
                nursery.start_soon(one, i, task, answer)
        return [score for score in scores if score is not None]

    async def _score(self, task: Task | MathTask, answer: str) -> Score:
        if len(answer) > self.config.max_response_chars:
            return refused(f"response of {len(answer)} characters (at most {self.config.max_response_chars} are read)")
        if kind_of(task) is MATH:
            try:
                why = await self._gold_finding(task.gold)
            except Exception as exc:  # the check could not start at all: the host's failure
                return masked(f"reading the gold: {exc!r}")
            if why:
                return refused(f"ground_truth: the math check cannot grade against this gold: {why}")
        score = await self._attempt(task, answer)
        for retry in range(self.config.infra_retries):
            if not score.masked:
                break
            log.warning("%s: infra_error (%s), graded again (%d)", task.task_id, score.reason, retry + 1)
            score = await self._attempt(task, answer)
        return score

    async def _attempt(self, task: Task | MathTask, answer: str) -> Score:
        try:
            if kind_of(task) is MATH:
                return score_of(await self._math.grade(task, answer))
            grader = await self._program_grader()
            async with self._limiter:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                try:
                    result = await self._grade(grader, task, answer)
                finally:
                    self.in_flight -= 1
            return score_of(result, self.config.reward)
        except Exception as exc:  # the pool could not open (no Docker engine), a grader crash: the host's failure
            log.warning("%s: the sandbox failed: %r", task.task_id, exc)
            return masked(repr(exc))

    async def _grade(self, grader: Grader, task: Task | MathTask, answer: str) -> TaskResult:
        if is_plugin(task):  # an installed family grades its own tasks, with its settings
            kind = kind_of(task)
            resources = FamilyResources(grader.pool, grader, self.config.sandbox, kind.settings_of(self.config))
            return await grade_with_family(task, answer, resources)
        return await grader.grade(task, Submission(task_id=task.task_id, completion=answer))

    async def _program_grader(self) -> Grader:
        async with self._pool_lock:
            if self._grader is None:
                pool = await self._nursery.start(self._hold_pool)
                self._grader = Grader(pool, self.config.grader)
            return self._grader

    async def _hold_pool(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_pool(self.config.sandbox) as pool:
            task_status.started(pool)
            await self._closing.wait()

    async def _gold_finding(self, gold: str) -> str:
        """Why the check cannot grade against ``gold`` ("" when it can), read once per gold by concurrent callers."""
        while gold not in self._golds:
            pending = self._reading.get(gold)
            if pending is not None:
                await pending.wait()
                continue
            self._reading[gold] = trio.Event()
            try:
                probe = MathTask(task_id="gold", source_format="plain", problem="-", gold=gold)
                found = await trio.to_thread.run_sync(unread_golds, [probe], self.config.math)
                if len(self._golds) >= self.config.gold_cache:
                    self._golds.pop(next(iter(self._golds)))
                self._golds[gold] = found[0].reason if found else ""
            finally:
                self._reading.pop(gold).set()
        return self._golds[gold]


_shared: dict[str | None, Scorer] = {}
_shared_lock = threading.Lock()


def shared_scorer(config: str | Path | None = None) -> Scorer:
    """The process's scorer for ``config`` (a `ScorerConfig` YAML; None: the defaults), made on first use: every
    reward call of a library shares its pool and its concurrency bound."""
    key = None if config is None else str(Path(config).resolve())
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Scorer(None if key is None else ScorerConfig.from_file(key))
        return _shared[key]
