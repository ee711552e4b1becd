"""Rollouts on Ray (`python -m gym train CONFIG --ray [ADDRESS]`): one rollout actor per node.

Topology. The trainer process (the Ray driver) keeps everything that decides what is trained: the
task stream and its cursor, the credits, staleness and masking (`trainer.producer`, `trainer.loop`).
Only the running of a GRPO group moves: `RayWorkers` offers what `Producer` uses of the gym's
`RolloutWorkers` (``run``) and sends each group drawn from the trainer's stream to the least loaded
`RolloutNode`, an actor pinned to its node (`NodeAffinitySchedulingStrategy`, one per alive node).
Each actor (`trainer.rollout_node`) owns its own policy engine, its own workspace pool on its node's
Docker engine, its grader and task families, and returns the group's trajectories with
``placement["node"]`` (the Ray node id) and the routes of R3.

Weights. In-process engines: the trainer puts the full state dict into the object store once
(``ray.put``) and every actor loads it (``update_weights``) as the new version; `push` returns only
when every live actor has it, so the loop grants groups sampled under a version only after the
actors hold it (each trajectory's ``policy_version`` is what sampled it). HTTP engines: every actor
samples from the one policy server and the trainer's `HttpSync` pushes to it as without Ray.

Failures are infrastructure, never the candidate's: an actor that dies (its node lost, its process
killed) is dropped and its group re-runs on another node; a group that cannot run anywhere (no node
left, the actor raised) comes back masked (``infra_error``, reward None), so the loop's masked-share
bound decides whether the run goes on.

Ray is imported here and in `trainer.rollout_node` only; `trainer.loop` imports them only under ``--ray``.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray
import trio
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gym.environment import Environment
from gym.rollout import episode_seed, group_id
from gym.trajectory import Seeds, Trajectory, TrajectoryBuilder
from sandbox.failure import FailureKind
from trainer.config import TrainConfig
from trainer.errors import RayRolloutError
from trainer.generation_engine import wait_future
from trainer.producer import ConsumedStream
from trainer.rollout_node import remote_node
from trainer.routes import sequence_key

log = logging.getLogger(__name__)

MIN_OBJECT_STORE = 128 * 1024**2
"""Object store of a Ray started here (no ADDRESS): the larger of this and 4 x the weights (a broadcast in
flight while the previous one is still being read)."""


def connect(address: str | None, weights_bytes: int) -> None:
    """Join the cluster at ``address`` (else ``RAY_ADDRESS``), or start a one-node Ray on this host."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        answers(address)
        ray.init(address=address, logging_level=logging.WARNING)
        return
    ray.init(
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        object_store_memory=max(MIN_OBJECT_STORE, 4 * weights_bytes),
        _node_ip_address="127.0.0.1",  # a local Ray listens on loopback only
        logging_level=logging.WARNING,
    )


def answers(address: str, timeout_s: float = 10.0) -> None:
    """Raise RayRolloutError now when a ``host:port`` address does not accept a connection (``ray.init`` would
    retry for minutes, then the process could die in Ray's native client)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", ray://: Ray resolves these itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayRolloutError(
            f"the Ray cluster at {address} does not answer ({exc}): start its head (`ray start --head`) "
            "or give --ray the head's host:port"
        ) from None


def lost_group(
    env: Environment, task, position: int, group_size: int, seed: int, version: int, node: str, reason: str
) -> list[Trajectory]:
    """The masked trajectories of a group no node could run: the prompt only, ``infra_error``, reward None."""
    prompt = env.prompt(task)
    out = []
    for member in range(group_size):
        seeds = Seeds(episode=episode_seed(seed, position, member), rollout=seed, position=position, member=member)
        builder = TrajectoryBuilder.from_messages(
            env.format_for(task), prompt, task_id=task.task_id, policy_version=version, seeds=seeds
        )
        builder.add_failure(FailureKind.INFRA_ERROR)
        trajectory = builder.build(masked=True)
        placement = {"node": node, "error": reason[:300]}
        out.append(
            trajectory.model_copy(
                update={"group_id": group_id(seed, position), "end_reason": "infra_error", "placement": placement}
            )
        )
    return out


class RouteStore:
    """Routes (R3) that came back with trajectories, handed to `Producer` as `RouteRecorder.take` would."""

    def __init__(self) -> None:
        self._routes: dict[str, list[np.ndarray]] = {}

    def put(self, trajectory: Trajectory, routes: np.ndarray | None) -> None:
        if routes is not None:
            self._routes.setdefault(sequence_key(trajectory.ids), []).append(routes)

    def take(self, ids, sampled) -> np.ndarray | None:
        del sampled  # the actor already cut the routes to its trajectory
        key = sequence_key(ids)
        stack = self._routes.get(key)
        if not stack:
            return None
        routes = stack.pop()
        if not stack:
            del self._routes[key]
        return routes

    def pending(self) -> int:
        return sum(len(s) for s in self._routes.values())


@dataclass
class Node:
    """A rollout actor as the trainer sees it."""

    handle: object
    node_id: str
    engine: str = ""
    running: int = 0
    alive: bool = True

    @property
    def name(self) -> str:
        return f"node {self.node_id[:12]}"


class RayWorkers:
    """The `RolloutWorkers` of a Ray cluster: ``opened()`` starts one actor per node, ``run`` runs groups on
    them, ``push`` broadcasts weights (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        env: Environment,
        stream: ConsumedStream,
        address: str | None,
        *,
        bundle_dir: Path | None,
        record_routes: bool,
        weights_bytes: int,
    ) -> None:
        self.config, self.env, self.stream, self.address = config, env, stream, address
        self.bundle_dir = bundle_dir.resolve() if bundle_dir is not None else None
        self.record_routes, self.weights_bytes = record_routes, weights_bytes
        self.routes = RouteStore()
        self.nodes: list[Node] = []
        self.version = 0
        self.lost = 0  # actors lost during the run

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[RayWorkers]:
        """Connect, start an actor on every alive node and wait until each is ready; on exit close them
        (their pools remove their containers) and disconnect."""
        connect(self.address, self.weights_bytes)  # blocking, once: nothing else runs yet
        try:
            await self._start_nodes()
            yield self
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close_nodes)
            ray.shutdown()

    async def _start_nodes(self) -> None:
        loop = self.config.loop
        actor = remote_node(max(4, (1 + loop.max_staleness) * self.config.rollout.groups_per_step))
        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        for node_id in alive:
            handle = actor.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                name=f"gym-rollout-{node_id[:12]}-{os.getpid()}",
            ).remote(
                self.config,
                os.getcwd(),
                str(self.bundle_dir) if self.bundle_dir else None,
                self.record_routes,
                logging.getLogger().getEffectiveLevel(),
            )
            self.nodes.append(Node(handle=handle, node_id=node_id))
        failures = []
        for node in self.nodes:
            try:
                described = await wait_ref(node.handle.describe.remote())
            except ray.exceptions.RayError as exc:
                node.alive = False
                failures.append(f"{node.name}: {first_line(exc)}")
                log.error("rollout actor on %s did not start: %s", node.name, first_line(exc))
                continue
            node.engine = described["engine"]
            log.info(
                "rollout actor on %s (%s, pid %s): Docker engine %s",
                node.name,
                described["ip"],
                described["pid"],
                node.engine,
            )
        if not any(n.alive for n in self.nodes):
            raise RayRolloutError(
                f"no rollout actor started on the {len(self.nodes)} Ray node(s): {'; '.join(failures)}"
            )

    def _close_nodes(self) -> None:
        # every actor, dropped ones too (one dropped at a failed push still runs its pool); a dead one answers at once
        closing = [n.handle.close.remote() for n in self.nodes]
        if closing:
            ready, _ = ray.wait(closing, num_returns=len(closing), timeout=180)
            if len(ready) < len(closing):
                log.warning(
                    "%d rollout actor(s) did not close in time: `gym gc` removes what they left",
                    len(closing) - len(ready),
                )
        for node in self.nodes:
            try:
                ray.kill(node.handle)
            except ray.exceptions.RayError:
                pass
            node.alive = False

    # -------------------------------------------------------- what Producer and the loop use

    async def run(
        self, send_channel: trio.MemorySendChannel[Trajectory], *, groups: int, group_size: int, seed: int
    ) -> None:
        """Draw ``groups`` tasks from the trainer's stream and run each as a group on a node; closes the channel."""
        async with send_channel:
            draws = self.stream.take(groups)
            async with trio.open_nursery() as nursery:
                for position, task in draws:
                    nursery.start_soon(self._group, send_channel, position, task, group_size, seed)

    def push(self, tensors: dict, version: int) -> None:
        """Every live actor's engine samples with ``tensors`` as ``version`` when this returns (blocking: a thread)."""
        self.version = version
        live = [n for n in self.nodes if n.alive]
        if not live:
            return
        weights = ray.put(tensors)
        acks = [(node, node.handle.update_weights.remote(weights, version)) for node in live]
        for node, ack in acks:
            try:
                ray.get(ack)
            except ray.exceptions.RayError as exc:  # its groups would sample old weights: drop it
                self._lost(node, exc)

    # -------------------------------------------------------- one group

    async def _group(self, send, position: int, task, group_size: int, seed: int) -> None:
        tried: set[str] = set()
        while True:
            node = self._least_loaded(tried)
            if node is None:
                reason = "no rollout node left" if not tried else f"lost on {len(tried)} node(s), none left"
                results = [(t, None) for t in self._lost_group(task, position, group_size, seed, "none", reason)]
                break
            node.running += 1
            try:
                results = await wait_ref(node.handle.run_group.remote(task, position, group_size, seed))
            except ray.exceptions.RayActorError as exc:  # the actor (or its node) died: re-run elsewhere
                self._lost(node, exc)
                tried.add(node.node_id)
                continue
            except ray.exceptions.RayError as exc:  # the actor raised: the group is masked, the run goes on
                log.error("group of task %s on %s failed: %s", task.task_id, node.name, exc)
                reason = f"{node.name}: {first_line(exc)}"
                results = [(t, None) for t in self._lost_group(task, position, group_size, seed, node.node_id, reason)]
            finally:
                node.running -= 1
            break
        for trajectory, routes in results:
            self.routes.put(trajectory, routes)
            await send.send(trajectory)

    def _least_loaded(self, exclude: set[str]) -> Node | None:
        live = [n for n in self.nodes if n.alive and n.node_id not in exclude]
        return min(live, key=lambda n: n.running, default=None)

    def _lost(self, node: Node, exc: BaseException) -> None:
        if node.alive:
            node.alive = False
            self.lost += 1
            log.error("rollout actor on %s lost (%s); its groups go to the other nodes", node.name, first_line(exc))

    def _lost_group(self, task, position, group_size, seed, node: str, reason: str) -> list[Trajectory]:
        log.warning("group of task %s (position %d) masked: %s", task.task_id, position, reason)
        return lost_group(self.env, task, position, group_size, seed, self.version, node, reason)


async def wait_ref(ref):
    """The value of a Ray object ref, awaited from trio without holding a thread; raises what Ray raises."""
    return await wait_future(ref.future())


def first_line(exc: BaseException) -> str:
    """One line naming what failed: the actor's own exception rather than Ray's wrapper around it."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    if isinstance(exc, ray.exceptions.RayActorError) and exc.actor_init_failed and lines:
        return lines[-1][:300]  # the constructor's traceback ends with its exception
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
