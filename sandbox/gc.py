"""Garbage collection of gym containers: owner gone or deadline passed.

Every container the gym creates carries ``sandbox.labels.Labels``; ``collect``
removes those whose owning process is dead (on this host) or whose deadline is
behind us. The pool runs it at start; ``python -m gym gc`` runs it on demand, on one
engine or on several at once (``collect_engines``: an engine that does not answer is
reported, the others are still collected).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from sandbox.errors import InfraError
from sandbox.labels import Labels, owner_alive

if TYPE_CHECKING:
    from sandbox.docker_engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collected:
    container_id: str
    name: str
    reason: str


def reason_to_collect(labels: Labels, now: float, everything: bool = False) -> str | None:
    """Why a container with these labels should go, or None to keep it."""
    if everything:
        return "all gym containers requested"
    if labels.deadline and labels.deadline < now:
        return f"deadline passed {now - labels.deadline:.0f}s ago"
    if not owner_alive(labels.owner):
        return f"owner {labels.owner} is gone"
    return None


async def collect(engine, *, everything: bool = False, dry_run: bool = False) -> list[Collected]:
    """Remove every gym container that should go; returns what was (or would be) removed."""
    now = time.time()
    doomed = []
    for container in await engine.labelled():
        reason = reason_to_collect(Labels.parse(container.get("Labels") or {}), now, everything)
        if reason:
            name = (container.get("Names") or ["?"])[0].lstrip("/")
            doomed.append(Collected(container["Id"], name, reason))
    if not dry_run:
        async with trio.open_nursery() as nursery:
            for item in doomed:
                log.debug("gc: removing %s (%s)", item.name, item.reason)
                nursery.start_soon(engine.remove, item.container_id)
    return doomed


@dataclass(frozen=True)
class EngineCollected:
    """What ``collect`` did on one engine; ``error`` is set (and ``removed`` empty) when the engine failed."""

    url: str
    removed: list[Collected]
    error: InfraError | None = None


async def collect_engines(
    engines: Sequence[Engine], *, everything: bool = False, dry_run: bool = False
) -> list[EngineCollected]:
    """``collect`` on every engine at once, one entry per engine in order. An engine that does not answer
    (or fails a call: InfraError) is reported in its entry; the others are still collected."""
    results: list[EngineCollected | None] = [None] * len(engines)

    async def one(index: int, engine: Engine) -> None:
        try:
            results[index] = EngineCollected(engine.url, await collect(engine, everything=everything, dry_run=dry_run))
        except* InfraError as group:  # the list, or a removal in collect's own nursery
            results[index] = EngineCollected(engine.url, [], _first_leaf(group))

    async with trio.open_nursery() as nursery:
        for index, engine in enumerate(engines):
            nursery.start_soon(one, index, engine)
    return [result for result in results if result is not None]


def _first_leaf(group: BaseExceptionGroup[InfraError]) -> InfraError:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, InfraError)
    return error
