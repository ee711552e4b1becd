"""``POST /v1/grade`` of the sandbox service: one dataset row and one answer in, its grade out.

The row is in any format the loader reads (`tasks.loader.formats`: CP rows with their hidden tests, TACO/APPS,
CodeContests, LiveCodeBench, HumanEval, MBPP, Nemotron, verl rows, math rows of GSM8K, MATH or plain
problem/answer, and the formats of installed task family plugins), recognised from its fields unless ``format``
names one. A CP answer is a program, or a reply whose last Python block is one; it is graded by
`tasks.grader.Grader` in a fresh container, the hidden tests' expected outputs never entering it. A math answer is
read from the reply as every adapter of the gym reads it (`gym.integrations.ground_truth.final_answer`: what it
boxes, two different boxes a hedge; else what follows ``####``; else the whole reply) and checked against the gold
on the host (`tasks.math.grader`). A plugin family's answer is what the family reads of a final-channel message,
graded by the family with its settings (``grade.families``; `tasks.families.grade_with_family`). Grading is
`gym.integrations.scorer.Scorer`'s: a sample the sandbox failed is graded again, then masked (``reward`` null,
``masked`` true), never a 0.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym.integrations.ground_truth import final_answer
from gym.integrations.scorer import Score
from tasks.errors import MalformedRow
from tasks.families import is_plugin, kind_of
from tasks.loader import detect_format, formats
from tasks.math.family import MATH
from tasks.math.problem import MathTask
from tasks.task import Task


class GradeRequest(BaseModel):
    """One row and one answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    row: dict[str, Any] = Field(description="a dataset row, with its hidden tests (CP) or its gold (math)")
    format: str = Field(
        "auto", description="the row's format; auto: recognised from its fields; or an installed task family's format"
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        known = ["auto", *formats()]
        if value not in known:
            raise ValueError(f"unknown format {value[:80]!r}; known: {', '.join(known)}")
        return value

    answer: str = Field(description="the model's response: a program or a reply holding one, or a math reply")


class GradeResponse(BaseModel):
    """The grade, as every adapter of the gym reports it (`gym.integrations.scorer.Score`)."""

    task_id: str
    format: str = Field(description="the format the row was read in")
    family: str = Field(description="the task family that graded it: cp, math or an installed family's name")
    reward: float | None = Field(description="1.0 when every test passes (math: the answer is the gold), else 0.0; "
                                 "null: masked, the sandbox or the host failed")  # fmt: skip
    masked: bool
    passed: bool
    fraction: float = Field(description="fraction of the tests passed")
    verdict: str = Field(description="passed, the first failing test's verdict, refused, infra_error")
    reason: str = ""


class BadRow(ValueError):
    """A row no format reads, or that its format refuses; the message names why."""


def task_of(request: GradeRequest) -> tuple[Task | MathTask, str]:
    """The task ``request.row`` holds and the format it was read in; `BadRow` when it holds none."""
    name = detect_format(request.row) if request.format == "auto" else request.format
    if name is None:
        raise BadRow(f"the row matches no known format (fields: {sorted(request.row)[:12]}); name one in `format`")
    try:
        task = importlib.import_module(formats()[name]).parse(0, request.row, name)
        task.model_dump_json()  # a lone surrogate loads, then fails every later write of the task
    except MalformedRow as exc:
        raise BadRow(f"{name} row: {exc}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # pydantic validation, nesting
        raise BadRow(f"{name} row: {type(exc).__name__}: {str(exc).splitlines()[0][:500]}") from None
    return task, name


def answer_of(task: Task | MathTask, answer: str) -> str:
    """What is graded of ``answer``: a CP answer whole (the grader takes its last Python block), a math reply's
    final answer, what a plugin family reads of a final-channel message (`FamilyKind.final_answer`)."""
    if kind_of(task) is MATH:
        return final_answer(answer)
    return kind_of(task).final_answer(task, answer) if is_plugin(task) else answer


def response_of(task: Task | MathTask, name: str, score: Score) -> GradeResponse:
    return GradeResponse(
        task_id=task.task_id,
        format=name,
        family=kind_of(task).name,
        reward=score.reward,
        masked=score.masked,
        passed=score.passed,
        fraction=score.fraction,
        verdict=score.verdict,
        reason=score.reason,
    )
