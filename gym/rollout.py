"""Rollout workers: many episodes at once, finished trajectories streamed into a trio channel.

The trainer's entry point::

    send, receive = trio.open_memory_channel(0)
    async with open_pool(env.config.sandbox) as pool:
        workers = RolloutWorkers(env, engine, pool)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(workers.run, send, groups=8, group_size=4, seed=step))
            async for trajectory in receive:     # arrives as each episode finishes
                ...                              # trajectory.group_id, .task_id, .policy_version, .reward

``run`` draws ``groups`` tasks from the environment's task stream (continuing
where the previous call stopped; ``workers.stream.position`` is the resumable
cursor, ``shard=(w, n)`` splits the stream across worker processes) and runs
``group_size`` episodes of each: a GRPO group, whose trajectories share a
``group_id``. At most ``concurrency`` episodes run at once (each holds one
workspace; grading takes a second one briefly after the first is released).
Each trajectory carries the weights version that sampled it (the oldest
version when weights changed mid-episode). ``run`` closes the send channel
it is given when done: pass ``send.clone()`` to keep yours open.

``collect(env, engine, n_groups, group_size, seed)`` is the synchronous
helper: it opens a pool, runs the workers and returns the trajectories;
``collect_into(workers, ..., keep)`` hands each one over as it finishes
(``rollout`` streams them to disk).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from gym.bundle import BundleBudget, bundle_name, bundle_of, bundle_reason, image_digest
from gym.environment import Environment
from gym.episode import EpisodeResult, run_episode
from gym.run_dir import write_atomic
from gym.task_stream import TaskStream
from gym.trajectory import Trajectory
from policies.sampling import RolloutEngine
from sandbox.errors import InfraError
from sandbox.failure import FailureKind, Verdict
from sandbox.fleet import FleetPool, open_pool
from sandbox.pool import WorkspacePool
from tasks.family import Families, TaskGrader, WorkspaceSource
from tasks.grader import Grader

log = logging.getLogger(__name__)


def episode_seed(seed: int, position: int, member: int) -> int:
    """The sampling seed of one group member (a hash: distinct, reproducible, not correlated)."""
    digest = hashlib.sha256(f"{seed}:{position}:{member}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def group_id(seed: int, position: int) -> str:
    """The GRPO group of the task drawn at ``position`` by a rollout seeded ``seed`` (its trajectories share it)."""
    return f"{seed}-{position}"


class RolloutWorkers:
    """Runs GRPO groups of episodes concurrently (see the module docstring)."""

    def __init__(
        self,
        env: Environment,
        engine: RolloutEngine,
        pool: WorkspaceSource,
        *,
        grader: TaskGrader | None = None,
        concurrency: int | None = None,
        shard: tuple[int, int] = (0, 1),
        bundle_dir: Path | None = None,
        stream: TaskStream | None = None,
    ) -> None:
        self.env, self.engine, self.pool = env, engine, pool
        if grader is None:
            if not isinstance(pool, WorkspacePool | FleetPool):
                raise TypeError("give a grader when the pool is not a sandbox pool (WorkspacePool, FleetPool)")
            grader = Grader(pool, env.config.grader)
        self.grader = grader
        self.families: Families = env.families(pool, grader)
        self.limiter = trio.CapacityLimiter(concurrency or env.config.concurrency)
        self.stream = stream or env.stream(shard)
        self.bundle_dir = bundle_dir
        # the run's disk for bundles (replay.run_bytes): what bundle_dir holds already counts (a resumed run)
        self.bundle_budget = BundleBudget(env.config.replay.run_bytes, bundle_dir)
        self.results: list[EpisodeResult] = []  # finished episodes, in finishing order (bundles, reports)
        self.bundles: list[Path] = []
        self._digests: dict[str, str] = {}  # image id of every workspace image, by name

    async def run(
        self, send_channel: trio.MemorySendChannel[Trajectory], *, groups: int, group_size: int, seed: int
    ) -> None:
        """Run ``groups`` x ``group_size`` episodes, sending each trajectory when its episode ends."""
        if groups < 0 or group_size < 1:
            raise ValueError(f"need groups >= 0 and group_size >= 1, got {groups} and {group_size}")
        await self.run_draws(send_channel, self.stream.take(groups), group_size=group_size, seed=seed)

    async def run_draws(
        self,
        send_channel: trio.MemorySendChannel[Trajectory],
        draws: list[tuple[int, object]],
        *,
        group_size: int,
        seed: int,
    ) -> None:
        """Run ``group_size`` episodes of each (position, task) drawn elsewhere (`gym train --ray`: the trainer
        draws, a node's workers run), sending each trajectory when its episode ends; closes ``send_channel``."""
        if group_size < 1:
            raise ValueError(f"need group_size >= 1, got {group_size}")
        async with send_channel, self.families.opened():
            async with trio.open_nursery() as nursery:
                for position, task in draws:
                    for member in range(group_size):
                        nursery.start_soon(self._episode, send_channel, task, position, member, seed)

    def opened(self):
        """The task families' resources, held open for as long as the workers are used (an async context)."""
        return self.families.opened()

    async def _episode(
        self, send: trio.MemorySendChannel[Trajectory], task: object, position: int, member: int, seed: int
    ) -> None:
        async with self.limiter:
            result = await run_episode(
                self.env,
                self.engine,
                self.families.of(task),
                task,
                seed=episode_seed(seed, position, member),
                group_id=group_id(seed, position),
            )
        seeds = result.trajectory.seeds.model_copy(update={"rollout": seed, "position": position, "member": member})
        update = {"seeds": seeds, "failures": failures_with_grading(result)}
        result = result.model_copy(update={"trajectory": result.trajectory.model_copy(update=update)})
        index = len(self.results)  # taken before the await: episodes finishing meanwhile append too
        self.results.append(result)
        await self._maybe_bundle(result, index, f"{seed}:{position}:{member}")
        trajectory = result.trajectory
        log.debug(
            "episode %d done: task %s reward %s end %s%s",
            index + 1,
            task.task_id,
            trajectory.reward,
            trajectory.end_reason,
            " (masked)" if trajectory.masked else "",
        )
        await send.send(trajectory)

    async def _maybe_bundle(self, result: EpisodeResult, index: int, key: str) -> None:
        if self.bundle_dir is None:
            return
        replay = self.env.config.replay
        reason = bundle_reason(result, key, rate=replay.rate, failures=replay.failures, seed=replay.seed)
        if reason is None:
            return
        task = self.env.tasks[result.trajectory.task_id]
        try:
            pool = self.families.of(task).pool_for(task)
        except InfraError:  # no image for this instance: nothing ran on one, and the bundle says so ('')
            pool = None
        image = "" if pool is None else getattr(getattr(pool, "config", None), "image", self.env.config.sandbox.image)
        if image not in self._digests:
            self._digests[image] = await image_digest(pool)
        path = self.bundle_dir / bundle_name(index, result.trajectory.task_id)
        try:
            bundle = bundle_of(self.env, result, reason, self._digests[image], image=image)  # fields bounded
            text = bundle.model_dump_json(indent=1)
            if not self.bundle_budget.admit(len(text.encode("utf-8", "surrogatepass"))):
                return
            self.bundle_budget.count_cuts(bundle.cuts)
            if bundle.cuts:  # a warning the first time; summary.json and the closing line count every one
                log.log(
                    logging.WARNING if self.bundle_budget.truncated == 1 else logging.DEBUG,
                    "episode %d (%s): bundle truncated: %d fields of %d bytes cut (replay.bytes_floor/bytes_per_token)",
                    index + 1,
                    result.trajectory.task_id,
                    len(bundle.cuts),
                    sum(cut.bytes for cut in bundle.cuts),
                )
            self.bundles.append(await trio.to_thread.run_sync(write_atomic, path, text))
        except (ValueError, UnicodeError, OSError) as exc:  # a bundle that cannot be written never ends the run
            log.error("episode %d (%s): bundle not written: %s", index + 1, result.trajectory.task_id, str(exc)[:300])


async def collect_async(
    env: Environment,
    engine: RolloutEngine,
    pool: WorkspaceSource,
    n_groups: int,
    group_size: int,
    seed: int,
    **options: object,
) -> tuple[list[Trajectory], RolloutWorkers]:
    """Run the workers on ``pool`` and gather every trajectory (in finishing order)."""
    workers = RolloutWorkers(env, engine, pool, **options)  # type: ignore[arg-type]
    trajectories: list[Trajectory] = []

    async def gather(trajectory: Trajectory) -> None:
        trajectories.append(trajectory)

    await collect_into(workers, n_groups, group_size, seed, gather)
    return trajectories, workers


async def collect_into(
    workers: RolloutWorkers, n_groups: int, group_size: int, seed: int, keep: Callable[[Trajectory], Awaitable[object]]
) -> None:
    """Run ``workers``, awaiting ``keep(trajectory)`` as each episode finishes (the next one waits for it).

    Cancelling it stops the episodes in flight; every trajectory already kept stays kept.
    """
    send, receive = trio.open_memory_channel[Trajectory](0)
    async with workers.families.opened(), trio.open_nursery() as nursery:
        nursery.start_soon(_run_workers, workers, send, n_groups, group_size, seed)
        async with receive:
            async for trajectory in receive:
                await keep(trajectory)


async def _run_workers(
    workers: RolloutWorkers, send: trio.MemorySendChannel[Trajectory], groups: int, group_size: int, seed: int
) -> None:
    await workers.run(send, groups=groups, group_size=group_size, seed=seed)


def collect(
    env: Environment, engine: RolloutEngine, n_groups: int, group_size: int, seed: int, **options: object
) -> list[Trajectory]:
    """Synchronous: open a workspace pool, run ``n_groups`` groups of ``group_size`` episodes, return them."""

    async def main() -> list[Trajectory]:
        async with open_pool(env.config.sandbox) as pool:
            trajectories, _ = await collect_async(env, engine, pool, n_groups, group_size, seed, **options)
            return trajectories

    return trio.run(main)


PHASES = ("policy", "tools", "grading", "workspace")


def failures_with_grading(result: EpisodeResult) -> tuple[FailureKind, ...]:
    """The trajectory's failures, with ``tampered`` when grading found the candidate's code reaching into the test
    run (an SWE grade: every test's verdict ``tampered``); summary.json counts such episodes."""
    failures = result.trajectory.failures
    tests = result.grading.tests if result.grading is not None else ()
    if any(t.verdict == Verdict.TAMPERED for t in tests) and FailureKind.TAMPERED not in failures:
        return (*failures, FailureKind.TAMPERED)
    return failures


def summarize(trajectories: list[Trajectory], wall_s: float) -> dict[str, object]:
    """Figures of a batch: rewards, masks, end reasons, throughput, and where episode time went.

    ``share_PHASE`` is that phase's share of the summed phase time of all
    episodes (episodes overlap, so these are shares of episode time, not of
    wall time); ``workspace`` is acquiring and releasing the episode workspace.
    """
    rewards = [t.reward for t in trajectories if t.reward is not None]
    spent = {phase: sum(t.timings.get(phase, 0.0) for t in trajectories) for phase in PHASES}
    whole = sum(spent.values()) or 1.0
    ends: dict[str, int] = {}
    for t in trajectories:
        ends[str(t.end_reason)] = ends.get(str(t.end_reason), 0) + 1
    return {
        "episodes": len(trajectories),
        "masked": sum(t.masked for t in trajectories),
        "tampered": sum(FailureKind.TAMPERED in t.failures for t in trajectories),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "min_reward": min(rewards) if rewards else None,
        "reward_1": sum(r == 1.0 for r in rewards),
        "end_reasons": ends,
        "wall_s": round(wall_s, 3),
        "episodes_per_s": len(trajectories) / wall_s if wall_s > 0 else 0.0,
        **{f"share_{phase}": spent[phase] / whole for phase in PHASES},
    }
