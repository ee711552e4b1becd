"""Token-exact trajectories: the record an episode hands the trainer, and its checks.

A trajectory stores token ids, never re-tokenized text. ``ids`` is the whole
sequence (prompt included); ``sampled[i]`` says whether the policy sampled
``ids[i]``; ``logprobs[i]`` is the behaviour logprob the engine reported for a
sampled token and ``None`` (JSON ``null``) for every other token (prompt,
generation prompts, tool observations), so the three tuples always align.
``token_versions[i]`` is, the same way, the weights version that sampled a
sampled token: with partial rollouts an engine swaps weights between decode
steps, so one episode (even one completion) spans several versions; they never
go down within a completion and the oldest is ``policy_version``. Records
written before the field existed have ``token_versions`` None (absent from
the file): every sampled token came from ``policy_version``.

The episode loop builds one with :class:`TrajectoryBuilder`: ``context()`` is
what the engine continues, ``add_sampled`` appends a sampled completion (after
the masked opening of the turn when one is due: ``<|start|>assistant`` in
Harmony) and parses it, ``add_observation`` appends a rendered tool result
(masked). Every non-sampled id comes from the chat format (`gym.format.chat_format`)
and sampled ids are never re-encoded. When every turn parsed, ``ids`` equals the
canonical rendering of ``messages`` in that format, which
:func:`assert_token_exact` proves; :func:`retokenization_drift` reports, as
data, where decoding and re-encoding would not give the stored ids back.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gym.format.chat_format import ChatFormat
from gym.format.harmony import Harmony, ParsedTurn, ParseError
from gym.format.message import Message
from gym.format.tokenizer import Tokenizer
from sandbox.failure import FailureKind


class TrajectoryError(Exception):
    """A trajectory or a trajectory file is not what it claims to be."""


class TokenMismatch(TrajectoryError):
    """Stored ids differ from the canonical rendering; names the first differing position."""

    def __init__(self, position: int, stored: int | None, expected: int | None, message: str) -> None:
        super().__init__(message)
        self.position, self.stored, self.expected = position, stored, expected


class Event(BaseModel):
    """A tool call, tool result or parse error, located by its token span ids[start:end]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["call", "result", "parse_error"] = Field(description="What happened.")
    start: int = Field(ge=0, description="First token of the span in Trajectory.ids.")
    end: int = Field(ge=0, description="One past the last token of the span.")
    tool: str | None = Field(None, description="Full tool name ('functions.python') for calls and results.")
    failure: FailureKind | None = Field(None, description="How the tool call ended (results) or parse_error.")
    detail: str = Field("", description="Parse error reason, or a short note.")


class Seeds(BaseModel):
    """Where a trajectory's randomness came from, and which GRPO group member it is.

    Stored as the trajectory's ``seeds`` object (same keys as the dict it replaces, so older files
    load); the rollout fields are None for an episode run on its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episode: int | None = Field(None, ge=0, description="Sampling seed of the first turn (turn t: episode + t).")
    rollout: int | None = Field(None, description="Seed of the rollout that drew the task (rollout workers).")
    position: int | None = Field(None, ge=0, description="The task draw's position in the rollout's task stream.")
    member: int | None = Field(None, ge=0, description="Index of the episode in its GRPO group.")


class Trajectory(BaseModel):
    """One episode's tokens, behaviour logprobs, tool events, reward and bookkeeping."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = Field(1, description="Bumped when the stored layout changes.")
    task_id: str = Field(description="Task the episode worked on.")
    tokenizer: str = Field(description="Fingerprint of the tokenizer the ids belong to.")
    chat_format: str = Field(
        "harmony",
        description="The chat format the ids are written in (gym.format.chat_format: harmony, qwen, llama3, "
        "deepseek); records from before the field are Harmony.",
    )
    policy_version: int = Field(ge=0, description="Weights version of the policy that sampled the tokens.")
    prompt_ids: tuple[int, ...] = Field(description="The initial prompt, ending with <|start|>assistant.")
    ids: tuple[int, ...] = Field(description="All token ids, prompt first.")
    sampled: tuple[bool, ...] = Field(description="True where the policy sampled the token (the loss mask).")
    logprobs: tuple[float | None, ...] = Field(description="Behaviour logprob of sampled tokens, None elsewhere.")
    token_versions: tuple[StrictInt | None, ...] | None = Field(
        None,
        description="Weights version that sampled each sampled token, None elsewhere (aligned with ids); "
        "non-decreasing within a completion, the oldest is policy_version. None (a record from before the field): "
        "every sampled token came from policy_version.",
    )
    messages: tuple[Message, ...] = Field(
        (), description="The conversation the ids render (parse-error turns have none)."
    )
    events: tuple[Event, ...] = Field((), description="Tool calls, results and parse errors in order.")
    reward: float | None = Field(None, description="Scalar reward; None when not graded.")
    reward_breakdown: dict[str, float] = Field(default_factory=dict, description="Rubric term -> value.")
    failures: tuple[FailureKind, ...] = Field((), description="Failure kinds met during the episode, in order.")
    masked: bool = Field(False, description="True on infra_error: excluded from the loss, never a reward of 0.")
    timings: dict[str, float] = Field(default_factory=dict, description="Seconds per phase (policy, tools, grading).")
    seeds: Seeds = Field(default_factory=Seeds, description="Seeds used (sampling, task draw, group member).")
    group_id: str | None = Field(None, description="GRPO group: the trajectories sampled for one task draw share it.")
    end_reason: Literal["submit", "final", "max_turns", "max_tokens", "parse_error", "infra_error"] | None = Field(
        None, description="Why the episode stopped (gym.episode); None for trajectories built outside an episode."
    )
    placement: dict[str, str] = Field(
        default_factory=dict,
        description="Where the episode ran: 'engine' = the Docker engine URL of its workspace, 'node' = the Ray "
        "node of its rollout worker (gym train --ray), 'error' = why a group lost with its node came back masked, "
        "'engine_error' = why the trainer masked it (a weights version newer than its own); "
        "empty for trajectories built outside an episode.",
    )

    @field_validator("token_versions")
    @classmethod
    def _versions(cls, versions: tuple[int | None, ...] | None, info: ValidationInfo) -> tuple[int | None, ...] | None:
        """Checked here, not in `_aligned`, so a reader's error names the field (``trajectory.token_versions``)."""
        sampled, oldest = info.data.get("sampled"), info.data.get("policy_version")
        if versions is None or sampled is None or oldest is None:  # absent, or another field already failed
            return versions
        problem = versions_problem(versions, sampled, oldest)
        if problem is not None:
            raise ValueError(problem)
        return versions

    @model_validator(mode="after")
    def _aligned(self) -> Trajectory:
        n = len(self.ids)
        if len(self.sampled) != n or len(self.logprobs) != n:
            raise ValueError(f"ids ({n}), sampled ({len(self.sampled)}) and logprobs ({len(self.logprobs)}) must align")
        if self.ids[: len(self.prompt_ids)] != self.prompt_ids or any(self.sampled[: len(self.prompt_ids)]):
            raise ValueError("ids must start with prompt_ids, none of them sampled")
        for i, (is_sampled, logprob) in enumerate(zip(self.sampled, self.logprobs)):
            if is_sampled != (logprob is not None):
                raise ValueError(f"token {i}: a logprob is required exactly for sampled tokens")
            if logprob is not None and not (math.isfinite(logprob) and logprob <= 0.0):
                raise ValueError(f"token {i}: logprob {logprob} is not a finite value <= 0")
        for event in self.events:
            if not event.start <= event.end <= n:
                raise ValueError(f"event span [{event.start}, {event.end}) outside the {n} ids")
        if self.reward is not None and not math.isfinite(self.reward):
            raise ValueError(f"reward {self.reward} is not finite")
        return self

    @property
    def completion_ids(self) -> tuple[int, ...]:
        """Everything after the prompt."""
        return self.ids[len(self.prompt_ids) :]

    @property
    def num_sampled(self) -> int:
        return sum(self.sampled)

    @property
    def group_key(self) -> str:
        """The GRPO group the trajectory belongs to: its group_id, or its task for an ungrouped episode."""
        return self.group_id or self.task_id


def versions_problem(versions: Sequence[int | None], sampled: Sequence[bool], oldest: int) -> str | None:
    """What is wrong with ``versions`` as the per-token weights versions of a trajectory whose loss mask is
    ``sampled`` and whose ``policy_version`` is ``oldest``, or None. A completion is a run of sampled tokens:
    two completions are always apart (a generation prompt or a tool result between them), so the versions of
    one never go down."""
    if len(versions) != len(sampled):
        return f"{len(versions)} versions for {len(sampled)} ids: they must align"
    previous: int | None = None  # within the current run of sampled tokens
    seen: int | None = None  # the oldest version met
    for i, (version, is_sampled) in enumerate(zip(versions, sampled)):
        if is_sampled != (version is not None):
            return f"token {i}: a version is required exactly for sampled tokens"
        if version is None:
            previous = None
            continue
        if version < 0:
            return f"token {i}: version {version} is negative"
        if previous is not None and version < previous:
            return f"token {i}: version {version} after {previous} within one completion (versions never go down)"
        previous = version
        seen = version if seen is None else min(seen, version)
    if seen is not None and seen != oldest:
        return f"the oldest token version is {seen}, but policy_version is {oldest}"
    return None


class TrajectoryBuilder:
    """Grows a trajectory turn by turn; ``build`` freezes it."""

    def __init__(
        self,
        harmony: ChatFormat,
        prompt_ids: Sequence[int],
        *,
        task_id: str,
        messages: Sequence[Message] = (),
        policy_version: int = 0,
        seeds: Seeds | None = None,
    ) -> None:
        self.harmony = harmony
        self.task_id, self.policy_version, self.seeds = task_id, policy_version, seeds or Seeds()
        self.prompt_ids = list(prompt_ids)
        self.ids = list(prompt_ids)
        self.sampled = [False] * len(self.ids)
        self.logprobs: list[float | None] = [None] * len(self.ids)
        self.versions: list[int | None] = [None] * len(self.ids)
        self.unversioned = False  # a turn was added without its tokens' versions: the record has none
        self.messages = list(messages)
        self.events: list[Event] = []
        self.failures: list[FailureKind] = []
        self._due: list[int] = []  # owed before the next sampled turn (the prompt already ends with its opening)

    @classmethod
    def from_messages(cls, harmony: ChatFormat, messages: Sequence[Message], **kwargs: object) -> TrajectoryBuilder:
        """Start from a rendered conversation plus the generation prompt."""
        return cls(harmony, harmony.render_prompt(messages), messages=messages, **kwargs)  # type: ignore[arg-type]

    def context(self) -> list[int]:
        """The ids the engine continues (with the next turn's opening, ``<|start|>assistant`` in Harmony, when due)."""
        return self.ids + self._due

    def _append(
        self, ids: Sequence[int], logprobs: Sequence[float] | None, versions: Sequence[int] | None = None
    ) -> int:
        start = len(self.ids)
        self.ids += ids
        self.sampled += [logprobs is not None] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [None] * len(ids)
        self.versions += list(versions) if versions is not None else [None] * len(ids)
        return start

    def add_sampled(
        self, ids: Sequence[int], logprobs: Sequence[float], versions: Sequence[int] | None = None
    ) -> ParsedTurn | ParseError:
        """Append a sampled completion with its behaviour logprobs and, when known, the weights version of each
        token (`Completion.versions`); return its parse (errors as data)."""
        if len(ids) != len(logprobs) or (versions is not None and len(versions) != len(ids)):
            counts = f"{len(logprobs)} logprobs" + ("" if versions is None else f" and {len(versions)} versions")
            raise ValueError(f"{len(ids)} sampled ids but {counts}")
        if self._due:
            self._append(self._due, None)
        self.unversioned |= versions is None and len(ids) > 0
        offset = self._append(ids, logprobs, versions)
        turn = self.harmony.parse_completion(ids)
        if isinstance(turn, ParseError):
            self.events.append(
                Event(
                    kind="parse_error",
                    start=offset + turn.start,
                    end=offset + turn.end,
                    failure=FailureKind.PARSE_ERROR,
                    detail=turn.reason,
                )
            )
            self.failures.append(FailureKind.PARSE_ERROR)
        else:
            self.messages += turn.messages
            if turn.tool_call is not None:
                start, end = turn.spans[-1]
                self.events.append(
                    Event(kind="call", start=offset + start, end=offset + end, tool=turn.tool_call.recipient)
                )
        self._due = self.harmony.resume(ids) if isinstance(turn, ParseError) or turn.stop == "end" else []
        return turn

    def add_observation(self, message: Message, failure: FailureKind | None = None) -> tuple[int, int]:
        """Append a tool result (or any non-sampled message), masked; return its span."""
        start = self._append(self.harmony.render_observation(message), None)
        self.messages.append(message)
        self.events.append(Event(kind="result", start=start, end=len(self.ids), tool=message.name, failure=failure))
        if failure is not None and failure is not FailureKind.OK:
            self.failures.append(failure)
        self._due = self.harmony.generation_prompt()
        return start, len(self.ids)

    def add_failure(self, kind: FailureKind) -> None:
        """Record a failure met outside a turn (budget, grading)."""
        self.failures.append(kind)

    def build(
        self,
        *,
        reward: float | None = None,
        reward_breakdown: dict[str, float] | None = None,
        masked: bool = False,
        timings: dict[str, float] | None = None,
    ) -> Trajectory:
        """The trajectory so far. When every turn came with its tokens' versions, they are kept and
        ``policy_version`` is the oldest of them; else the builder's ``policy_version`` stands for every token."""
        known = [] if self.unversioned else [v for v in self.versions if v is not None]
        versions = tuple(self.versions) if known else None  # nothing sampled: None says the same
        return Trajectory(
            task_id=self.task_id,
            tokenizer=self.harmony.tokenizer.fingerprint,
            chat_format=self.harmony.name,
            policy_version=min(known) if known else self.policy_version,
            prompt_ids=tuple(self.prompt_ids),
            ids=tuple(self.ids),
            sampled=tuple(self.sampled),
            logprobs=tuple(self.logprobs),
            token_versions=versions,
            messages=tuple(self.messages),
            events=tuple(self.events),
            reward=reward,
            reward_breakdown=dict(reward_breakdown or {}),
            failures=tuple(self.failures),
            masked=masked,
            timings=dict(timings or {}),
            seeds=self.seeds,
        )


def assert_token_exact(
    trajectory: Trajectory, messages: Sequence[Message], tokenizer: Tokenizer, chat_format: ChatFormat | None = None
) -> None:
    """Raise TokenMismatch unless ``trajectory.ids`` is exactly the canonical rendering of ``messages`` in
    ``chat_format`` (Harmony by default; a model family's format bound to the episode's tools)."""
    if trajectory.tokenizer != tokenizer.fingerprint:
        raise TrajectoryError(f"trajectory ids belong to tokenizer {trajectory.tokenizer}, not {tokenizer.fingerprint}")
    chat_format = chat_format or Harmony(tokenizer)
    if trajectory.chat_format != chat_format.name:
        raise TrajectoryError(
            f"task {trajectory.task_id}: the ids are in chat format {trajectory.chat_format}, not {chat_format.name}"
        )
    expected = chat_format.render(messages)
    stored = list(trajectory.ids)
    if stored == expected:
        return
    position = next((i for i, (a, b) in enumerate(zip(stored, expected)) if a != b), min(len(stored), len(expected)))
    got = stored[position] if position < len(stored) else None
    want = expected[position] if position < len(expected) else None

    def show(token: int | None) -> str:
        return "nothing (end)" if token is None else f"{token} ({tokenizer.decode([token])!r})"

    context = tokenizer.decode(stored[max(0, position - 12) : position])
    raise TokenMismatch(
        position,
        got,
        want,
        f"task {trajectory.task_id}: token {position} differs: stored {show(got)}, canonical {show(want)}; "
        f"preceded by {context!r} ({len(stored)} stored vs {len(expected)} canonical ids)",
    )


class Drift(BaseModel):
    """A text run whose stored ids do not come back from decode-then-encode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: int = Field(ge=0, description="First id of the run in Trajectory.ids.")
    end: int = Field(ge=0, description="One past its last id.")
    stored: tuple[int, ...] = Field(description="The ids stored.")
    reencoded: tuple[int, ...] = Field(description="encode(decode(stored)).")


class RetokenizationReport(BaseModel):
    """Result of the retokenization check: drift is data, not an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(ge=0, description="Text runs (between special tokens) checked.")
    drifts: tuple[Drift, ...] = Field((), description="The runs that changed.")

    @property
    def drifted(self) -> bool:
        return bool(self.drifts)


def retokenization_drift(trajectory: Trajectory, tokenizer: Tokenizer) -> RetokenizationReport:
    """Decode each text run between special tokens, re-encode it, and report runs that differ.

    Non-canonical merges sampled by a policy, or bytes that are not valid UTF-8,
    show up here: they are why the trainer must use stored ids, never text.
    """
    drifts: list[Drift] = []
    runs, start, ids = 0, 0, trajectory.ids
    for position in range(len(ids) + 1):
        if position < len(ids) and not tokenizer.is_special(ids[position]):
            continue
        if position > start:
            runs += 1
            stored = ids[start:position]
            again = tuple(tokenizer.encode(tokenizer.decode(stored)))
            if again != stored:
                drifts.append(Drift(start=start, end=position, stored=stored, reencoded=again))
        start = position + 1
    return RetokenizationReport(runs=runs, drifts=tuple(drifts))


def write_jsonl(path: Path, trajectories: Iterable[Trajectory], *, append: bool = False) -> int:
    """Write one trajectory per line; returns how many. Append mode adds to an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a" if append else "w", encoding="utf-8") as out:
        for trajectory in trajectories:
            out.write(trajectory.model_dump_json() + "\n")
            count += 1
    return count


class TrajectoryLog:
    """A JSON Lines file trajectories are appended to as their episodes finish (``rollout``'s run directory).

    Each line is flushed and fsynced before `append` returns: a run that is interrupted or
    crashes keeps every trajectory it finished (a SIGKILL mid-write can tear only the last line).
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.count = 0
        self._file = path.open("a", encoding="utf-8")

    def append(self, trajectory: Trajectory) -> None:
        self._file.write(trajectory.model_dump_json() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.count += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> Iterator[Trajectory]:
    """Trajectories from a jsonl file; a bad line raises TrajectoryError naming path and line number."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield Trajectory.model_validate_json(line)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "line"
                raise TrajectoryError(f"{path}:{number}: not a trajectory: {where}: {first['msg']}") from None
