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

from tasks.family import PooledFamily, WorkspaceSource
from tasks.math.grader import MathGrader
from tasks.math.problem import MathTask
from tasks.result import TaskResult


def math_task_text(task: MathTask) -> str:
    """The user message of a math task: its problem."""
    return task.problem


class MathFamily(PooledFamily):
    """Math answer tasks end to end (see the module docstring)."""

    name = "math"

    def __init__(self, pool: WorkspaceSource, grader: MathGrader) -> None:
        super().__init__(pool)
        self.grader = grader

    def owns(self, task: object) -> bool:
        return isinstance(task, MathTask)

    def task_text(self, task: MathTask) -> str:
        return math_task_text(task)

    def final_answer(self, task: MathTask, text: str) -> str:
        return text  # whole: a reply's code blocks or several answers must not pick one for it

    async def grade(self, task: MathTask, answer: str) -> TaskResult:
        return await self.grader.grade(task, answer)
