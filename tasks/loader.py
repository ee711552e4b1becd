"""Loading tasks from a dataset file in any supported format.

``load_tasks(path, format)`` reads rows (`tasks.source`), parses each with the
format's module (`tasks.formats`), and returns the tasks together with every
row that was skipped and why. ``format="auto"`` recognises the format from
the first readable row.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.errors import MalformedRow, UnknownFormat
from tasks.families import KINDS
from tasks.formats.registry import FORMATS, FormatChoice
from tasks.source import Reader, RowError, read_rows

log = logging.getLogger(__name__)

# Rows in a row that match no format before one does: past this, the file is in a format nobody registered.
MAX_UNRECOGNISED_ROWS = 100


class LoadReport(BaseModel):
    """What a load produced: the tasks, and each skipped row with its index and reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    format: str
    tasks: tuple[Any, ...]  # each a task of its family's type (a format's parse validated it)
    errors: tuple[RowError, ...]


def formats() -> dict[str, str]:
    """Every format a file may name: the shipped ones (`FORMATS`), then those of installed task family plugins
    (`tasks.plugins`, each kind's ``formats``)."""
    return {**FORMATS, **{name: module for kind in KINDS for name, module in kind.formats.items()}}


def detect_format(row: dict[str, Any]) -> str | None:
    """The format whose fields ``row`` has; APPS is told from TACO by ``problem_id`` without limits."""
    from tasks.formats import taco

    for name in ("verl", "nemotron", "lcb", "codecontests", "humaneval", "mbpp"):
        if importlib.import_module(FORMATS[name]).looks_like(row):
            return name
    if taco.looks_like_apps(row):
        return "apps"
    if taco.looks_like(row):
        return "taco"
    if importlib.import_module(FORMATS["math"]).looks_like(row):
        return "math"
    for kind in KINDS:  # installed plugins' formats, after the shipped ones
        for name, module in kind.formats.items():
            if importlib.import_module(module).looks_like(row):
                return name
    return None


def load_tasks(path: Path, format: FormatChoice | str = "auto", reader: Reader = "auto") -> LoadReport:
    """Every task of ``path``; malformed rows are reported in ``errors`` and skipped. ``format``: ``auto``, a shipped
    format or an installed plugin's (`formats`)."""
    known = formats()
    if format != "auto" and format not in known:
        raise UnknownFormat(f"unknown format {format!r}; known: {', '.join(known)}")
    chosen = None if format == "auto" else format
    tasks: list[Any] = []
    errors: list[RowError] = []
    seen: set[str] = set()
    unknown: list[str] = []  # why each row read before the format was recognised fits none
    for index, row in read_rows(Path(path), reader):
        if isinstance(row, RowError):
            errors.append(row)
            continue
        if chosen is None:
            chosen = detect_format(row)
            if chosen is None:
                # One odd row (a stray header, a row missing its statement) does not decide the whole file.
                unknown.append(f"{path}: row {index} matches no known format (fields: {sorted(row)[:12]})")
                errors.append(RowError(index=index, reason=f"matches no known format (fields: {sorted(row)[:12]})"))
                if len(unknown) >= MAX_UNRECOGNISED_ROWS:
                    raise UnknownFormat(f"{unknown[0]}, nor do the {len(unknown) - 1} rows after it")
                continue
            log.info("%s: detected format %s", path, chosen)
        try:
            task = importlib.import_module(known[chosen]).parse(index, row, chosen)
        except MalformedRow as err:
            errors.append(RowError(index=index, reason=str(err)))
            continue
        except (ValueError, TypeError, RecursionError, MemoryError) as err:  # pydantic validation, nesting, size
            errors.append(RowError(index=index, reason=f"{type(err).__name__}: {err}".splitlines()[0][:500]))
            continue
        try:  # a lone surrogate (a "\\ud800" escape) loads but fails every later write of the task
            task.model_dump_json()
        except ValueError as err:
            errors.append(RowError(index=index, reason=f"not valid Unicode text: {str(err).splitlines()[0][:300]}"))
            continue
        if task.task_id in seen:
            errors.append(RowError(index=index, reason=f"duplicate task_id {task.task_id!r}"))
            continue
        seen.add(task.task_id)
        tasks.append(task)
    if chosen is None and unknown:
        raise UnknownFormat(unknown[0] + (f", nor do the {len(unknown) - 1} rows after it" if len(unknown) > 1 else ""))
    for error in errors:
        log.warning("%s: skipped row %d: %s", path, error.index, error.reason)
    return LoadReport(path=str(path), format=chosen or format, tasks=tuple(tasks), errors=tuple(errors))
