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

What a bundle may store (docs/gym.md): the fields its episode produced outside
the token-exact trajectory (tool outputs, submitted programs, the answer diff,
grading details) get ``bytes_floor + bytes_per_token x sampled tokens`` bytes of
JSON, measured field by field before the file is built; past that the largest
are cut to a marker naming their size and sha256 (``Bundle.cuts``), and replay
compares a cut field by its hash and reports the bundle as truncated. A run's
bundles share ``run_bytes`` of disk (``BundleBudget``); past it none is written
and the skipped ones are counted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import docker
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import to_json

from gym.episode import EpisodeConfig, EpisodeResult
from gym.format.message import Message, ToolCall
from gym.rubric import RubricConfig
from gym.run_dir import write_atomic
from gym.tools import ToolCallRecord, ToolsConfig
from gym.trajectory import Seeds, Trajectory
from sandbox.config import SandboxConfig
from sandbox.errors import InfraError
from tasks.families import AnyTask, check_family_settings, kind_of
from tasks.grader import GraderConfig
from tasks.math.grader import MathGraderConfig
from tasks.result import TaskResult
from tasks.swe.family import SweFamilyConfig

if TYPE_CHECKING:
    from gym.environment import Environment
    from gym.environment_config import ReplayConfig

log = logging.getLogger(__name__)

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


class BundleCut(BaseModel):
    """A field too large for its bundle: stored as ``cut_marker``; replay compares the original by its hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field(description="Where, e.g. 'answer' or 'tool_calls.3.outcome.submitted'.")
    bytes: int = Field(ge=0, description="Size of the original as bundle JSON.")
    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="sha256 of the original text (UTF-8).")


def cut_marker(size: int, sha256: str) -> str:
    """What a cut field holds instead of its text."""
    return f"[cut from this bundle: {size} bytes, sha256 {sha256}]"


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Bundle(BaseModel):
    """One episode, replayable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = Field(1, description="Bumped when the layout changes.")
    reason: BundleReason = Field(description="Why it was written: a failure, or the sampled share.")
    environment: str = Field(description="Environment name.")
    tokenizer: str = Field(description="Tokenizer spec the trajectory's ids belong to.")
    task: AnyTask = Field(
        description="The task (hidden tests included), the SWE instance, or the math task (gold included)."
    )
    image: str = Field(description="Workspace image name ('' when the episode had none: an SWE instance not built).")
    image_digest: str = Field(description="Image id (sha256) the episode ran on; '' when unknown.")
    sandbox: SandboxConfig = Field(description="Workspace configuration (tools and grading).")
    tools: ToolsConfig = Field(description="Tool configuration.")
    grader: GraderConfig = Field(description="Grader configuration.")
    swe: SweFamilyConfig | None = Field(None, description="SWE workspaces and grading (SWE instances only).")
    math: MathGraderConfig | None = Field(None, description="Math answer checks (math tasks only).")
    families: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="The task's plugin family's own settings, when it has any."
    )

    @field_validator("families")
    @classmethod
    def _family_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return check_family_settings(value)  # a bundle's section is checked by its family's model, as a config's

    rubric: RubricConfig = Field(description="Reward terms.")
    episode: EpisodeConfig = Field(description="Budgets (the length term needs the token budget).")
    seeds: Seeds = Field(description="Episode, rollout, group and member seeds.")
    tool_calls: tuple[ToolCallRecord, ...] = Field(description="Every tool call with its outcome, in order.")
    answer: str | None = Field(description="The program graded.")
    answer_source: Literal["submit", "final"] | None = Field(description="Where the answer came from.")
    grading: TaskResult | None = Field(description="Per-test verdicts.")
    turns: int = Field(ge=0, description="Sampled turns.")
    trajectory: Trajectory = Field(description="The token-exact trajectory.")
    cuts: tuple[BundleCut, ...] = Field(
        (), description="Fields cut to fit the bundle's byte bound (replay reports the bundle as truncated)."
    )

    def comparable(
        self, field: str, recorded: str | None, other: str | None, other_field: str | None = None
    ) -> tuple[str | None, str | None]:
        """``recorded`` (this bundle's ``field``) and ``other`` (``other_field`` of this bundle, or a value from
        elsewhere) as a check compares them: as they are, or, when either field was cut, each as the marker of
        its original (size, sha256), so a cut field still matches its original and nothing else."""
        if self._cut(field) is None and (other_field is None or self._cut(other_field) is None):
            return recorded, other
        return self._original(field, recorded), self._original(other_field, other)

    def _cut(self, field: str | None) -> BundleCut | None:
        return next((cut for cut in self.cuts if cut.field == field), None)

    def _original(self, field: str | None, value: str | None) -> str | None:
        cut = self._cut(field)
        if cut is not None:
            return cut_marker(cut.bytes, cut.sha256)
        return None if value is None else cut_marker(len(to_json(value)), text_sha256(value))


def bundle_bound(config: ReplayConfig, sampled: int) -> int:
    """Bytes a bundle may spend on the fields its episode produced (module docstring)."""
    return min(config.bytes_floor + config.bytes_per_token * sampled, MAX_BUNDLE_BYTES // 2)


def _episode_fields(result: EpisodeResult) -> list[tuple[str, str]]:
    """The fields of ``result`` the bound covers, as (field, text). Not the tool call arguments (sampled, so
    bounded by the tokens) nor a final-channel answer (the trajectory's own text, which replay grades again)."""
    fields: list[tuple[str, str]] = []
    for position, record in enumerate(result.tool_calls):
        fields.append((f"tool_calls.{position}.outcome.output", record.outcome.output))
        if record.outcome.submitted is not None:
            fields.append((f"tool_calls.{position}.outcome.submitted", record.outcome.submitted))
    if result.answer is not None and result.answer_source != "final":
        fields.append(("answer", result.answer))
    if result.grading is not None:
        fields.append(("grading.detail", result.grading.detail))
        for position, test in enumerate(result.grading.tests):
            fields += [(f"grading.tests.{position}.detail", test.detail)]
            fields += [(f"grading.tests.{position}.output_head", test.output_head)]
    return fields


def bounded(result: EpisodeResult, bound: int) -> tuple[EpisodeResult, tuple[BundleCut, ...]]:
    """``result`` with its largest fields cut until what the bound covers fits in ``bound`` bytes of JSON
    (each field measured alone, before any bundle text exists), and the cuts made."""
    sized = [(len(to_json(text)), field, text) for field, text in _episode_fields(result)]
    total = sum(size for size, _, _ in sized)
    cuts: dict[str, BundleCut] = {}
    for size, field, text in sorted(sized, key=lambda item: (-item[0], item[1])):
        if total <= bound:
            break
        cut = BundleCut(field=field, bytes=size, sha256=text_sha256(text))
        cuts[field] = cut
        total += len(to_json(cut_marker(cut.bytes, cut.sha256))) - size
    if not cuts:
        return result, ()

    def text(field: str, value: str) -> str:
        cut = cuts.get(field)
        return value if cut is None else cut_marker(cut.bytes, cut.sha256)

    calls = tuple(
        record.model_copy(
            update={
                "outcome": record.outcome.model_copy(
                    update={
                        "output": text(f"tool_calls.{i}.outcome.output", record.outcome.output),
                        "submitted": None
                        if record.outcome.submitted is None
                        else text(f"tool_calls.{i}.outcome.submitted", record.outcome.submitted),
                    }
                )
            }
        )
        for i, record in enumerate(result.tool_calls)
    )
    grading = result.grading
    if grading is not None:
        tests = tuple(
            test.model_copy(
                update={
                    "detail": text(f"grading.tests.{i}.detail", test.detail),
                    "output_head": text(f"grading.tests.{i}.output_head", test.output_head),
                }
            )
            for i, test in enumerate(grading.tests)
        )
        grading = grading.model_copy(update={"detail": text("grading.detail", grading.detail), "tests": tests})
    answer = result.answer if result.answer is None else text("answer", result.answer)
    update = {"tool_calls": calls, "grading": grading, "answer": answer}
    return result.model_copy(update=update), tuple(cuts[f] for f in sorted(cuts))


class BundleBudget:
    """A run's disk for bundles (``ReplayConfig.run_bytes``): what its folder already holds counts; a bundle
    that does not fit is not written, and the skipped ones are counted (``figures``)."""

    def __init__(self, limit: int, folder: Path | None = None) -> None:
        self.limit = limit
        existing = sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else []
        self.used = sum(path.stat().st_size for path in existing)
        self.written = self.written_bytes = self.skipped = self.skipped_bytes = 0
        self.truncated = self.cut_fields = self.cut_bytes = 0

    def admit(self, size: int) -> bool:
        """Whether a bundle of ``size`` bytes may be written (it is then counted as written)."""
        if self.used + size > self.limit:
            if not self.skipped:
                log.warning(
                    "bundle disk budget spent (%d of replay.run_bytes %d): no more bundles this run; "
                    "skipped ones are counted in summary.json",
                    self.used,
                    self.limit,
                )
            self.skipped += 1
            self.skipped_bytes += size
            return False
        self.used += size
        self.written += 1
        self.written_bytes += size
        return True

    def count_cuts(self, cuts: tuple[BundleCut, ...]) -> None:
        """Tally a written bundle's cut fields."""
        if cuts:
            self.truncated += 1
            self.cut_fields += len(cuts)
            self.cut_bytes += sum(cut.bytes for cut in cuts)

    def figures(self) -> dict[str, int]:
        """What summary.json reports under ``bundles``."""
        return {
            "written": self.written,
            "written_bytes": self.written_bytes,
            "truncated": self.truncated,
            "cut_fields": self.cut_fields,
            "cut_bytes": self.cut_bytes,
            "skipped": self.skipped,
            "skipped_bytes": self.skipped_bytes,
            "run_bytes": self.limit,
        }


def bundle_reason(result: EpisodeResult, key: str, *, rate: float, failures: bool, seed: int) -> BundleReason | None:
    """Whether (and why) an episode gets a bundle: failures always (if asked), else a hash-chosen share."""
    if failures and result.failed:
        return "failure"
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return "sampled" if int.from_bytes(digest[:8], "big") / 2**64 < rate else None


def bundle_of(
    env: Environment, result: EpisodeResult, reason: BundleReason, digest: str, image: str | None = None
) -> Bundle:
    """The bundle of one finished episode of ``env`` (``image``: its workspace image, default the sandbox's),
    its episode's fields bounded by ``env.config.replay`` (``bounded``)."""
    config, trajectory = env.config, result.trajectory
    task = env.tasks[trajectory.task_id]
    result, cuts = bounded(result, bundle_bound(config.replay, trajectory.num_sampled))
    kind = kind_of(task)
    section = kind.settings  # the task's family's own settings, if it has any (swe, math)
    plugin = {kind.name: config.families[kind.name]} if kind.name in config.families else {}
    return Bundle(
        reason=reason,
        environment=env.name,
        tokenizer=config.tokenizer,
        task=task,
        **({section: getattr(config, section)} if section else {}),
        families=plugin,
        image=config.sandbox.image if image is None else image,
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
        cuts=cuts,
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
