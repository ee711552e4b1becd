"""The asynchronous producer: rollout workers run GRPO groups ahead of the trainer, within credits.

The trainer grants *credits* (groups that may start). Each credit draws the next task from the
environment's task stream and runs its G episodes with the gym's `RolloutWorkers`; finished
trajectories are bucketed by group and a `Group` (with each sample's R3 routes) is sent to the
trainer when its last episode ends. The trainer bounds staleness by when it grants credits: at the
start `(1 + max_staleness) * groups_per_step`, then `groups_per_step` after each step, plus one per
group that dynamic sampling dropped (the refill). A sample still too old when consumed is dropped
or down-weighted by `trainer.selection`.

`ConsumedStream` makes the data order resumable: the checkpointed cursor is the first position
not yet consumed, and positions consumed beyond it are skipped when the run resumes.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import trio

from gym.rollout import RolloutWorkers
from gym.task_stream import TaskStream
from gym.trajectory import Trajectory
from tasks.task import Task
from trainer.routes import RouteRecorder
from trainer.sample import Group, Sample

log = logging.getLogger(__name__)


class ConsumedStream:
    """A `TaskStream` view that skips positions a previous run already trained on."""

    def __init__(self, stream: TaskStream, cursor: int = 0, skip: set[int] | None = None) -> None:
        self.stream = stream
        self.stream.seek(cursor)
        self.skip = set(skip or ())
        self.drawn: set[int] = set()  # drawn, not yet consumed

    @property
    def position(self) -> int:
        return self.stream.position

    def next(self) -> tuple[int, Task]:
        while True:
            position, task = self.stream.next()
            if position in self.skip:
                self.skip.discard(position)
                continue
            self.drawn.add(position)
            return position, task

    def take(self, n: int) -> list[tuple[int, Task]]:
        return [self.next() for _ in range(n)]

    def consumed(self, position: int) -> None:
        self.drawn.discard(position)

    def cursor(self) -> tuple[int, list[int]]:
        """(first position not consumed, positions consumed after it) for a checkpoint."""
        first = min(self.drawn, default=self.stream.position)
        done_after = sorted(p for p in range(first, self.stream.position) if p not in self.drawn)
        return first, sorted(set(done_after) | {p for p in self.skip if p >= first})


class Producer:
    """Runs groups as credits allow and sends each finished `Group` on a channel."""

    def __init__(
        self,
        workers: RolloutWorkers,
        stream: ConsumedStream,
        group_size: int,
        seed: int,
        recorder: RouteRecorder | None = None,
    ) -> None:
        self.workers, self.stream = workers, stream
        self.group_size, self.seed = group_size, seed
        self.recorder = recorder
        self.credits = 0
        self.started = 0
        self.delivered = 0
        self._credit_event = trio.Event()
        self._buckets: dict[str, list[Trajectory]] = defaultdict(list)

    def grant(self, groups: int) -> None:
        if groups > 0:
            self.credits += groups
            self._credit_event.set()

    @property
    def outstanding(self) -> int:
        """Groups granted or running that have not been delivered yet."""
        return self.credits + self.started - self.delivered

    async def run(self, send: trio.MemorySendChannel[Group]) -> None:
        """Until cancelled: start a group per credit; deliver groups as they complete."""
        traj_send, traj_receive = trio.open_memory_channel[Trajectory](256)
        async with send, trio.open_nursery() as nursery:
            nursery.start_soon(self._collect, traj_receive, send)
            async with traj_send:
                while True:
                    while self.credits == 0:
                        self._credit_event = trio.Event()
                        await self._credit_event.wait()
                    self.credits -= 1
                    self.started += 1
                    nursery.start_soon(self._one_group, traj_send.clone())

    async def _one_group(self, send: trio.MemorySendChannel[Trajectory]) -> None:
        await self.workers.run(send, groups=1, group_size=self.group_size, seed=self.seed)

    async def _collect(
        self, receive: trio.MemoryReceiveChannel[Trajectory], send: trio.MemorySendChannel[Group]
    ) -> None:
        async with receive:
            async for trajectory in receive:
                key = trajectory.group_key
                bucket = self._buckets[key]
                bucket.append(trajectory)
                if len(bucket) < self.group_size:
                    continue
                del self._buckets[key]
                self.delivered += 1
                await send.send(self._group(bucket))

    def _group(self, trajectories: list[Trajectory]) -> Group:
        trajectories = sorted(trajectories, key=lambda t: t.seeds.member or 0)
        samples = []
        for t in trajectories:
            routes = self.recorder.take(t.ids, t.sampled) if self.recorder is not None else None
            samples.append(Sample(trajectory=t, routes=routes, truncated=t.end_reason == "max_tokens"))
        timings: dict[str, float] = defaultdict(float)
        for t in trajectories:
            for phase, seconds in t.timings.items():
                timings[phase] += seconds
        return Group(
            task_id=trajectories[0].task_id,
            samples=tuple(samples),
            index=trajectories[0].seeds.position or 0,
            timings=dict(timings),
        )
