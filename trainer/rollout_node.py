"""The rollout actor of one Ray node (`gym train --ray`; the trainer's side: `trainer.ray_workers`).

`RolloutNode` runs a trio loop in a thread of its own holding the node's workspace pool (the config's
``sandbox`` section with the default engine resolution: this process's ``DOCKER_HOST`` /
``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``, which Ray workers inherit from their node's raylet, else the
local unix socket), its policy engine (in process, or the policy server's URL), the grader and the task
families. Ray calls arrive on the actor's threads: ``run_group`` (concurrency group ``rollout``) hands a
group to the trio loop and returns its trajectories, each with ``placement["node"]`` (the Ray node id)
and its routes for R3; ``update_weights``, ``describe`` and ``close`` (group ``control``) never wait
behind running groups. ``close`` cancels the running groups and closes the pool, which removes their
containers; an actor whose trio loop died exits, so the trainer re-runs its groups elsewhere.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path

import numpy as np
import ray
import trio

from gym.environment import Environment
from gym.rollout import RolloutWorkers
from gym.trajectory import Trajectory
from trainer.config import TrainConfig

log = logging.getLogger(__name__)


class RolloutNode:
    """The rollout worker of one node: a trio loop in a thread holds the pool, the engine and the task
    families; Ray calls (threads of the actor) hand groups to it. Methods in the ``control`` group
    (weights, description, close) never wait behind the ``rollout`` group's running groups."""

    def __init__(self, config: TrainConfig, cwd: str, bundle_dir: str | None, record_routes: bool, log_level: int):
        logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
        if os.path.isdir(cwd):  # the config's relative paths (tasks, tokenizer) are relative to the trainer's
            os.chdir(cwd)
        import torch

        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.config, self.record_routes = config, record_routes
        self.node_id = ray.get_runtime_context().get_node_id()
        self.bundle_dir = Path(bundle_dir) / f"node-{self.node_id[:12]}" if bundle_dir else None
        self.generation, self.sync = self._generation_engine()
        self.engine_url = ""
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gym-rollout-node", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _generation_engine(self):
        """In process: a generation engine over a model of the policy's shape (its weights come by `update_weights`)."""
        if self.config.engine.type != "in_process":
            return None, None
        from trainer.policy import InProcessSync, build_engine, build_model

        model = build_model(self.config.policy, self.config.dtype, "cpu")
        generation = build_engine(
            model,
            self.config.engine.max_batch_size,
            mode=self.config.engine.mode,
            prefill_chunk=self.config.engine.prefill_chunk,
            partial_rollouts=self.config.loop.partial_rollouts,
        )
        del model
        return generation, InProcessSync(generation)

    def _serve(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor, or ends the actor
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
                return
            # The pool is closed already (the exception left its context): an actor that can run nothing must
            # die, so the trainer's calls fail as RayActorError and its groups re-run on other nodes.
            log.exception("rollout node %s stopped; its actor exits", self.node_id[:12])
            os._exit(70)
        finally:
            self._ready.set()

    def _rollout_engine(self):
        if self.generation is None:
            from gym.policy_client import HttpEngine

            engine = HttpEngine(self.config.engine.url)
        else:
            from trainer.generation_engine import BatchingEngine

            engine = BatchingEngine(self.generation, self.config.engine.max_batch_size)
        if self.record_routes:
            from trainer.routes import RouteRecorder

            return RouteRecorder(engine)
        return engine

    async def _main(self) -> None:
        from sandbox.fleet import open_pool

        env = Environment(self.config.env)
        self._token, self._stop = trio.lowlevel.current_trio_token(), trio.Event()
        engine = self._rollout_engine()
        self.recorder = engine if self.record_routes else None
        async with open_pool(env.config.sandbox) as pool:  # sandbox.engines: this node's own fleet
            self.engine_url = getattr(getattr(pool, "engine", None), "url", "")
            self.workers = RolloutWorkers(env, engine, pool, bundle_dir=self.bundle_dir)
            async with self.workers.opened(), trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()  # groups still running end here; the pool then removes their containers

    @ray.method(concurrency_group="control")
    def describe(self) -> dict[str, str]:
        return {
            "node": self.node_id,
            "ip": ray.util.get_node_ip_address(),
            "engine": self.engine_url,
            "pid": str(os.getpid()),
        }

    @ray.method(concurrency_group="control")
    def update_weights(self, tensors: dict, version: int) -> int:
        """Sample with ``tensors`` (the object store's copy, resolved by Ray) as ``version`` from now on."""
        self.sync.push(tensors, version)
        return version

    @ray.method(concurrency_group="rollout")
    def run_group(self, task, position: int, group_size: int, seed: int) -> list[tuple[Trajectory, np.ndarray | None]]:
        """Run one GRPO group of ``task`` (drawn at ``position`` of the trainer's stream); its trajectories
        with their routes (None without R3)."""
        return trio.from_thread.run(self._run_group, task, position, group_size, seed, trio_token=self._token)

    async def _run_group(self, task, position: int, group_size: int, seed: int):
        """In the node's nursery (not as a trio system task), so closing the node cancels the group first."""
        done, box = trio.Event(), {}

        async def body() -> None:
            try:
                box["value"] = await self._group(task, position, group_size, seed)
            except Exception as exc:  # noqa: BLE001 - handed back to the Ray call, which re-raises it
                box["error"] = exc
            finally:
                done.set()

        self._nursery.start_soon(body)
        await done.wait()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise RuntimeError(f"rollout node {self.node_id[:12]} closed while the group ran")
        return box["value"]

    async def _group(self, task, position: int, group_size: int, seed: int):
        send, receive = trio.open_memory_channel[Trajectory](math.inf)
        await self.workers.run_draws(send, [(position, task)], group_size=group_size, seed=seed)
        out = []
        async with receive:
            async for trajectory in receive:  # run_draws closed the channel: every trajectory is here
                routes = self.recorder.take(trajectory.ids, trajectory.sampled) if self.recorder else None
                placement = {**trajectory.placement, "node": self.node_id}
                if self.engine_url:  # gym.episode names the engine of the workspace; this is the pool's
                    placement.setdefault("engine", self.engine_url)
                out.append((trajectory.model_copy(update={"placement": placement}), routes))
        return out

    @ray.method(concurrency_group="control")
    def close(self, timeout_s: float = 120.0) -> bool:
        """Cancel running groups, release the pool (its containers removed); True when it is all done."""
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def remote_node(concurrency: int):
    """The actor class with its concurrency groups: ``rollout`` runs that many groups at once (more queue)."""
    return ray.remote(
        num_cpus=0,  # the node's CPUs belong to its workspaces and engine, not to Ray's bookkeeping
        max_restarts=0,  # a restarted actor would hold version-0 weights: the group re-runs elsewhere instead
        concurrency_groups={"control": 2, "rollout": concurrency},
    )(RolloutNode)
