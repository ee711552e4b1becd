"""An environment: task pool + tools + prompt in its chat format + rubric + sandbox (`gym.environment_config`
defines one in YAML or TOML, `gym.task_stream` draws its tasks).

The chat format (``chat_format``, `gym.format.chat_format`) decides how the prompt is written: in Harmony, a
system message (identity, reasoning, channels), a developer message (instructions, then the tools as a
TypeScript namespace) and the task; in a model family's format, a system message (identity, then the
instructions) and the task, rendered by the model's chat template with the tools' JSON schemas
(`format_for(task)`: the format bound to the task's tools).
"""

from __future__ import annotations

import json
from pathlib import Path

from gym.environment_config import EnvironmentConfig, EnvironmentConfigError, FilePool, MixturePool
from gym.format.chat_format import ChatFormat, ChatFormatError, detect_chat_format, load_chat_format
from gym.format.harmony import Harmony
from gym.format.message import Message
from gym.format.prompt import SystemPrompt, developer_message, system_message
from gym.format.tokenizer import Tokenizer, load_tokenizer
from gym.task_stream import TaskStream, leaf_pools, load_pool
from gym.tools import Toolbox
from policies.sampling import SamplingParams
from tasks.families import KINDS, AnyTask, kind_of
from tasks.family import Families, FamilyResources, Finding, TaskGrader, WorkspaceSource
from tasks.submission import read_submissions


class Environment:
    """A loaded environment: its tasks, tokenizer, chat format, tools and the prompt it shows."""

    def __init__(self, config: EnvironmentConfig, tokenizer: Tokenizer | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer or load_tokenizer(config.tokenizer)
        self.harmony = Harmony(self.tokenizer)  # the Harmony codec (self-play and the verifier speak it)
        self.chat_format = self._chat_format()
        self._bound: dict[str, ChatFormat] = {}  # a family's format per kind of toolbox
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

    def _chat_format(self) -> ChatFormat:
        config = self.config
        try:
            name = detect_chat_format(config.tokenizer) if config.chat_format == "auto" else config.chat_format
            return self.harmony if name == "harmony" else load_chat_format(name, self.tokenizer, config.tokenizer)
        except ChatFormatError as exc:
            raise EnvironmentConfigError(
                f"{config.name}: chat_format {config.chat_format} with tokenizer {config.tokenizer}: {exc}"
            ) from None

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
        """Harmony: system, developer (the task family's instructions and tool schemas) and user (the task)
        messages; a model family's format: system (identity and instructions) and user (the tools are the
        template's to render: `format_for`)."""
        prompt = self.config.prompt
        instructions = kind_of(task).instructions_of(prompt)
        if self.chat_format is not self.harmony:
            system = "\n\n".join(part for part in (prompt.model_identity, instructions) if part)
            return [Message.system(system), Message.user(task_text(task))]
        system = system_message(SystemPrompt(model_identity=prompt.model_identity, reasoning=prompt.reasoning))
        return [system, developer_message(instructions, self.toolbox_for(task).specs()), Message.user(task_text(task))]

    def format_for(self, task: AnyTask) -> ChatFormat:
        """The chat format an episode of ``task`` is written in: Harmony as is (its tools are in the developer
        message), a model family's format bound to the task's tools (its template renders them)."""
        if self.chat_format is self.harmony:
            return self.harmony
        kind = kind_of(task).answer
        if kind not in self._bound:
            self._bound[kind] = self.chat_format.bind(self.toolbox_for(task).specs())
        return self._bound[kind]

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
            if isinstance(pool_config, FilePool)
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
            stop_token_ids=tuple(self.chat_format.stop_ids()),
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
