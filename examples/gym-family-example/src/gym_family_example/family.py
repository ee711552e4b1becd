"""The ``letters`` family: what differs from every other family, and nothing else (tasks.family's seam).

The answer is the final-channel message (``answer``: the gym offers the calculator tools of a workspace of its
warm pool, as for math); it passes when, stripped of spaces (and of case, unless the settings say ``case: exact``),
it is the word's letters in order. Its own settings (`LettersSettings`) are the ``families: {letters: ...}`` section
of an environment or of the sandbox service's ``grade``, checked by the gym against this model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_family_example.rows import LettersTask
from sandbox.failure import Verdict
from tasks.family import FamilyKind, FamilyResources, PooledFamily, WorkspaceSource
from tasks.result import TaskResult, TestResult


class LettersSettings(BaseModel):
    """The ``letters`` family's own settings."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    case: Literal["ignore", "exact"] = "ignore"
    """ignore: ``ABNN`` passes for ``abnn``; exact: the answer's letters must be lowercase, as the word's are."""
    max_answer_chars: int = Field(1000, ge=1, le=100_000)
    """Characters of the answer read; the rest is ignored."""


INSTRUCTIONS = "Sort the letters of the word alphabetically. Give only the sorted letters on the final channel."


class LettersKind(FamilyKind):
    name = "letters"
    task_types = (LettersTask,)
    answer = "answer"
    instructions = "letters_instructions"  # no field of the gym's prompt settings: `instructions_of` gives the text
    formats = {"letters": "gym_family_example.rows"}
    settings_model = LettersSettings

    def instructions_of(self, prompt: object) -> str:
        return INSTRUCTIONS

    def task_text(self, task: LettersTask) -> str:
        return f"Word: {task.word}"

    def final_answer(self, task: LettersTask, text: str) -> str:
        return text

    def describe(self, task: LettersTask) -> str:
        return f"letters, {len(task.word)} letters"

    def reference(self, task: LettersTask, completion: str | None) -> str:
        return task.gold if completion is None else completion

    def wrong_answer(self, task: LettersTask) -> str:
        return task.gold[::-1] + "z"

    def demo_text(self, task: LettersTask, reference: str) -> str:
        return reference

    def family(self, tasks: Sequence[LettersTask], resources: FamilyResources) -> LettersFamily:
        return LettersFamily(resources.pool, resources.settings or LettersSettings())


LETTERS = LettersKind()


class LettersFamily(PooledFamily):
    kind = LETTERS

    def __init__(self, pool: WorkspaceSource, settings: LettersSettings) -> None:
        super().__init__(pool)
        self.settings = settings

    async def grade(self, task: LettersTask, answer: str) -> TaskResult:
        start = time.monotonic()
        given = "".join(answer[: self.settings.max_answer_chars].split())
        given = given.lower() if self.settings.case == "ignore" else given
        right = given == task.gold
        verdict = Verdict.PASSED if right else Verdict.WRONG_ANSWER
        detail = "" if right else f"{given[:60]!r} is not the word's letters in order"
        return TaskResult(
            task_id=task.task_id,
            passed=right,
            fraction=float(right),
            tests=(TestResult(index=0, verdict=verdict, detail=detail),),
            detail=detail,
            wall_s=time.monotonic() - start,
        )
