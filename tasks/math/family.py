"""Math tasks as a task family (`tasks.family`).

* **Task text**: the problem as written; the instructions (the environment's ``math_instructions``)
  ask for the answer alone on the final channel.
* **Workspace**: one from the CP warm pool, so the offered tools (``python``, ``bash``: a calculator)
  work as they do for code; nothing in it is read back.
* **Answer**: the final-channel message, whole. ``submit`` is not offered to math tasks
  (``gym.tools`` kind ``answer``), so the answer is always what the policy said, never a file.
* **Grade**: `tasks.math.grader.MathGrader` on the host (math-verify in a child process under a
  deadline): one test, ``passed`` when the answer is equivalent to the gold.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.family import FamilyKind, FamilyResources, Finding, PooledFamily, WorkspaceSource
from tasks.math.golds import readable, unread_golds
from tasks.math.grader import MathGrader, MathGraderConfig
from tasks.math.problem import MathTask
from tasks.result import TaskResult


class MathKind(FamilyKind):
    """Math answer tasks: the final-channel message is the answer."""

    name = "math"
    task_types = (MathTask,)
    answer = "answer"
    instructions = "math_instructions"
    settings = "math"

    def task_text(self, task: MathTask) -> str:
        """The problem as written."""
        return task.problem

    def final_answer(self, task: MathTask, text: str) -> str:
        return text  # whole: a reply's code blocks or several answers must not pick one for it

    def describe(self, task: MathTask) -> str:
        return f"math, {task.source_format}"

    def reference(self, task: MathTask, completion: str | None) -> str:
        """The solutions file's answer, else the gold."""
        return task.gold if completion is None else completion

    def wrong_answer(self, task: MathTask) -> str:
        """The gold plus one: never the gold."""
        return f"{task.gold} + 1"

    def demo_text(self, task: MathTask, reference: str) -> str:
        return reference  # the final message itself: no code block around it

    def usable(
        self, tasks: Sequence[MathTask], settings: MathGraderConfig | None, source: str
    ) -> tuple[list[MathTask], list[Finding]]:
        """Every task but those whose gold the check cannot grade against (`tasks.math.golds`)."""
        return readable(tasks, settings, source)

    def ungradable(self, tasks: Sequence[MathTask], settings: MathGraderConfig | None = None) -> list[Finding]:
        return list(unread_golds(tasks, settings))

    def family(self, tasks: Sequence[MathTask], resources: FamilyResources) -> MathFamily:
        return MathFamily(resources.pool, MathGrader(resources.settings or MathGraderConfig()))


MATH = MathKind()


class MathFamily(PooledFamily):
    """Math answer tasks end to end (see the module docstring)."""

    kind = MATH

    def __init__(self, pool: WorkspaceSource, grader: MathGrader) -> None:
        super().__init__(pool)
        self.grader = grader

    async def grade(self, task: MathTask, answer: str) -> TaskResult:
        return await self.grader.grade(task, answer)
