"""Step-labelled solutions (PRM800K-style rows) for the process verifier, and their held-out split.

One row per solution, in a local JSONL file::

    {"id": "arith-17", "problem": "Compute 3 * 7 + 5.", "steps": ["3 * 7 = 21", "21 + 5 = 26"],
     "labels": [1, 1], "source": "arithmetic"}

``labels[k]`` rates ``steps[k]`` (``len(labels) == len(steps)``); ``source`` is optional. Two label
schemes, chosen by the reader (`LabelScheme`), never guessed from the values:

    binary    1 = the step is correct, 0 = it is wrong (what `tasks.step_samples` and self-play write)
    prm800k   PRM800K's ratings: +1 correct, -1 wrong, 0 neutral; a neutral step reads as correct,
              wrong or unscored (``neutral``; the default: correct)

Convention for the first error (what the shipped generator writes): the steps before the first wrong
step are 1, the first wrong step and every step after it are 0, since a step that builds on a wrong
result does not give a correct one even when its own arithmetic holds.

A row that does not fit (not a JSON object, a field missing or of the wrong type, an empty step,
lengths that differ, a label outside the scheme, an id seen before) is skipped and counted under its
reason; a file that cannot be read at all is a `SourceError`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import MalformedRow, SourceError


class LabelScheme(BaseModel):
    """How the integers of a row's ``labels`` read."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    scheme: Literal["binary", "prm800k"] = "binary"
    """binary: 1 correct, 0 wrong. prm800k: +1 correct, -1 wrong, 0 neutral (read per `neutral`)."""
    neutral: Literal["correct", "wrong", "unscored"] = "correct"
    """prm800k only: a neutral (0) step counts as correct, as wrong, or is shown but neither trained
    on nor scored."""

    def read(self, value: int) -> int | None:
        """The binary label (1 correct, 0 wrong) of one raw label, None for an unscored step;
        MalformedRow for a value outside the scheme."""
        allowed = (0, 1) if self.scheme == "binary" else (-1, 0, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            hint = "; PRM800K ratings need `labels: {scheme: prm800k}`" if value == -1 else ""
            raise MalformedRow(f"label {value!r} is not one of {list(allowed)} ({self.scheme} scheme){hint}")
        if self.scheme == "binary":
            return value
        if value == 0:
            return {"correct": 1, "wrong": 0, "unscored": None}[self.neutral]
        return 1 if value == 1 else 0


class StepRow(BaseModel):
    """One solution: the problem, its steps and each step's binary label (None: shown, not scored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="the row's id, unique in its file")
    problem: str = Field(min_length=1, description="the question the steps answer")
    steps: tuple[str, ...] = Field(min_length=1, description="the solution's steps, in order")
    labels: tuple[int | None, ...] = Field(description="1 correct, 0 wrong, None unscored; one per step")
    source: str | None = Field(None, description="where the row came from (optional)")


@dataclass
class StepRows:
    """The rows a file gave and what was skipped: reason -> count, plus the first few row indexes."""

    rows: list[StepRow]
    skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``N rows, M skipped (reason: count, ...)`` for a log line."""
        if not self.skipped:
            return f"{len(self.rows)} rows, 0 skipped"
        reasons = ", ".join(f"{reason}: {count}" for reason, count in self.skipped.most_common())
        return f"{len(self.rows)} rows, {sum(self.skipped.values())} skipped ({reasons})"


def parse_row(row: Any, scheme: LabelScheme) -> StepRow:
    """A `StepRow` from one decoded JSON value; MalformedRow names what is wrong."""
    if not isinstance(row, dict):
        raise MalformedRow(f"not a JSON object but {type(row).__name__}")
    for key in ("id", "problem", "steps", "labels"):
        if key not in row:
            raise MalformedRow(f"no {key!r} field")
    extra = sorted(set(row) - {"id", "problem", "steps", "labels", "source"})
    if extra:
        raise MalformedRow(f"unknown field {extra[0]!r}")
    row_id, problem, steps, labels = row["id"], row["problem"], row["steps"], row["labels"]
    if not isinstance(row_id, str) or not row_id:
        raise MalformedRow("'id' is not a non-empty string")
    if not isinstance(problem, str) or not problem.strip():
        raise MalformedRow("'problem' is not a non-empty string")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s.strip() for s in steps):
        raise MalformedRow("'steps' is not a non-empty list of non-empty strings")
    if not isinstance(labels, list):
        raise MalformedRow("'labels' is not a list")
    if len(labels) != len(steps):
        raise MalformedRow(f"{len(labels)} labels for {len(steps)} steps")
    source = row.get("source")
    if source is not None and not isinstance(source, str):
        raise MalformedRow("'source' is not a string")
    return StepRow(
        id=row_id, problem=problem, steps=tuple(steps), labels=tuple(scheme.read(v) for v in labels), source=source
    )


def read_step_rows(lines: Sequence[str], scheme: LabelScheme | None = None) -> StepRows:
    """Rows from JSONL lines (blank lines ignored); malformed ones are skipped and counted by reason."""
    scheme = scheme or LabelScheme()
    out = StepRows(rows=[])
    seen: set[str] = set()
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise MalformedRow("not valid JSON") from None
            row = parse_row(value, scheme)
            if row.id in seen:
                raise MalformedRow("duplicate id")
        except MalformedRow as exc:
            reason = str(exc)
            out.skipped[reason] += 1
            if len(out.examples) < 5:
                out.examples.append(f"line {index + 1}: {reason}")
            continue
        seen.add(row.id)
        out.rows.append(row)
    return out


def load_step_rows(path: str | Path, scheme: LabelScheme | None = None) -> StepRows:
    """Rows of a JSONL file (see read_step_rows); SourceError when it cannot be read or holds no usable row."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read step rows: {getattr(exc, 'strerror', None) or exc}") from None
    rows = read_step_rows(lines, scheme)
    if not rows.rows:
        raise SourceError(f"{path}: no usable step row ({rows.summary()}); format: tasks/step_labels.py")
    return rows


def split_by_problem(
    rows: Sequence[StepRow], heldout_fraction: float, seed: int
) -> tuple[list[StepRow], list[StepRow]]:
    """(train, held-out): whole problems go to one side, so no problem text is on both.

    The distinct problems are shuffled with ``seed`` and the first ``round(fraction * problems)`` (at
    least one, at most all but one) are held out. Rows keep their file order on each side.
    """
    problems = sorted({row.problem for row in rows})
    if len(problems) < 2:
        raise ValueError(f"{len(problems)} distinct problem(s): a held-out split needs at least 2")
    random.Random(seed).shuffle(problems)
    count = min(max(1, round(heldout_fraction * len(problems))), len(problems) - 1)
    held = set(problems[:count])
    return [r for r in rows if r.problem not in held], [r for r in rows if r.problem in held]
