"""The attacker container's own CPU time over an attack, against its configured CPU limit.

This is the containment verdict for CPU attacks: it rests on the result (what the
kernel charged to the container's cgroup), not on how a neighbour felt, so
external load on the machine cannot fail it (load only lowers the usage) and
cannot hide an escape (an unlimited hog on an idle machine uses ~all cores).

- The limit is what the engine applied (``HostConfig.NanoCpus``, else
  ``CpuQuota``/``CpuPeriod``); a container without one fails the check outright.
- The usage is the cgroup's ``cpuacct.usage`` as the engine reports it
  (``stats`` one-shot, ``cpu_stats.cpu_usage.total_usage``), read from outside
  the container: the first reading before the attack's first call is sent, the
  last after the call returned and the host swept the container, so every
  process of the attack, including one that outlives the call, is charged
  inside the window. A process cannot leave the cgroup (no capabilities, the
  cgroup filesystem read-only: the posture and the kernel attacks hold that).
- The window's wall time is measured from before the first reading was asked
  for to after the last one answered: an upper bound of the true interval. Time
  the container spent frozen by the neighbour probe (``docker pause``) is taken
  out, counting only [pause answered, unpause asked]: a lower bound of the
  frozen time, so the running time stays an upper bound.
- CFS enforces the quota per period (100 ms by default): a stretch of running
  time that starts or stops inside a period may use that period's quota faster
  than the average rate, at most ``quota * (1 - limit / cpus)`` per edge. Each
  running stretch has two edges; that is ``EDGE`` below, added on top of the
  small relative ``MARGIN`` (kernel accounting granularity).
"""

from __future__ import annotations

import time

import docker

from sandbox.docker_engine import Engine
from sandbox.errors import InfraError
from sandbox.killtest.judge import Check

MARGIN = 0.05
DEFAULT_PERIOD_US = 100_000  # the kernel's cfs_period_us when Docker sets none (NanoCpus always uses it)


def cpu_limit(host_config: dict) -> tuple[float | None, float]:
    """(cores, period in seconds) the engine applied; cores None when the container has no CPU limit."""
    period_us = host_config.get("CpuPeriod") or DEFAULT_PERIOD_US
    if host_config.get("NanoCpus"):
        return host_config["NanoCpus"] / 1e9, DEFAULT_PERIOD_US / 1e6
    if (host_config.get("CpuQuota") or 0) > 0:
        return host_config["CpuQuota"] / period_us, period_us / 1e6
    return None, period_us / 1e6


def usage_bound(limit: float, period_s: float, cpus: int, running_s: float, stretches: int) -> float:
    """CPU seconds a container held to ``limit`` cores can use in ``running_s`` split into ``stretches``."""
    edge = limit * period_s * max(0.0, 1.0 - limit / max(cpus, 1))
    return limit * running_s * (1 + MARGIN) + 2 * stretches * edge


class CpuAccount:
    """Readings of one container's CPU time; ``start`` before the attack, ``stop`` after it, then ``check``."""

    def __init__(self, engine: Engine, container_id: str):
        self.engine = engine
        self.container_id = container_id
        self.limit: float | None = None
        self.period_s = DEFAULT_PERIOD_US / 1e6
        self.cpus = 1
        self.used_s: float | None = None
        self.wall_s = 0.0
        self.throttled = 0
        self.ended = ""  # why there is no last reading, when there is none
        self._started = 0.0
        self._first: dict = {}

    async def _stats(self) -> dict:
        api = self.engine.client.api
        return await self.engine.call("stats", api.stats, self.container_id, stream=False, one_shot=True)

    async def start(self) -> None:
        info = await self.engine.call("inspect", self.engine.client.api.inspect_container, self.container_id)
        self.limit, self.period_s = cpu_limit(info.get("HostConfig") or {})
        self.cpus = int((await self.engine.call("info", self.engine.client.api.info)).get("NCPU") or 1)
        self._started = time.monotonic()
        self._first = (await self._stats()).get("cpu_stats") or {}

    async def stop(self) -> None:
        try:
            last = (await self._stats()).get("cpu_stats") or {}
        except (docker.errors.NotFound, InfraError) as exc:  # the container is gone: nothing to read its usage from
            self.ended = f"no last reading ({type(exc).__name__}: {exc})"
            return
        self.wall_s = time.monotonic() - self._started
        if not last.get("cpu_usage"):
            self.ended = "no last reading (the engine reported no CPU usage: the container has stopped)"
            return
        self.used_s = (last["cpu_usage"]["total_usage"] - self._first["cpu_usage"]["total_usage"]) / 1e9
        throttled = (last.get("throttling_data") or {}).get("throttled_periods", 0)
        self.throttled = throttled - (self._first.get("throttling_data") or {}).get("throttled_periods", 0)

    def check(self, frozen_s: float = 0.0, thaws: int = 0) -> Check:
        """Usage <= limit x running time (+ margin); ``frozen_s``/``thaws`` from the neighbour probe's pauses."""
        if self.limit is None:
            return Check(
                name="cpu_usage",
                passed=False,
                detail="the container has no CPU limit (HostConfig NanoCpus and CpuQuota unset): nothing holds a hog"
                + (f"; it used {self.used_s:.2f} CPU s in {self.wall_s:.2f} s" if self.used_s is not None else ""),
            )
        if self.used_s is None:
            return Check(name="cpu_usage", passed=False, detail=f"CPU usage unknown: {self.ended}")
        running = max(self.wall_s - frozen_s, 0.0)
        bound = usage_bound(self.limit, self.period_s, self.cpus, running, thaws + 1)
        detail = (
            f"used {self.used_s:.2f} CPU s in {running:.2f} s running ({self.used_s / max(running, 1e-9):.2f} cores; "
            f"{self.wall_s:.2f} s wall, {frozen_s:.2f} s frozen, {thaws + 1} stretches) <= bound {bound:.2f} "
            f"(limit {self.limit:g} cores, +{MARGIN:.0%}, period edges); throttled in {self.throttled} periods"
        )
        return Check(name="cpu_usage", passed=self.used_s <= bound, detail=detail)
