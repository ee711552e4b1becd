"""The ``letters`` family: what differs from every other family, and nothing else (tasks.family's seam).

The answer is the final-channel message (``answer``: the gym offers the calculator tools of a workspace of its
warm pool, as for math); it passes when, stripped of spaces and case, it is the word's letters in order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gym_family_example.rows import LettersTask
from sandbox.failure import Verdict
from tasks.family import FamilyKind, FamilyResources, PooledFamily
from tasks.result import TaskResult, TestResult

INSTRUCTIONS = "Sort the letters of the word alphabetically. Give only the sorted letters on the final channel."


class LettersKind(FamilyKind):
    name = "letters"
    task_types = (LettersTask,)
    answer = "answer"
    instructions = "letters_instructions"  # no field of the gym's prompt settings: `instructions_of` gives the text
    formats = {"letters": "gym_family_example.rows"}

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
        return LettersFamily(resources.pool)


LETTERS = LettersKind()


class LettersFamily(PooledFamily):
    kind = LETTERS

    async def grade(self, task: LettersTask, answer: str) -> TaskResult:
        start = time.monotonic()
        given = "".join(answer.split()).lower()[:1000]
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
