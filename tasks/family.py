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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Protocol, runtime_checkable

from sandbox.on_demand import on_demand
from tasks.result import TaskResult
from tasks.submission import Submission, extract_code
from tasks.task import Task


class WorkspaceSource(Protocol):
    """Hands out one fresh workspace per ``acquire`` (``sandbox.pool.WorkspacePool``)."""

    def acquire(self, owner: str = ...) -> AbstractAsyncContextManager[Any]: ...


class TaskGrader(Protocol):
    """Grades a program in a fresh container (``tasks.grader.Grader``)."""

    async def grade(self, task: Task, submission: Submission) -> TaskResult: ...


@runtime_checkable
class TaskFamily(Protocol):
    """One kind of task, end to end (see the module docstring)."""

    name: str

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


def code_task_text(task: Task) -> str:
    """The user message of a CP task: its statement, plus starter code and the function to define."""
    parts = [task.prompt.rstrip()]
    if task.starter_code and task.starter_code.strip() not in task.prompt:
        parts.append(f"Start from this code:\n```python\n{task.starter_code.rstrip()}\n```")
    if task.fn_name and task.kind != "stdin":
        parts.append(f"Your program must define `{task.fn_name}`; submit the whole program.")
    return "\n\n".join(parts)


class PooledFamily:
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


class CodeFamily(PooledFamily):
    """Competitive-programming tasks: one warm pool, the submitted program, the unit-test grader."""

    name = "cp"

    def __init__(self, pool: WorkspaceSource, grader: TaskGrader) -> None:
        super().__init__(pool)
        self.grader = grader

    def owns(self, task: object) -> bool:
        return isinstance(task, Task)

    def task_text(self, task: Task) -> str:
        return code_task_text(task)

    def final_answer(self, task: Task, text: str) -> str:
        return extract_code(text)

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
