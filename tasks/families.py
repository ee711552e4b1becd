"""The registry of task families: each family's ``FamilyKind``, the one place a family is registered.

``KINDS`` lists them in routing order: the shipped ones, then those installed packages register (`tasks.plugins`) (``Families`` asks the families in this order, and an
environment builds them in it). Whatever differs per family is asked of ``kind_of(task)``; the
task types every family owns make ``AnyTask``, the task a pool, a bundle or a replay may hold.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

from tasks.family import CODE, FamilyKind, Finding, UnknownTask
from tasks.formats.registry import FORMATS
from tasks.math.family import MATH
from tasks.plugins import installed_kinds
from tasks.swe.family import SWE

SHIPPED_KINDS: tuple[FamilyKind, ...] = (CODE, MATH, SWE)
# the shipped kinds, then those installed distributions register (`tasks.plugins`)
KINDS: tuple[FamilyKind, ...] = (
    *SHIPPED_KINDS,
    *installed_kinds({kind.name for kind in SHIPPED_KINDS}, {*FORMATS, "auto", "swe"}),
)

# every task type of a registered family (a runtime union: pydantic validates a bundle's task against it)
TASK_TYPES: tuple[type, ...] = tuple(task_type for kind in KINDS for task_type in kind.task_types)
AnyTask: Any = reduce(operator.or_, TASK_TYPES)


def kind_of(task: object) -> FamilyKind:
    """The kind of the family that owns ``task``."""
    for kind in KINDS:
        if kind.owns(task):
            return kind
    raise UnknownTask(f"no task family owns a {type(task).__name__}")


def usable(tasks: Sequence[Any], settings: Callable[[FamilyKind], Any], source: str) -> tuple[list[Any], list[Finding]]:
    """``(the tasks their families can grade, in order; a finding for each other one)``: each family is asked of its
    own tasks with its settings (``settings(kind)``), its findings logged as skipped tasks of ``source``."""
    findings: list[Finding] = []
    for kind in KINDS:
        own = [task for task in tasks if kind.owns(task)]
        if own:
            findings += kind.usable(own, settings(kind), source)[1]
    skipped = {finding.task_id for finding in findings}
    return [task for task in tasks if task.task_id not in skipped], findings


def ungradable(tasks: Sequence[Any]) -> list[Finding]:
    """A finding for each of ``tasks`` its family cannot grade with its default settings (nothing logged)."""
    return [finding for kind in KINDS for finding in kind.ungradable([task for task in tasks if kind.owns(task)])]
