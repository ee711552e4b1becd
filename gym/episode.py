"""One multi-turn episode: prompt -> sample -> parse -> tool -> observation -> ... -> grade.

``run_episode`` drives a ``TrajectoryBuilder``:

1. the prompt is the environment's system, developer (instructions and tool
   schemas) and user (task) messages plus ``<|start|>assistant``, in the
   environment's chat format for the task (`Environment.format_for`: Harmony,
   or a model family's own template and tool-call format; the steps below name
   Harmony's tokens, the families' are in `gym.format.families`);
2. each turn the engine samples from the token context (stop ids ``<|call|>``
   and ``<|return|>``); the sampled ids are parsed at the token level and kept
   with their behaviour logprobs and the weights version of each (a turn in
   flight when new weights arrive may span two: partial rollouts); the
   trajectory's ``policy_version`` is the oldest;
3. a tool call runs in the episode's workspace and its result is appended as
   a rendered ``functions.NAME to=assistant`` message (masked out of the loss);
   a ``submit`` call or a final-channel answer ends the episode, and so do the
   turn budget and the token budget;
4. the answer is taken from the workspace by the task's family
   (`tasks.family`: CP, the submitted program or the final answer's code
   block; SWE, the diff of the repository; math, the final answer's text), the workspace is released, and
   the family grades the answer in a fresh container.

The episode goes through the task family for everything task-specific (its
workspace, its answer, its grade) and takes from the environment only what
``EpisodeEnvironment`` names.

A parse error is recorded (event with its span, ``parse_error`` failure) and
the episode goes on or ends per ``on_parse_error``; it never raises. An
infrastructure failure (lost runner, grader crash, unreachable engine) ends
the episode ``masked`` with reward ``None``: never a reward of 0.

The policy's context window bounds the episode like ``max_total_tokens``: an
engine that refuses a request as too long for its window (``ContextExceeded``,
from the in-process engines or read back from a server's HTTP 400) is asked
again for what still fits; once the episode's own turns and tool outputs fill
the window it ends ``max_tokens``, scored. Only a task whose prompt alone fills
the window is masked (no answer could fit), with that reason.
"""

from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym.format.chat_format import ChatFormat
from gym.format.harmony import ParsedTurn, ParseError
from gym.format.message import Message
from gym.rubric import RubricConfig, score, total
from gym.tools import Toolbox, ToolCallRecord, ToolWorkspace, printable
from gym.trajectory import Seeds, Trajectory, TrajectoryBuilder
from policies.sampling import ContextExceeded, EngineError, RolloutEngine, SamplingParams
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from tasks.family import TaskFamily
from tasks.result import TaskResult

log = logging.getLogger(__name__)

EndReason = Literal["submit", "final", "max_turns", "max_tokens", "parse_error", "infra_error"]


class EpisodeConfig(BaseModel):
    """Budgets of one episode and what a parse error does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int = Field(8, ge=1, description="Sampled turns (engine calls) at most.")
    max_tokens_per_turn: int = Field(1024, ge=1, description="max_tokens of one engine call.")
    max_total_tokens: int = Field(16384, ge=16, description="Whole trajectory (prompt included) at most.")
    on_parse_error: Literal["continue", "end"] = Field(
        "continue", description="After an invalid turn: sample a new turn, or end the episode (graded: no answer)."
    )

    @model_validator(mode="after")
    def _fits(self) -> EpisodeConfig:
        if self.max_tokens_per_turn > self.max_total_tokens:
            raise ValueError(
                f"max_tokens_per_turn ({self.max_tokens_per_turn}) exceeds max_total_tokens ({self.max_total_tokens})"
            )
        return self


class EpisodeResult(BaseModel):
    """An episode's trajectory plus what a replay bundle needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trajectory: Trajectory = Field(description="Token-exact record, reward included.")
    tool_calls: tuple[ToolCallRecord, ...] = Field(description="Every tool call, in order, with its outcome.")
    answer: str | None = Field(description="The program graded (None: nothing was submitted).")
    answer_source: Literal["submit", "final"] | None = Field(description="Where the answer came from.")
    grading: TaskResult | None = Field(description="Per-test verdicts (None when nothing was graded).")
    turns: int = Field(ge=0, description="Sampled turns.")
    infra: str = Field("", description="What the infrastructure failed at when the episode is masked; '' otherwise.")

    @property
    def failed(self) -> bool:
        """Masked, not fully correct, or any failure met on the way: always worth a bundle."""
        t = self.trajectory
        return t.masked or self.grading is None or not self.grading.passed or bool(t.failures)


class EpisodeSettings(Protocol):
    """The parts of an environment's configuration an episode reads."""

    @property
    def episode(self) -> EpisodeConfig: ...

    @property
    def rubric(self) -> RubricConfig: ...


class EpisodeEnvironment(Protocol):
    """What an episode takes from its environment (``gym.environment.Environment``)."""

    @property
    def config(self) -> EpisodeSettings: ...

    def format_for(self, task: Any) -> ChatFormat: ...

    def prompt(self, task: Any) -> list[Message]: ...

    def sampling(self, max_tokens: int, seed: int | None) -> SamplingParams: ...

    def toolbox_for(self, task: Any) -> Toolbox: ...


class _Clock:
    """Seconds spent per phase."""

    def __init__(self) -> None:
        self.spent = {"policy": 0.0, "tools": 0.0, "grading": 0.0, "workspace": 0.0}

    def phase(self, name: str) -> _Phase:
        return _Phase(self, name)


class _Phase:
    def __init__(self, clock: _Clock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.clock.spent[self.name] += time.monotonic() - self.started


class _Run:
    """State of one episode while it runs."""

    def __init__(self, env: EpisodeEnvironment, task: Any, seed: int, family: TaskFamily) -> None:
        self.env, self.task, self.seed, self.family = env, task, seed, family
        self.builder = TrajectoryBuilder.from_messages(
            env.format_for(task), env.prompt(task), task_id=task.task_id, seeds=Seeds(episode=seed)
        )
        self.clock = _Clock()
        self.records: list[ToolCallRecord] = []
        self.answer: str | None = None
        self.source: Literal["submit", "final"] | None = None
        self.end: EndReason = "max_turns"
        self.turns = 0
        self.infra = ""  # what failed, when the infrastructure did (the episode is then masked)
        self.context_limit = 1 << 62  # the policy's context window, once an engine has said it (ContextExceeded)

    async def sample(self, engine: RolloutEngine) -> ParsedTurn | ParseError | None:
        """One turn: sample and parse; None when the token budget is spent or the engine failed."""
        config = self.env.config.episode
        context = self.builder.context()
        completion = None
        while completion is None:  # at most twice: a second time only with a smaller max_tokens
            room = min(config.max_total_tokens, self.context_limit) - len(context)
            if room <= 0:
                if self.turns == 0:  # the task's own prompt fills the policy's context: no answer could fit
                    self.end = "infra_error"
                    self.infra = f"engine: the prompt of {len(context)} tokens fills the policy's context of {self.context_limit}"
                else:  # the episode's own turns and tool outputs filled it: scored, like max_total_tokens
                    self.end = "max_tokens"
                return None
            params = self.env.sampling(min(config.max_tokens_per_turn, room), (self.seed + self.turns) % (1 << 62))
            try:
                with self.clock.phase("policy"):
                    completion = (await engine.generate([context], params))[0]
            except ContextExceeded as exc:  # the model's window is smaller than the episode's token budget
                if exc.context_length >= self.context_limit:  # told nothing new: not a size we can fix
                    self.end, self.infra = "infra_error", f"engine: {exc}"
                    return None
                self.context_limit = exc.context_length
            except EngineError as exc:
                self.end, self.infra = "infra_error", f"engine: {exc}"
                return None
        self.turns += 1
        turn = self.builder.add_sampled(completion.token_ids, completion.logprobs, completion.versions)
        if isinstance(turn, ParseError) and len(self.builder.ids) >= config.max_total_tokens:
            self.end = "max_tokens"
            return None
        return turn

    async def act(self, ws: ToolWorkspace, turn: ParsedTurn) -> bool:
        """Run the turn's tool call or take its final answer; True when the episode goes on."""
        call = turn.tool_call
        if call is None:
            final = turn.final
            if final is None:
                return True  # a turn of analysis or commentary without a call: sample again
            self.answer, self.source, self.end = self.family.final_answer(self.task, final), "final", "final"
            return False
        with self.clock.phase("tools"):
            outcome = await self.env.toolbox_for(self.task).call(ws, call)
        self.records.append(
            ToolCallRecord(index=len(self.records), recipient=call.recipient, arguments=call.raw, outcome=outcome)
        )
        if outcome.submitted is not None:
            self.answer, self.source, self.end = outcome.submitted, "submit", "submit"
            return False
        self.builder.add_observation(Message.tool_result(call.name, outcome.output, call.namespace), outcome.failure)
        if outcome.failure == FailureKind.INFRA_ERROR:
            self.end, self.infra = "infra_error", f"tool {call.recipient}: {outcome.output}"
            return False
        return True


async def run_episode(
    env: EpisodeEnvironment,
    engine: RolloutEngine,
    family: TaskFamily,
    task: Any,
    *,
    seed: int,
    group_id: str | None = None,
) -> EpisodeResult:
    """Run one episode of ``task`` to its end and grade it through its family (see the module docstring)."""
    run = _Run(env, task, seed, family)
    config = env.config.episode
    started = time.monotonic()
    async with AsyncExitStack() as workspace:
        try:
            ws = await workspace.enter_async_context(family.workspace(task, owner=f"episode:{task.task_id}"))
        except InfraError as exc:  # no workspace could be started (engine down): nothing was sampled yet
            ws = None
            run.end, run.infra = "infra_error", f"workspace: {exc}"
        run.clock.spent["workspace"] += time.monotonic() - started
        if ws is not None:
            await _play(run, engine, ws)
            await _take_answer(run, family, ws)
        engine_url = getattr(ws, "engine_url", None)  # Docker workspaces: the engine that ran it (sandbox.fleet)
        releasing = time.monotonic()
    run.clock.spent["workspace"] += time.monotonic() - releasing
    grading = await _grade(run, family)
    if grading is not None and grading.infra_error:
        run.infra = f"grading: {grading.detail or next((t.detail for t in grading.tests if t.detail), '')}"
    masked = bool(run.infra)
    if masked:
        log.warning("task %s: episode masked (infrastructure): %s", task.task_id, run.infra[:300])
        if FailureKind.INFRA_ERROR not in run.builder.failures:
            run.builder.add_failure(FailureKind.INFRA_ERROR)
    timings = {**{k: round(v, 6) for k, v in run.clock.spent.items()}, "total": round(time.monotonic() - started, 6)}
    draft = run.builder.build(masked=masked, timings=timings)
    reward, breakdown = None, {}
    if not masked:
        breakdown = score(env.config.rubric, draft, grading, turns=run.turns, token_budget=config.max_total_tokens)
        reward = total(breakdown)
    trajectory = draft.model_copy(
        update={
            "reward": reward,
            "reward_breakdown": breakdown,
            "group_id": group_id,
            "end_reason": "infra_error" if masked else run.end,
            "placement": {"engine": engine_url} if isinstance(engine_url, str) else {},
        }
    )
    # The graded answer was exact (an SWE diff may hold any bytes); what is kept must encode as UTF-8.
    answer = None if run.answer is None else printable(run.answer)
    return EpisodeResult(
        trajectory=trajectory,
        tool_calls=tuple(run.records),
        answer=answer,
        answer_source=run.source,
        grading=grading,
        turns=run.turns,
        infra=run.infra,
    )


async def _play(run: _Run, engine: RolloutEngine, ws: ToolWorkspace) -> None:
    """Sample turns and run their tool calls until the episode ends."""
    config = run.env.config.episode
    while run.turns < config.max_turns:
        turn = await run.sample(engine)
        if turn is None:
            return
        if isinstance(turn, ParseError):
            if config.on_parse_error == "end":
                run.end = "parse_error"
                return
            continue
        if not await run.act(ws, turn):
            return


async def _take_answer(run: _Run, family: TaskFamily, ws: ToolWorkspace) -> None:
    """The family's answer, read from the workspace before it is released (SWE: the repository's diff)."""
    if run.answer is None or run.end == "infra_error":
        return
    with run.clock.phase("grading"):
        try:
            run.answer = await family.answer(run.task, ws, run.answer)
        except InfraError as exc:
            run.end, run.infra = "infra_error", f"answer: {exc}"
        except ValueError as exc:  # the candidate made its answer unreadable (a removed repository, a huge diff)
            log.info("task %s: no answer to grade: %s", run.task.task_id, exc)
            run.answer = None


async def _grade(run: _Run, family: TaskFamily) -> TaskResult | None:
    """Grade the answer in a fresh container (the episode's workspace is already released)."""
    if run.answer is None or run.end == "infra_error":
        return None
    with run.clock.phase("grading"):
        return await family.grade(run.task, run.answer)
