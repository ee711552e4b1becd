"""Math tasks and the three row forms they are read from.

Rows, read as published::

    gsm8k        {"question": str, "answer": "...reasoning...\\n#### 1,234"}       gold: after the last ####
    competition  {"problem": str, "solution": "... \\boxed{\\frac{1}{2}} ...",
                  "level": str, "type": str}                                      gold: the last \\boxed{...}
    plain        {"problem": str, "answer": str}                                   gold: the answer as written

An ``id``, ``task_id`` or ``unique_id`` field names the task, else its row index does. ``format="math"``
tells the three apart by their fields (``question`` means GSM8K, ``solution`` without ``answer``
means MATH). A row whose gold cannot be found (no ``####``, no ``\\boxed``, unbalanced braces, an
empty gold) raises ``MalformedRow``; the loader skips it and reports why.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import MalformedRow
from tasks.formats import field

MathForm = Literal["gsm8k", "competition", "plain"]
ID_KEYS = ("id", "task_id", "unique_id")


class MathTask(BaseModel):
    """A question whose answer is one mathematical value, checked against ``gold`` on the host."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["math"] = Field("math", description="tells a math task from a CP task in a bundle")
    task_id: str = Field(description="the row's own id (stringified), or its index when it has none")
    source_format: MathForm = Field(description="the row form it was read from")
    problem: str = Field(min_length=1, description="the question shown to the policy")
    gold: str = Field(min_length=1, description="the reference answer (LaTeX or plain), never shown to the policy")
    solution: str = Field("", description="the row's worked solution, if it has one (never shown)")


def form_of(row: dict[str, Any]) -> MathForm | None:
    """The row form whose fields ``row`` has, or None."""
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row and "solution" in row and "answer" not in row:
        return "competition"
    if "problem" in row and "answer" in row:
        return "plain"
    return None


def looks_like(row: dict[str, Any]) -> bool:
    return form_of(row) is not None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, nested braces kept whole.

    None when there is none; ``MalformedRow`` when its braces never close.
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0 or text[start:brace].strip() not in ("\\boxed", "\\fbox"):
        return None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{" and text[i - 1] != "\\":
            depth += 1
        elif text[i] == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i]
    raise MalformedRow(f"solution: the last \\boxed{{ opened at character {start} never closes")


def gsm8k_gold(answer: str) -> str:
    """The number after the last ``####`` of a GSM8K answer, thousands separators dropped."""
    if "####" not in answer:
        raise MalformedRow("answer: no '#### N' line holds the gold")
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        raise MalformedRow("answer: nothing after '####'")
    return gold


def parse(index: int, row: dict[str, Any], name: str = "math") -> MathTask:
    """The task of one row in any of the three forms (``name``: a form, or ``math`` to tell it by fields)."""
    form = form_of(row) if name == "math" else name
    if form is None:
        raise MalformedRow(
            f"no math row form fits fields {sorted(row)[:8]} (need question/answer, problem/solution or problem/answer)"
        )
    task_id = field.task_id(row, ID_KEYS, index)
    if form == "gsm8k":
        question, answer = field.get(row, "question", str), field.get(row, "answer", (str, int, float))
        if not isinstance(answer, str):  # a re-export that kept only the final number: it is the gold
            return MathTask(
                task_id=task_id, source_format=form, problem=_text(question, "question"), gold=_number(answer)
            )
        return MathTask(
            task_id=task_id,
            source_format=form,
            problem=_text(question, "question"),
            gold=gsm8k_gold(answer),
            solution=answer.rsplit("####", 1)[0].strip(),
        )
    problem = _text(field.get(row, "problem", str), "problem")
    if form == "competition":
        solution = field.get(row, "solution", str)
        gold = last_boxed(solution)
        if gold is None:
            raise MalformedRow("solution: no \\boxed{...} holds the gold")
        return MathTask(
            task_id=task_id, source_format=form, problem=problem, gold=_text(gold, "\\boxed{}"), solution=solution
        )
    answer = field.get(row, "answer", (str, int, float))
    gold = _text(answer, "answer") if isinstance(answer, str) else _number(answer)
    return MathTask(task_id=task_id, source_format="plain", problem=problem, gold=gold)


def _number(value: int | float) -> str:
    """The gold of an answer given as a JSON number: ``72``, ``0.5``, ``72.0`` read as ``72``."""
    if isinstance(value, bool):
        raise MalformedRow("answer: a boolean is not a mathematical answer")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise MalformedRow(f"answer: {value!r} is not a finite number")
        if value.is_integer():
            return str(int(value))
    return str(value)


def _text(value: str, path: str) -> str:
    if not value.strip():
        raise MalformedRow(f"{path} is empty")
    return value.strip()
