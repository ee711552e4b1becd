"""A workspace pool spread over several Docker engines (``sandbox.engines``).

``async with open_pool(config) as pool`` gives a ``WorkspacePool`` when ``sandbox.engines`` is empty
(the one engine of ``sandbox.engine``) and a ``FleetPool`` otherwise; both hand out workspaces with
``async with pool.acquire(owner) as ws`` and destroy them when the block exits.

A ``FleetPool`` runs one ``WorkspacePool`` per engine (each in its own task) and places every
acquire on the engine with the most free capacity (``capacity`` minus the workspaces it has handed
out) among the healthy engines carrying every label of ``sandbox.require_labels``; when all of them
are full, acquires wait for a release. The warm pool (``pool.size``) is split over the engines in
proportion to their capacity.

Health: every ``engine.health_interval_s`` each engine is pinged. An engine that does not answer
(a ping within 5 s, then a second one within ``engine.timeout_s``; or a start failed while it does
not answer) is *drained*: no new workspace goes to it, its warm pool stops refilling and removing, and
its live workspaces are abandoned: their calls in flight and later end as ``infra_error`` at once (the
episode is masked, never scored) instead of waiting out call deadlines on a dead host. What its
containers leave carries this process's owner label, for ``gym gc`` (``--config``: every engine) once
the process has ended. A drained engine keeps being pinged and takes work again when it answers.
When no engine can take work, acquires wait up to ``engine.outage_wait_s`` (once per outage) for one
to come back, then fail as ``InfraError``. An engine that does not answer when the pool opens is
started later, when it answers; the pool fails to open only when none answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from sandbox.config import EngineEntry, SandboxConfig
from sandbox.errors import ImageMissing, InfraError
from sandbox.pool import PoolContext, WorkspacePool
from sandbox.workspace import Workspace

log = logging.getLogger(__name__)


def open_pool(config: SandboxConfig, *, gc_at_start: bool = True) -> WorkspacePool | FleetPool:
    """The pool a config asks for: over ``sandbox.engines`` when it names any, else the single engine."""
    if config.engines:
        return FleetPool(config, gc_at_start=gc_at_start)
    return WorkspacePool(config, gc_at_start=gc_at_start)


def warm_shares(total: int, capacities: list[int]) -> list[int]:
    """``total`` warm workspaces split over engines in proportion to capacity (largest remainders),
    never more than an engine's capacity."""
    weight = sum(capacities)
    exact = [total * c / weight for c in capacities]
    shares = [min(math.floor(x), c) for x, c in zip(exact, capacities)]
    by_remainder = sorted(range(len(capacities)), key=lambda i: (shares[i] - exact[i], i))
    for i in by_remainder:
        if sum(shares) >= total:
            break
        if shares[i] < capacities[i]:
            shares[i] += 1
    return shares


def choose(members: list[Member], required: set[str]) -> Member | None:
    """The member to place the next workspace on: the healthy one carrying ``required`` with the most
    free capacity (the first in config order on ties); None when none has a free slot."""
    best = None
    for member in members:
        if not member.up or not required <= set(member.entry.labels) or member.free <= 0:
            continue
        if best is None or member.free > best.free:
            best = member
    return best


@dataclass(eq=False)
class Member:
    """One engine of the fleet and its pool."""

    entry: EngineEntry
    pool: WorkspacePool
    up: bool = False  # started and answering: takes new work
    started: bool = False  # its pool is open
    in_use: int = 0  # workspaces handed out (and slots reserved by acquires starting one)
    workspaces: set[Workspace] = field(default_factory=set)
    placed: int = 0  # workspaces handed out over the pool's life
    drains: int = 0
    abandoned: int = 0
    stop: trio.Event = field(default_factory=trio.Event)
    stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def url(self) -> str:
        return self.entry.url

    @property
    def free(self) -> int:
        return self.entry.capacity - self.in_use


class FleetPool(PoolContext):
    """Workspaces over several engines. See the module docstring."""

    def __init__(self, config: SandboxConfig, *, gc_at_start: bool = True):
        if not config.engines:
            raise ValueError("a FleetPool needs sandbox.engines (open_pool picks the single-engine pool)")
        self.config = config
        self._required = set(config.require_labels)
        shares = warm_shares(config.pool.size, [entry.capacity for entry in config.engines])
        self.members = []
        for (entry, single), share in zip(config.engine_configs(), shares):
            # Starts fail at once on a dead engine (outage_wait_s 0): the fleet places them elsewhere
            # and waits out an outage of every engine itself.
            single = single.model_copy(
                update={
                    "pool": single.pool.model_copy(update={"size": share}),
                    "engine": single.engine.model_copy(update={"outage_wait_s": 0.0}),
                }
            )
            self.members.append(Member(entry, WorkspacePool(single, gc_at_start=gc_at_start)))
        self._changed = trio.Event()  # a slot freed or an engine's state changed
        self._outage_since: float | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = False

    # ------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                errors = []
                for member in self.members:
                    try:
                        await nursery.start(self._run_member, member)
                    except ImageMissing:
                        raise
                    except InfraError as exc:
                        errors.append(exc)
                        log.warning(
                            "the Docker engine at %s does not answer; it joins when it does: %s", member.url, exc
                        )
                if not any(member.started for member in self.members):
                    raise InfraError(f"no engine of sandbox.engines answers: {'; '.join(map(str, errors))}")
                nursery.start_soon(self._watch)
                yield
            finally:
                await self._close()

    async def _close(self) -> None:
        """Close the engines' pools one at a time, last opened first (each restores the SIGTERM handler it
        replaced), then stop the watcher."""
        self._closing = True
        with trio.CancelScope(shield=True):
            for member in reversed(self.members):
                member.stop.set()
                if member.started:
                    await member.stopped.wait()
        self._nursery.cancel_scope.cancel()

    async def _run_member(self, member: Member, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep one engine's pool open until the fleet closes (its own task: a pool's nursery lives in it)."""
        try:
            async with member.pool:
                member.started = member.up = True
                self._notify()
                task_status.started()
                try:
                    await member.stop.wait()
                finally:
                    member.up = False
        finally:
            if member.started:  # a pool that failed to open is tried again by the watcher
                member.stopped.set()

    async def _watch(self) -> None:
        """Ping every engine each ``health_interval_s``: drain those that stopped answering, take back (or
        start) those that answer again."""
        interval = self.config.engine.health_interval_s
        while True:
            await trio.sleep(interval)
            async with trio.open_nursery() as nursery:
                for member in self.members:
                    nursery.start_soon(self._check, member)

    async def _check(self, member: Member) -> None:
        if self._closing:
            return
        healthy = await member.pool.engine.healthy()
        if not member.started:
            if healthy:
                try:
                    await self._nursery.start(self._run_member, member)
                except InfraError as exc:
                    log.warning("the Docker engine at %s answers but its pool did not open: %s", member.url, exc)
                else:
                    log.info("the Docker engine at %s answers: placing workspaces on it", member.url)
            return
        if not healthy and member.up:
            # A ping can miss its 5 s on a starved host (this process or the engine's busy for seconds): drain
            # only when a second ping, given the whole engine call deadline, fails too.
            if not await member.pool.engine.healthy(timeout=self.config.engine.timeout_s):
                self.drain(
                    member, f"it answered no ping within 5 s, then none within {self.config.engine.timeout_s:g} s"
                )
        elif healthy and not member.up and not self._closing:
            member.up = True
            member.pool.resume()
            log.info("the Docker engine at %s answers again: placing workspaces on it", member.url)
            self._notify()

    def drain(self, member: Member, why: str) -> None:
        """Stop placing work on ``member`` and abandon its live workspaces (their calls end as infra_error)."""
        if not member.up:
            return
        member.up = False
        member.drains += 1
        member.pool.suspend()
        reason = f"the Docker engine at {member.url} was drained: {why}"
        log.warning("%s; %d live workspaces abandoned", reason, len(member.workspaces))
        for ws in list(member.workspaces):
            ws.abandon(reason)
            member.abandoned += 1
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------ acquire / release

    @asynccontextmanager
    async def acquire(
        self, owner: str = "", artifacts_dir: Path | None = None, keys: frozenset[str] | None = None
    ) -> AsyncIterator[Workspace]:
        """A fresh workspace on the engine with the most free capacity; destroyed when the block exits (``keys``:
        as `WorkspacePool.acquire`'s, on that engine's pool)."""
        if self._nursery is None or self._closing:
            raise RuntimeError("use the pool inside `async with FleetPool(...)`")
        while True:
            member = await self._reserve()
            stack = AsyncExitStack()
            try:
                ws = await stack.enter_async_context(member.pool.acquire(owner, artifacts_dir, keys))
                break
            except BaseException as exc:
                self._release(member)
                if not isinstance(exc, InfraError) or isinstance(exc, ImageMissing):
                    raise
                if await member.pool.engine.healthy(timeout=self.config.engine.timeout_s):
                    # the engine answers: this start's own failure, not an outage
                    raise InfraError(f"{exc} (engine {member.url})") from exc
                self.drain(member, f"a workspace start failed: {exc}")
        member.workspaces.add(ws)
        member.placed += 1
        try:
            async with stack:
                yield ws
        finally:
            member.workspaces.discard(ws)
            self._release(member)

    async def _reserve(self) -> Member:
        """Take a slot on the best engine, waiting for a release or, in an outage, for an engine to answer."""
        while True:
            member = choose(self.members, self._required)
            if member is not None:
                member.in_use += 1
                self._outage_since = None
                return member
            changed = self._changed
            if any(m.up and self._required <= set(m.entry.labels) for m in self.members):
                await changed.wait()  # all full: wait for a release
                continue
            if self._outage_since is None:
                self._outage_since = trio.current_time()
                log.warning(
                    "no engine of sandbox.engines takes work: starts wait up to %.0fs for one",
                    self.config.engine.outage_wait_s,
                )
            left = self._outage_since + self.config.engine.outage_wait_s - trio.current_time()
            if left <= 0:
                down = ", ".join(m.url for m in self.members if self._required <= set(m.entry.labels))
                raise InfraError(f"no Docker engine answers (drained: {down})")
            with trio.move_on_after(left):
                await changed.wait()

    def _release(self, member: Member) -> None:
        member.in_use -= 1
        self._notify()

    # ------------------------------------------------------------ what callers read

    @property
    def live(self) -> frozenset[str]:
        return frozenset().union(*(member.pool.live for member in self.members))

    @property
    def cold_starts(self) -> int:
        return sum(member.pool.cold_starts for member in self.members)

    @property
    def warm_hits(self) -> int:
        return sum(member.pool.warm_hits for member in self.members)

    @property
    def hung_up(self) -> int:
        return sum(member.pool.hung_up for member in self.members)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every answering engine's pool holds its share of warm workspaces."""
        with trio.fail_after(timeout):
            for member in self.members:
                if member.up:
                    await member.pool.wait_ready(timeout)

    def stats(self) -> dict[str, float]:
        totals: dict[str, float] = {"ready": 0, "live": 0, "warm_hits": 0, "cold_starts": 0, "hung_up": 0}
        for member in self.members:
            for key, value in member.pool.stats().items():
                if key in totals:
                    totals[key] += value
        totals["engines_up"] = sum(member.up for member in self.members)
        totals["drains"] = sum(member.drains for member in self.members)
        totals["abandoned"] = sum(member.abandoned for member in self.members)
        return totals

    def engines(self) -> list[dict[str, object]]:
        """Per engine: url, up, in use, placed over the pool's life, drains, workspaces abandoned."""
        return [
            {
                "url": m.url,
                "up": m.up,
                "in_use": m.in_use,
                "placed": m.placed,
                "drains": m.drains,
                "abandoned": m.abandoned,
            }
            for m in self.members
        ]
