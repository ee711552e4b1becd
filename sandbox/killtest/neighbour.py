"""A neighbour workspace's exec latency while an attack runs, against itself with the attacker frozen.

Why interleave: the machine's load is not ours (other suites share the two
cores and the engine). Idle samples taken before and after the attack compare
the attack with a different moment's load; under outside load a correctly
capped hog multiplied the neighbour's p50 by ~10 against such a baseline and
failed a 3x bound. Here the baseline is taken *during* the attack: the
attacker container is frozen (``docker pause``: the cgroup freezer, so its
every process, forked ones included, stops) for a block of samples, thawed for
the next block, alternating. Outside load hits both sets alike, and the check
compares the two medians: what the attacker itself adds.

What the bound means: it is not the CPU cap (``cpu_account`` checks that on
the kernel's own accounting). Measured on the 2-core VM, a hog capped at one
core and an uncapped one slow the neighbour alike (1.7-2x idle, 3-4x with four
outside busy loops): CFS gives each container's cgroup an equal share whatever
its quota. The bound catches starvation: a neighbour whose calls wait on the
attacker by a large factor (``LATENCY_FACTOR``) plus an absolute floor
for the scheduler's tick-sized hiccups.

A pause can fail (runc gives up freezing a busy cgroup under load: "unable to
freeze"); that block is skipped, counted, and the attacker keeps running.
The attacker is always thawed before this returns.
"""

from __future__ import annotations

import logging
import statistics
import time

import trio

from sandbox.docker_engine import Engine
from sandbox.errors import InfraError
from sandbox.killtest.judge import Check
from sandbox.protocol import ExecRequest
from sandbox.workspace import Workspace

log = logging.getLogger(__name__)
LATENCY_FACTOR = 8.0  # twice the worst legitimate ratio measured (a capped hog, 4x with the cores busy)
LATENCY_FLOOR_S = 0.010
BLOCK = 3  # samples per frozen or running block: fewer blocks, fewer quota-period edges for cpu_account
MIN_SAMPLES = 3  # per set; fewer and there is no verdict (the check fails)


class NeighbourProbe:
    """Samples a neighbour's `true` exec latency in alternating blocks: attacker frozen, attacker running."""

    def __init__(self, ws: Workspace, engine: Engine | None = None, max_samples: int = 60, warmup_s: float = 0.5):
        self.ws = ws
        self.engine = engine
        self.max_samples = max_samples  # 1 + max_samples stay inside the episode's call budget (64)
        self.warmup_s = warmup_s
        self.frozen: list[float] = []
        self.running: list[float] = []
        self.frozen_s = 0.0  # lower bound of the time the attacker spent frozen
        self.thaws = 0
        self.failed_pauses: list[str] = []

    async def _sample(self) -> float:
        started = time.monotonic()
        result = await self.ws.exec(ExecRequest(argv=["true"], timeout_s=10))
        if result.failure.value != "ok":
            raise InfraError(f"neighbour probe exec failed: {result.failure.value} {result.detail}")
        return time.monotonic() - started

    async def warm(self) -> None:
        """The first call of a workspace pays one-off costs: keep it out of the samples."""
        await self._sample()

    async def measure_until(self, attacker_id: str, done: trio.Event) -> None:
        """From ``warmup_s`` after the attack's start until ``done``: frozen and running blocks in turn."""
        await trio.sleep(self.warmup_s)
        freeze = True
        while not done.is_set() and len(self.frozen) + len(self.running) < self.max_samples:
            if freeze:
                await self._frozen_block(attacker_id, done)
            else:
                for _ in range(BLOCK):
                    if done.is_set():
                        break
                    self.running.append(await self._sample())
            freeze = not freeze

    async def _frozen_block(self, attacker_id: str, done: trio.Event) -> None:
        api = self.engine.client.api
        try:
            await self.engine.call("pause", api.pause, attacker_id)
        except InfraError as exc:
            self.failed_pauses.append(str(exc)[-160:])
            log.info("neighbour probe: could not freeze %s: %s", attacker_id[:12], exc)
            return
        paused = time.monotonic()
        try:
            if not done.is_set():  # the call may have ended just before the pause
                for _ in range(BLOCK):
                    self.frozen.append(await self._sample())
        finally:
            with trio.CancelScope(shield=True):
                thawing = time.monotonic()
                await self.engine.call("unpause", api.unpause, attacker_id)
                self.frozen_s += thawing - paused
                self.thaws += 1

    def check(self) -> Check:
        failed = f"; {len(self.failed_pauses)} pauses failed" if self.failed_pauses else ""
        if min(len(self.frozen), len(self.running)) < MIN_SAMPLES:
            detail = f"too few samples to compare: {len(self.frozen)} frozen, {len(self.running)} running{failed}"
            return Check(name="neighbour_latency", passed=False, detail=detail)
        frozen, running = statistics.median(self.frozen), statistics.median(self.running)
        bound = LATENCY_FACTOR * frozen + LATENCY_FLOOR_S
        detail = (
            f"neighbour exec p50 {1000 * running:.1f} ms with the attacker running vs {1000 * frozen:.1f} ms "
            f"with it frozen, interleaved (bound {LATENCY_FACTOR:g}x frozen + {1000 * LATENCY_FLOOR_S:.0f} ms = "
            f"{1000 * bound:.1f} ms; {len(self.running)}+{len(self.frozen)} samples{failed})"
        )
        return Check(name="neighbour_latency", passed=running <= bound, detail=detail)
