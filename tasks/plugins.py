"""Task families as plugins: a distribution registers a family with an entry point, no edit inside this repository.

An entry point of the group ``code_rl_gym.task_families`` (`GROUP`) names a `FamilyKind` instance
(``my_family = "my_package.family:KIND"``). The shipped families are registered the same way in this project's
``pyproject.toml`` (`SHIPPED`; a test keeps the two equal); a checkout that is not installed has no entry points
of its own, so `tasks.families` lists the shipped kinds itself and takes from the group only the others.

A plugin's kind brings its formats (`FamilyKind.formats`: a format name -> the module that parses rows into its
task type, with ``looks_like(row)`` and ``parse(index, row, name)``), its prompt's instructions
(`FamilyKind.instructions_of`), its answer kind and its family; see docs/architecture.md, "Adding a family".
An entry point that does not import, or names anything but a `FamilyKind`, or a name or format already taken, is
logged as an error and left out: one broken package never stops the gym for every other family.
"""

from __future__ import annotations

import importlib.metadata
import logging

from tasks.family import FamilyKind

log = logging.getLogger(__name__)

GROUP = "code_rl_gym.task_families"
# entry point name -> its value, as this project's pyproject.toml declares them
SHIPPED: dict[str, str] = {
    "cp": "tasks.family:CODE",
    "math": "tasks.math.family:MATH",
    "swe": "tasks.swe.family:SWE",
}


def installed_kinds(taken_names: set[str], taken_formats: set[str]) -> list[FamilyKind]:
    """The kinds installed distributions register under `GROUP`, but the shipped ones, in entry point name order;
    each one that cannot be used is logged and left out (see the module docstring)."""
    kinds: list[FamilyKind] = []
    names, formats = set(taken_names), set(taken_formats)
    for entry in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        if entry.name in SHIPPED:
            continue
        where = f"task family plugin {entry.name!r} ({entry.value})"
        try:
            kind = entry.load()
        except Exception as exc:  # noqa: BLE001 - whatever a broken package raises on import
            log.error("%s: does not import: %s: %s", where, type(exc).__name__, str(exc)[:300])
            continue
        why = _unusable(kind, names, formats)
        if why:
            log.error("%s: %s; left out", where, why)
            continue
        names.add(kind.name)
        formats |= set(kind.formats)
        kinds.append(kind)
    return kinds


def _unusable(kind: object, names: set[str], formats: set[str]) -> str:
    """Why ``kind`` cannot be registered, or ""."""
    if not isinstance(kind, FamilyKind):
        return f"names a {type(kind).__name__}, not a tasks.family.FamilyKind instance"
    if kind.name in names:
        return f"its name {kind.name!r} is taken"
    if clash := sorted(set(kind.formats) & formats):
        return f"its formats {clash} are taken"
    if not kind.task_types:
        return "it owns no task type"
    return ""
