"""Replay bundles: everything needed to re-execute an episode offline, written atomically.

A bundle is one JSON file holding the task, the workspace image and its
digest, the sandbox, tool, grader and rubric configuration, the seeds, every
tool call with its outcome, the graded answer with its per-test verdicts,
and the token-exact trajectory. ``python -m gym replay BUNDLE`` re-executes
it; ``python -m gym show BUNDLE`` prints it as a transcript.

Which episodes get one (``ReplayConfig``): every failed, masked or erroring
episode when ``failures`` is set, and a deterministic ``rate`` share of the
others, chosen by hashing the replay seed with the episode's key, so a rerun
bundles the same episodes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import docker
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym.episode import EpisodeConfig, EpisodeResult
from gym.message import Message, ToolCall
from gym.rubric import RubricConfig
from gym.run_dir import write_atomic
from gym.tools import ToolCallRecord, ToolsConfig
from gym.trajectory import Seeds, Trajectory
from sandbox.config import SandboxConfig
from sandbox.errors import InfraError
from tasks.grader import GraderConfig, TaskResult
from tasks.math.grader import MathGraderConfig
from tasks.math.problem import MathTask
from tasks.swe.family import SweFamilyConfig
from tasks.swe.instance import SweInstance
from tasks.task import Task

if TYPE_CHECKING:
    from gym.environment import Environment

BundleReason = Literal["failure", "sampled"]


class BundleError(ValueError):
    """A file is not a readable bundle; the message names the file and the field."""


MAX_BUNDLE_BYTES = (
    64 << 20
)  # the largest file read as a bundle (an episode's is ~32 kB; SWE diffs and hidden tests add MBs)


def read_bundle_text(path: Path) -> str:
    """The text of a bundle file; a file past ``MAX_BUNDLE_BYTES`` is refused unread (``BundleError``)."""
    try:
        with Path(path).open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(MAX_BUNDLE_BYTES + 1) if size <= MAX_BUNDLE_BYTES else b""
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc}") from None
    if size > MAX_BUNDLE_BYTES or len(data) > MAX_BUNDLE_BYTES:
        raise BundleError(f"{path}: {max(size, len(data))} bytes, larger than a bundle may be ({MAX_BUNDLE_BYTES})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: cannot read: {exc}") from None


def recorded_call(record: ToolCallRecord) -> ToolCall:
    """The call a record holds, parsed by the rules the episode parsed it with (``ToolCall.from_message``):
    a recorded episode never holds a call whose arguments did not parse, so one that does not is tampering
    (ValueError saying what is wrong)."""
    try:
        message = Message(role="assistant", channel="commentary", recipient=record.recipient, content=record.arguments)
    except ValidationError as exc:
        raise ValueError(f"recipient: {exc.errors()[0]['msg']}") from None
    try:
        return ToolCall.from_message(message)
    except ValueError as exc:  # also json's refusal of integers past 4,300 digits, which is no JSONDecodeError
        text = " ".join(str(exc).split())
        if "integer string conversion" in text:
            text = "arguments hold an integer of more than 4,300 digits"
        raise ValueError(f"{'recipient' if 'recipient' in text else 'arguments'}: {text[:200]}") from None


class Bundle(BaseModel):
    """One episode, replayable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = Field(1, description="Bumped when the layout changes.")
    reason: BundleReason = Field(description="Why it was written: a failure, or the sampled share.")
    environment: str = Field(description="Environment name.")
    tokenizer: str = Field(description="Tokenizer spec the trajectory's ids belong to.")
    task: Task | SweInstance | MathTask = Field(
        description="The task (hidden tests included), the SWE instance, or the math task (gold included)."
    )
    image: str = Field(description="Workspace image name.")
    image_digest: str = Field(description="Image id (sha256) the episode ran on; '' when unknown.")
    sandbox: SandboxConfig = Field(description="Workspace configuration (tools and grading).")
    tools: ToolsConfig = Field(description="Tool configuration.")
    grader: GraderConfig = Field(description="Grader configuration.")
    swe: SweFamilyConfig | None = Field(None, description="SWE workspaces and grading (SWE instances only).")
    math: MathGraderConfig | None = Field(None, description="Math answer checks (math tasks only).")
    rubric: RubricConfig = Field(description="Reward terms.")
    episode: EpisodeConfig = Field(description="Budgets (the length term needs the token budget).")
    seeds: Seeds = Field(description="Episode, rollout, group and member seeds.")
    tool_calls: tuple[ToolCallRecord, ...] = Field(description="Every tool call with its outcome, in order.")
    answer: str | None = Field(description="The program graded.")
    answer_source: Literal["submit", "final"] | None = Field(description="Where the answer came from.")
    grading: TaskResult | None = Field(description="Per-test verdicts.")
    turns: int = Field(ge=0, description="Sampled turns.")
    trajectory: Trajectory = Field(description="The token-exact trajectory.")


def bundle_reason(result: EpisodeResult, key: str, *, rate: float, failures: bool, seed: int) -> BundleReason | None:
    """Whether (and why) an episode gets a bundle: failures always (if asked), else a hash-chosen share."""
    if failures and result.failed:
        return "failure"
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return "sampled" if int.from_bytes(digest[:8], "big") / 2**64 < rate else None


def bundle_of(
    env: Environment, result: EpisodeResult, reason: BundleReason, digest: str, image: str | None = None
) -> Bundle:
    """The bundle of one finished episode of ``env`` (``image``: its workspace image, default the sandbox's)."""
    config, trajectory = env.config, result.trajectory
    task = env.tasks[trajectory.task_id]
    return Bundle(
        reason=reason,
        environment=env.name,
        tokenizer=config.tokenizer,
        task=task,
        swe=config.swe if isinstance(task, SweInstance) else None,
        math=config.math if isinstance(task, MathTask) else None,
        image=image or config.sandbox.image,
        image_digest=digest,
        sandbox=config.sandbox,
        tools=config.tools,
        grader=config.grader,
        rubric=config.rubric,
        episode=config.episode,
        seeds=trajectory.seeds,
        tool_calls=result.tool_calls,
        answer=result.answer,
        answer_source=result.answer_source,
        grading=result.grading,
        turns=result.turns,
        trajectory=trajectory,
    )


def write_bundle(path: Path, bundle: Bundle) -> Path:
    """Write atomically: a temporary file in the same folder, flushed to disk, then renamed over ``path``."""
    return write_atomic(path, bundle.model_dump_json(indent=1))


def read_bundle(path: Path) -> Bundle:
    """A bundle file, validated: its fields (``BundleError`` names the first wrong one) and every recorded tool
    call's recipient and arguments (``tool_calls.N.arguments``). What it may ask of this machine is checked
    apart, by ``gym.replay_limits.vet``."""
    text = read_bundle_text(path)
    try:
        bundle = Bundle.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise BundleError(
            f"{path}: not a replay bundle: {where}: {' '.join(first['msg'].split())[:200]} ({exc.error_count()} errors)"
        ) from None
    for i, record in enumerate(bundle.tool_calls):
        try:
            recorded_call(record)
        except ValueError as exc:
            field, _, why = str(exc).partition(": ")
            raise BundleError(f"{path}: not a replay bundle: tool_calls.{i}.{field}: {why}") from None
    return bundle


def bundle_name(index: int, task_id: str) -> str:
    """A file name for an episode's bundle (task ids may hold any character)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in task_id)[:60]
    return f"{index:06d}-{safe}.json"


async def image_digest(pool: object) -> str:
    """Id (sha256) of the workspace image of a ``WorkspacePool``; '' when it cannot be told (fakes, engine errors)."""
    engine = getattr(pool, "engine", None)
    if engine is None:
        return ""
    try:
        image = await engine.call("inspect image", engine.client.images.get, engine.config.image)
    except (InfraError, docker.errors.NotFound):
        return ""
    return str(image.id)
