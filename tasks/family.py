"""Task families: the one seam between the gym and a kind of task.

A family says, for the tasks it owns, how a task is shown to the policy
(``task_text``), where it is worked on (``workspace``: a fresh, prepared
workspace per episode), what the answer is once the episode ends
(``answer``: read from the workspace before it is released), and how the
answer is graded into one ``TaskResult`` with per-test verdicts (``grade``:
in a fresh container the candidate never saw). The gym's episodes, rollout
workers, bundles and the rubric go through this seam only.

Three families:

* ``CodeFamily`` (``cp``): competitive-programming ``Task``s. The workspace
  comes from one warm pool of the runner image at the episode's first tool
  call (``sandbox.on_demand``), the answer is the program
  handed to ``submit`` (or the final answer's code block), graded by
  ``tasks.grader.Grader``.
* ``tasks.swe.family.SweFamily`` (``swe``): SWE-bench/SWE-Gym instances. The
  workspace is a container of the instance's image with the repository at
  ``/workspace/repo``, the answer is the diff of that repository (taken in a
  fresh container, never through the agent's ``.git``), graded by
  ``tasks.swe.grader.SweGrader``.

* ``tasks.math.family.MathFamily`` (``math``): GSM8K, MATH and plain math rows.
  The answer is the final-channel message whole, checked with math-verify on
  the host (`tasks.math.grader`).

``Families`` routes each task to its family and opens and closes the
families' resources (``async with families.opened(): ...``).

Each family has a ``FamilyKind``: what it is without holding anything (the task types it owns, the
user message of a task, the tools it offers, what a final-channel message hands in, the reference a
scripted policy or a warm-start demo works from, the settings a bundle records, how a replay builds the
family again). Code that holds no family, the prompt, the scripted policies, bundles, replay, the warm
start, asks the kind of a task (``tasks.families.kind_of``) and never tests the task's type. The family
classes take the same answers from their kind, so both halves agree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from sandbox.config import SandboxConfig
from sandbox.on_demand import on_demand
from tasks.result import TaskResult
from tasks.submission import Submission, extract_code, program
from tasks.task import Task


class WorkspaceSource(Protocol):
    """Hands out one fresh workspace per ``acquire`` (``sandbox.pool.WorkspacePool``; ``keys``: its disjoint
    recycling)."""

    def acquire(self, owner: str = ..., keys: frozenset[str] | None = ...) -> AbstractAsyncContextManager[Any]: ...


class TaskGrader(Protocol):
    """Grades a program in a fresh container (``tasks.grader.Grader``)."""

    async def grade(self, task: Task, submission: Submission) -> TaskResult: ...


@runtime_checkable
class TaskFamily(Protocol):
    """One kind of task, end to end (see the module docstring)."""

    name: str
    kind: FamilyKind

    def owns(self, task: object) -> bool:
        """Whether ``task`` is one of this family's tasks."""
        ...

    def task_text(self, task: Any) -> str:
        """The user message that states the task."""
        ...

    def workspace(self, task: Any, owner: str) -> AbstractAsyncContextManager[Any]:
        """A fresh workspace prepared for ``task``; released (destroyed) when the block exits."""
        ...

    def pool_for(self, task: Any) -> WorkspaceSource:
        """The pool ``task``'s workspaces come from (its image is what a replay bundle records)."""
        ...

    def final_answer(self, task: Any, text: str) -> str:
        """What a final-channel message hands in (CP: its last code block; math: the whole text)."""
        ...

    async def answer(self, task: Any, ws: Any, submitted: str | None) -> str | None:
        """The answer to grade, read before ``ws`` is released; ``submitted`` is what the policy handed in.

        Returns None when there is nothing to grade. Raises ``ValueError`` when the answer cannot be
        taken because of what the candidate did (scored: nothing graded) and ``InfraError`` when the
        sandbox failed (masked).
        """
        ...

    async def grade(self, task: Any, answer: str) -> TaskResult:
        """The answer's grade, in a fresh container; an infrastructure failure is ``infra_error``."""
        ...

    def opened(self) -> AbstractAsyncContextManager[None]:
        """Holds what the family needs while episodes run (image builds, per-image pools)."""
        ...


def submission_for(task: Task, program_text: str) -> Submission:
    """The submission whose graded program is ``program_text`` (a HumanEval prompt is not prepended twice)."""
    prefix = task.completion_prefix
    completion = program_text[len(prefix) :] if prefix and program_text.startswith(prefix) else program_text
    return Submission(task_id=task.task_id, completion=completion)


# What the answer of a family's tasks is, which decides the tools it is offered (``gym.tools.Toolbox`` kind) and
# how replay names it: ``program`` (handed to ``submit``, or a final answer's code block), ``repository`` (the
# repository's diff; ``submit`` takes nothing), ``answer`` (the final-channel message; no ``submit`` offered).
AnswerKind = Literal["program", "repository", "answer"]


class Finding(Protocol):
    """A loaded task its family cannot grade, and why (math: a gold the check cannot read)."""

    task_id: str
    reason: str


@dataclass(frozen=True)
class FamilyResources:
    """What the gym hands a kind to build its family (``FamilyKind.family``); opened and closed elsewhere."""

    pool: WorkspaceSource  # the warm pool of the runner image: CP and math workspaces
    grader: TaskGrader  # the program grader on that pool
    sandbox: SandboxConfig  # the environment's (or a bundle's) sandbox configuration
    settings: Any = None  # the family's own settings section (``FamilyKind.settings``); None: its defaults
    repos_dirs: Mapping[str, Path | None] = field(default_factory=dict)  # task id -> its pool's repos_dir (SWE)


class FamilyKind(ABC):
    """What a family is, without holding anything (see the module docstring): one instance per family,
    registered in ``tasks.families``."""

    name: ClassVar[str]  # the family's name ("cp", "swe", "math")
    task_types: ClassVar[tuple[type, ...]]  # the task classes it owns
    answer: ClassVar[AnswerKind]  # what its answer is (``AnswerKind``)
    instructions: ClassVar[str]  # the field of the environment's prompt settings with its developer instructions
    settings: ClassVar[str | None] = None  # the environment's (and a bundle's) section of its own settings
    # a plugin's own settings: the pydantic model of its section under ``families: {NAME: ...}`` of an environment,
    # a bundle, the sandbox service's ``grade`` (`tasks.families.check_family_settings`); None: it takes none
    settings_model: ClassVar[type[BaseModel] | None] = None
    takes_solutions: ClassVar[bool] = True  # whether a pool's solutions file gives its tasks' references
    # a plugin's row formats: format name -> module with looks_like(row) and parse(index, row, name) (`tasks.plugins`;
    # the shipped families' formats are `tasks.formats.registry.FORMATS`)
    formats: ClassVar[dict[str, str]] = {}

    def owns(self, task: object) -> bool:
        """Whether ``task`` is one of this family's tasks."""
        return isinstance(task, self.task_types)

    def instructions_of(self, prompt: object) -> str:
        """The developer instructions of this family's prompt: the field ``instructions`` names of the environment's
        prompt settings (a plugin, whose field the settings do not have, returns its own text)."""
        return getattr(prompt, self.instructions)

    def settings_of(self, holder: object) -> Any:
        """This family's settings section of ``holder`` (an environment's configuration, a bundle); None when the
        family has none or there is no holder (its defaults). A plugin's (``settings_model``) is read from the
        holder's ``families`` mapping and validated by its model: its defaults where the holder has none."""
        if self.settings_model is not None:
            sections = getattr(holder, "families", None) or {}
            return self.settings_model.model_validate(sections.get(self.name, {}))
        return getattr(holder, self.settings) if self.settings and holder is not None else None

    @abstractmethod
    def task_text(self, task: Any) -> str:
        """The user message that states the task."""

    def final_answer(self, task: Any, text: str) -> str:
        """What a final-channel message hands in: its last code block (math: the whole text)."""
        return extract_code(text)

    @abstractmethod
    def describe(self, task: Any) -> str:
        """``family-or-format, detail`` of a task, as a transcript heads it (``gym show``)."""

    @abstractmethod
    def reference(self, task: Any, completion: str | None) -> str | None:
        """The reference answer a scripted policy works through the tools (None: the task has none);
        ``completion``: the pool's solutions file's for the task, if any (``takes_solutions``)."""

    def wrong_answer(self, task: Any) -> str | None:
        """An answer that is never right (``scripted:wrong``); None: the task is answered as ``scripted:empty``."""
        return None

    def demo_text(self, task: Any, reference: str) -> str:
        """The final-channel message of a warm-start demo that hands in ``reference``."""
        return f"```python\n{reference}\n```"

    def usable(self, tasks: Sequence[Any], settings: Any, source: str) -> tuple[list[Any], list[Finding]]:
        """``(the tasks it can grade, a finding for each other one)``, the findings logged as skipped tasks of
        ``source``."""
        return list(tasks), []

    def ungradable(self, tasks: Sequence[Any], settings: Any = None) -> list[Finding]:
        """A finding for each of ``tasks`` the family cannot grade (nothing logged)."""
        return []

    @abstractmethod
    def family(self, tasks: Sequence[Any], resources: FamilyResources) -> TaskFamily | None:
        """The family of an environment whose pool holds ``tasks`` of this kind (None: it needs none)."""

    def replay_family(self, task: Any, resources: FamilyResources, image: str) -> TaskFamily:
        """The family that replays a bundle of ``task`` whose workspace image was ``image``."""
        family = self.family([task], resources)
        assert family is not None, f"the {self.name} family of a task it owns"
        return family


class BaseFamily:
    """What every family takes from its kind: its name, the tasks it owns, a task's text, a final answer."""

    kind: ClassVar[FamilyKind]

    @property
    def name(self) -> str:
        return self.kind.name

    def owns(self, task: object) -> bool:
        return self.kind.owns(task)

    def task_text(self, task: Any) -> str:
        return self.kind.task_text(task)

    def final_answer(self, task: Any, text: str) -> str:
        return self.kind.final_answer(task, text)


class PooledFamily(BaseFamily):
    """What families whose workspaces come from one shared warm pool have in common (CP, math): a workspace
    from the pool, started at the episode's first tool call, the handed-in text as the answer, nothing to open."""

    def __init__(self, pool: WorkspaceSource) -> None:
        self.pool = pool

    def workspace(self, task: Any, owner: str) -> AbstractAsyncContextManager[Any]:
        # Started at the first tool call: the answer is the handed-in text, so an episode that calls no tool
        # needs no container (sandbox/on_demand.py).
        return on_demand(self.pool, owner=owner)

    def pool_for(self, task: Any) -> WorkspaceSource:
        return self.pool

    async def answer(self, task: Any, ws: Any, submitted: str | None) -> str | None:
        return submitted

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        yield


class CodeKind(FamilyKind):
    """Competitive-programming tasks: a program is the answer."""

    name = "cp"
    task_types = (Task,)
    answer = "program"
    instructions = "instructions"

    def task_text(self, task: Task) -> str:
        """The statement, plus starter code and the function to define."""
        parts = [task.prompt.rstrip()]
        if task.starter_code and task.starter_code.strip() not in task.prompt:
            parts.append(f"Start from this code:\n```python\n{task.starter_code.rstrip()}\n```")
        if task.fn_name and task.kind != "stdin":
            parts.append(f"Your program must define `{task.fn_name}`; submit the whole program.")
        return "\n\n".join(parts)

    def describe(self, task: Task) -> str:
        return f"{task.source_format}, {task.kind}"

    def reference(self, task: Task, completion: str | None) -> str | None:
        """A solutions-file completion made a program as the grader makes one (``tasks.submission.program``: code
        extracted, a HumanEval prompt prepended), else the row's first solution (a whole program already)."""
        if completion is not None:
            return program(task, Submission(task_id=task.task_id, completion=completion))
        return task.solutions[0] if task.solutions else None

    def family(self, tasks: Sequence[Task], resources: FamilyResources) -> CodeFamily:
        return CodeFamily(resources.pool, resources.grader)


CODE = CodeKind()


class CodeFamily(PooledFamily):
    """Competitive-programming tasks: one warm pool, the submitted program, the unit-test grader."""

    kind = CODE

    def __init__(self, pool: WorkspaceSource, grader: TaskGrader) -> None:
        super().__init__(pool)
        self.grader = grader

    async def grade(self, task: Task, answer: str) -> TaskResult:
        return await self.grader.grade(task, submission_for(task, answer))


class UnknownTask(TypeError):
    """A task no family owns (a programming error: environments only hold tasks of their families)."""


class Families:
    """The families of an environment; routes each task to the family that owns it."""

    def __init__(self, families: Sequence[TaskFamily]) -> None:
        if not families:
            raise ValueError("need at least one task family")
        self.families = tuple(families)
        self._open = False

    def of(self, task: object) -> TaskFamily:
        for family in self.families:
            if family.owns(task):
                return family
        raise UnknownTask(f"no task family owns a {type(task).__name__}")

    def named(self, name: str) -> TaskFamily | None:
        return next((f for f in self.families if f.name == name), None)

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Families]:
        """Open every family for the block; inside a block that holds them open already, a no-op.

        Whoever runs episodes concurrently over a longer span (the trainer, ``collect``) holds them open
        around all of it, so that per-call ``opened()`` blocks nest instead of closing what others use.
        """
        if self._open:
            yield self
            return
        async with AsyncExitStack() as stack:
            for family in self.families:
                await stack.enter_async_context(family.opened())
            self._open = True
            try:
                yield self
            finally:
                self._open = False
