"""The registry of task families: each family's ``FamilyKind``, the one place a family is registered.

``KINDS`` lists them in routing order: the shipped ones, then those installed packages register (`tasks.plugins`) (``Families`` asks the families in this order, and an
environment builds them in it). Whatever differs per family is asked of ``kind_of(task)``; the
task types every family owns make ``AnyTask``, the task a pool, a bundle or a replay may hold.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from typing import Any

from pydantic import ValidationError

from sandbox.config import SandboxConfig
from tasks.family import CODE, FamilyKind, FamilyResources, Finding, UnknownTask
from tasks.formats.registry import FORMATS
from tasks.math.family import MATH
from tasks.plugins import installed_kinds
from tasks.result import TaskResult
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


def check_family_settings(sections: Mapping[str, Any]) -> dict[str, Any]:
    """``sections`` (a ``families:`` mapping: a plugin family's name -> its own settings) as given, once each is
    valid for its family's ``settings_model``; `ValueError` naming the family and the field at fault otherwise."""
    plugins = {kind.name: kind for kind in KINDS if kind.settings_model is not None}
    for name, section in sections.items():
        kind = next((k for k in KINDS if k.name == name), None)
        if kind is None or kind.settings_model is None:
            what = "takes no settings here" if kind is not None else "is no installed task family"
            known = ", ".join(sorted(plugins)) or "none is installed"
            raise ValueError(f"{name!r} {what}; task families with settings: {known}")
        try:
            kind.settings_model.model_validate(section)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in (name, *first["loc"]))
            raise ValueError(f"{where}: {first['msg']} (the {name} family's {kind.settings_model.__name__})") from None
    return dict(sections)


def settings_for(kind: FamilyKind, sections: Mapping[str, Any]) -> Any:
    """``kind``'s own settings from a ``families:`` mapping (its model's defaults where it has no section); None for
    a family without a ``settings_model``."""
    return kind.settings_model.model_validate(sections.get(kind.name, {})) if kind.settings_model else None


def is_plugin(task: object) -> bool:
    """Whether ``task`` belongs to an installed family rather than a shipped one (its family grades it)."""
    return kind_of(task) not in SHIPPED_KINDS


async def grade_with_family(task: Any, answer: str, resources: FamilyResources) -> TaskResult:
    """``answer`` (what a final-channel message hands in: `FamilyKind.final_answer`) to ``task``, graded by a family
    of ``task``'s kind built for this grading, opened and closed around it: how a plugin's task is graded outside
    an episode (`gym grade`, the sandbox service, the adapters' `Scorer`)."""
    family = kind_of(task).family([task], resources)
    if family is None:
        raise UnknownTask(f"the {kind_of(task).name} family builds no family for a {type(task).__name__}")
    async with family.opened():
        return await family.grade(task, answer)


def grade_plugin_pairs(
    pairs: Sequence[tuple[Any, str]], config: Any, sandbox: SandboxConfig, sections: Mapping[str, Any]
) -> list[TaskResult]:
    """Grade ``(task, response)`` pairs of plugin families (synchronous entry point for `gym grade`): each response
    read as the family reads a final answer, graded by its family with its ``sections`` settings, ``config``
    (`tasks.grader.GraderConfig`) ``concurrency`` at a time over one pool of ``sandbox``; results in order."""
    import trio

    from sandbox.fleet import open_pool
    from tasks.grader import Grader

    async def main() -> list[TaskResult]:
        results: list[TaskResult | None] = [None] * len(pairs)
        limiter = trio.CapacityLimiter(config.concurrency)
        on_demand = sandbox.model_copy(update={"pool": sandbox.pool.model_copy(update={"size": 0})})
        async with open_pool(on_demand) as pool:  # no warm containers: a family that needs none starts none
            grader = Grader(pool, config)

            async def one(i: int, task: Any, response: str) -> None:
                kind = kind_of(task)
                resources = FamilyResources(pool, grader, sandbox, settings_for(kind, sections))
                async with limiter:
                    results[i] = await grade_with_family(task, kind.final_answer(task, response), resources)

            async with trio.open_nursery() as nursery:
                for i, (task, response) in enumerate(pairs):
                    nursery.start_soon(one, i, task, response)
        return [result for result in results if result is not None]

    return trio.run(main)
