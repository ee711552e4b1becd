"""`train(config)`: the asynchronous GRPO loop, as a short sequence of named steps.

Rank 0 runs the rollout side on trio (the gym's rollout workers in real Docker workspaces, the
rollout engine, grading in fresh containers) and runs each policy update in a worker thread, so
episodes keep going while the policy trains. Under ``--ray`` the groups run on one rollout actor per
node of a Ray cluster instead (`trainer.ray_workers`); the stream, credits and selection stay here. One step:

1. `collect_batch`: consume finished groups (masking, staleness, penalties, dynamic sampling with
   refill, advantages) until `groups_per_step` groups are kept;
2. `update`: every rank trains on its shard of the batch (`Learner.train_step`);
3. `sync_weights`: every `sync_every` steps the engine gets the new weights (a new version);
4. credits for the next groups go to the producer; metrics, trajectories, checkpoint, eval;
5. the masked share so far against `loop.max_masked_share` (`trainer.masking`): over it, the run
   stops with `MaskedShareError` once summary.json is written.

Other ranks run `trainer.learner.follow`, mirroring rank 0's commands.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import resource
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
import trio

from sandbox.failure import FailureKind
from trainer.checkpoint import TrainerState
from trainer.commands import Command, FreezeReference, Gather, Save, Step, Stop, WarmStart
from trainer.config import TrainConfig
from trainer.distributed import World, broadcast_command, init_world, shutdown
from trainer.errors import ConfigError, MaskedShareError
from trainer.evaluation import passed
from trainer.learner import Learner, follow
from trainer.masking import MaskedTally
from trainer.sample import Group
from trainer.selection import BatchFiller, Scored, select_group
from trainer.staleness import mask_ahead, token_staleness

log = logging.getLogger(__name__)


def bound_malloc_arenas(count: int = 2) -> None:
    """Cap glibc's malloc arenas (M_ARENA_MAX): by default every thread that contends gets its own, up to
    8 per core, and the trio worker threads that run generation and the update step then fragment the
    heap (measured on the main job: peak RSS 2.45 GB uncapped, 1.46 GB with 2 arenas). No-op off glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, count)  # -8 = M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


"""Steps averaged at each end of a run for summary.json's pass_rate_first / pass_rate_last."""


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def record_config(run_dir: Path, text: str, step: int) -> list[str]:
    """Write the run's ``config.json``. A resumed run whose configuration changed keeps the one it ran with
    until now as ``config.step_NNNNNN.json`` and says which fields changed (a warning, and the return value):
    a resume never overwrites the record of how the earlier steps were trained without a word."""
    path = run_dir / "config.json"
    changed: list[str] = []
    if path.is_file():
        try:
            before = _flat(json.loads(path.read_text()))
        except (OSError, ValueError):  # an unreadable record is kept as it is, beside the new one
            before = {}
        after = _flat(json.loads(text))
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k, None) != after.get(k, None))
        if changed:
            kept = run_dir / f"config.step_{step:06d}.json"
            path.replace(kept)
            shown = ", ".join(f"{k} ({before.get(k)!r:.40} -> {after.get(k)!r:.40})" for k in changed[:8])
            more = f" and {len(changed) - 8} more" if len(changed) > 8 else ""
            log.warning("resumed with a changed config: %s%s; the earlier one is kept as %s", shown, more, kept.name)
    path.write_text(text)
    return changed


@dataclass
class StepBatch:
    """What one step consumed."""

    groups: list[Group]
    scored: list[Scored]
    counts: Counter
    wait_s: float
    version: int
    """The learner's weights version when the batch was selected."""
    rewards: list[float] = field(default_factory=list)
    """Rewards of every graded sample consumed (kept groups or not)."""


def train(config: TrainConfig, resume: bool = False, workspaces=None, grader=None, ray: str | None = None) -> dict:
    """Run a whole training job; returns the summary (rank 0; written to RUN/summary.json).

    ``workspaces`` (a `tasks.family.WorkspaceSource`) and ``grader`` (a `tasks.family.TaskGrader`)
    replace the Docker workspace pool and the sandboxed grader (tests drive the loop without Docker).
    ``ray``: None runs the rollouts here; a string runs them on a Ray cluster, one actor per node
    (`trainer.ray_workers`): its address, or "" for ``RAY_ADDRESS`` or a Ray started on this host.
    """
    if ray is not None and workspaces is not None:
        raise ValueError("ray rollouts run in each node's own Docker workspaces: give no workspaces")
    if ray is not None and config.engine.type == "vllm":
        # the weights versions of a vLLM server are counted by the client that pushes (policies.vllm_engine);
        # a node's own client would tag its completions with versions the trainer never made
        raise ConfigError(
            "engine.type: vllm samples from this process; --ray's nodes take engine.type in_process or http"
        )
    started = time.monotonic()
    bound_malloc_arenas()
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    world = init_world(config.distributed, config.device)
    try:
        learner = Learner(config, world, resume)
        if world.is_main:
            return trio.run(Loop(config, learner, world, started, workspaces, grader, ray).run)
        follow(learner)
        return {}
    finally:
        shutdown(world)
        torch.set_num_threads(threads)


class Loop:
    """Rank 0's asynchronous loop (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        learner: Learner,
        world: World,
        started: float,
        workspaces=None,
        grader=None,
        ray: str | None = None,
    ) -> None:
        self.config, self.learner, self.world, self.started = config, learner, world, started
        self.workspaces, self.grader, self.ray = workspaces, grader, ray
        self.correctness_weight = config.env.rubric.correctness.weight
        self.run_dir = Path(config.run_dir)
        self.step_rewards: list[float] = []
        self.step_pass_rates: list[float] = []
        self.evals: list[tuple[int, dict[str, float]]] = []
        self.tally = MaskedTally(config.loop)
        self.tampered = 0  # consumed samples whose grading found the candidate's code in the test run (scored 0)
        self.bundle_budget = None  # the rollout workers' (gym.bundle.BundleBudget): summary.json's bundle_disk
        self.engine = None
        self.sync = None
        self.vllm = None  # engine.type vllm: the engine, its sync and any server this run launched

    def command(self, command: Command) -> None:
        broadcast_command(command, self.world)

    async def run(self) -> dict:
        from gym.environment import Environment
        from sandbox.fleet import open_pool
        from trainer.metrics import MetricsLogger

        if not self.learner.resumed:
            self.set_aside_previous_run()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        record_config(self.run_dir, self.config.model_dump_json(indent=2) + "\n", self.learner.state.step)
        env = Environment(self.config.env)
        state = self.learner.state
        self.metrics = MetricsLogger(
            self.run_dir,
            self.config.metrics,
            self.config.loop.steps,
            state.step,
            run_config=self.config.model_dump(mode="json"),
        )
        stopped: MaskedShareError | None = None
        try:
            if self.workspaces is not None:
                await self.session(env, self.workspaces)
            else:
                async with open_pool(env.config.sandbox) as pool:
                    await self.session(env, pool)
        except MaskedShareError as err:
            stopped = err
        finally:
            self.command(Stop())
            self.metrics.close()
            if self.vllm is not None:
                self.vllm.close()
        summary = self.summary(stopped)
        if stopped is not None:
            raise stopped
        return summary

    def set_aside_previous_run(self) -> None:
        """A fresh run never appends to an earlier run's files: those move to RUN.<timestamp>/."""
        if not self.run_dir.is_dir() or not any(self.run_dir.iterdir()):
            return
        aside = self.run_dir.with_name(f"{self.run_dir.name}.{time.strftime('%Y%m%d-%H%M%S')}")
        self.run_dir.rename(aside)
        log.warning("%s held an earlier run (not resumed): moved to %s", self.run_dir, aside)

    async def session(self, env, pool) -> None:
        if not self.learner.resumed:
            if self.config.warm_start.tasks is not None:
                # RL draws on from where the demos stopped, whether the warm start runs here or ran before
                # (policy.checkpoint); a fresh run's cursor is 0 otherwise
                from trainer.warmup import demo_draw

                self.learner.state.data_cursor = demo_draw(env, self.config.warm_start.tasks)[1]
            if self.config.warm_start.steps:
                await self.warm_start(env, pool)
        self.command(FreezeReference())
        self.learner.freeze_reference()
        await self.start_engine()
        await self.loop(env, pool)

    async def warm_start(self, env, pool) -> None:
        from trainer.warmup import final_answer_demos, reference_demos, warm_start

        started = time.monotonic()
        if self.config.warm_start.demos == "final_answers":
            demos = final_answer_demos(env, self.config.warm_start.tasks)
        else:
            demos = await reference_demos(
                env, pool, self.config.warm_start.tasks, self.config.rollout.seed, self.grader
            )
        self.command(WarmStart(demos))
        losses = await trio.to_thread.run_sync(
            lambda: warm_start(
                self.learner.model,
                demos,
                self.config.warm_start,
                self.config.seed,
                self.learner.sync,
                0,
                self.world.world_size,
                self.learner.update.temperature,
                progress=self.config.metrics.progress,
            )
        )
        self.metrics.log(
            0,
            {
                "warm_start/loss_first": losses[0],
                "warm_start/loss_last": losses[-1],
                "warm_start/demos": len(demos),
                "time/warm_start": time.monotonic() - started,
            },
            kind="warm_start",
        )

    async def start_engine(self) -> None:
        """The rollout engine at the learner's current weights and version."""
        from trainer.generation_engine import BatchingEngine
        from trainer.policy import HttpSync, InProcessSync, build_engine, build_model

        engine_config = self.config.engine
        if engine_config.type == "vllm":
            await self.start_vllm()
            return
        if engine_config.type == "http":
            from gym.policy_client import HttpEngine

            self.engine = HttpEngine(engine_config.url)
            self.sync = HttpSync(engine_config.url)
            await trio.to_thread.run_sync(self.sync.wait_ready)
            await trio.to_thread.run_sync(self.push_weights, self.learner.state.weights_version)
            return
        if self.world.distributed or self.learner.sharding is not None:  # the engine gets a full model of its own
            weights = self.gather_weights()
            model = build_model(self.config.policy, self.config.dtype, self.config.device)
            model.load_state_dict(weights)
        elif self.learner.lora is not None:  # the adapters sit inside the trainer's model: the engine's is the base
            model = build_model(self.config.policy, self.config.dtype, self.config.device)
        else:
            model = self.learner.model
        generation = build_engine(
            model,
            engine_config.max_batch_size,
            mode=engine_config.mode,
            prefill_chunk=engine_config.prefill_chunk,
            partial_rollouts=self.config.loop.partial_rollouts,
        )
        generation.weights_version = self.learner.state.weights_version
        self.engine = BatchingEngine(generation, engine_config.max_batch_size)
        self.sync = InProcessSync(generation)
        if self.learner.lora is not None and not self.world.distributed:  # merged, one tensor at a time
            await trio.to_thread.run_sync(self.push_weights, self.learner.state.weights_version)

    async def start_vllm(self) -> None:
        """engine.type vllm: attach to the server or launch it on the current weights (trainer/vllm_sync.py); an
        attached server gets the current weights pushed, so it samples the trainer's policy from the first turn."""
        from policies.vllm_engine import PROBE_PROMPT
        from trainer.checkpoint import model_directory
        from trainer.vllm_sync import start_vllm

        version = self.learner.state.weights_version
        model = self.learner.model
        model = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA: the base's names
        weights = await trio.to_thread.run_sync(self.gather_weights)
        self.vllm, push = await trio.to_thread.run_sync(
            lambda: start_vllm(
                self.config.engine,
                self.run_dir,
                model_directory(self.config.policy.path),
                model,
                weights,
                version,
                self.config.loop.partial_rollouts,
            )
        )
        self.engine, self.sync = self.vllm.engine, self.vllm.sync
        if push:
            await trio.to_thread.run_sync(self.sync.push, weights, version)
        mode = await self.engine.check_logprobs_mode(list(PROBE_PROMPT))
        log.info("vLLM server(s) %s return %s logprobs", self.engine.url, mode)

    def gather_weights(self) -> dict:
        self.command(Gather())
        return self.learner.weights_for_engine()

    def push_weights(self, version: int) -> None:
        self.sync.push(self.gather_weights(), version)

    async def loop(self, env, pool) -> None:
        from gym.rollout import RolloutWorkers
        from policies.memory_tuning import freeze_startup_objects
        from trainer.producer import ConsumedStream, Producer
        from trainer.routes import RouteRecorder

        config, state = self.config, self.learner.state
        freeze_startup_objects()  # everything built so far lives as long as the run: full collections skip it
        replay = config.algorithm.routing_replay and hasattr(self.learner.model, "update_router_biases")
        stream = ConsumedStream(env.stream(), state.data_cursor, set(state.consumed))
        if self.ray is None:
            recorder = RouteRecorder(self.engine) if replay else None
            workers = RolloutWorkers(
                env,
                recorder or self.engine,
                pool,
                grader=self.grader,
                bundle_dir=self.run_dir / "bundles",
                stream=stream,
            )
            self.bundle_budget = workers.bundle_budget
        else:  # the groups run on the cluster's nodes (routes come back with them); eval and warm start stay here
            workers = self.ray_workers(env, stream, replay)
            recorder = workers.routes if replay else None
        producer = Producer(workers, stream, config.rollout.group_size, config.rollout.seed, recorder)
        self.eval_env = None
        send, receive = trio.open_memory_channel[Group](math.inf)
        stop: MaskedShareError | None = None
        async with workers.opened(), trio.open_nursery() as nursery:
            if self.ray is not None:
                await self.attach(workers)
            if config.eval.every and config.eval.before and state.step == 0:
                await self.evaluate(pool, 0)  # the policy RL starts from (after any warm start)
            nursery.start_soon(producer.run, send)
            producer.grant((1 + config.loop.max_staleness) * config.rollout.groups_per_step)
            while state.step < config.loop.steps:
                step_started = time.monotonic()
                batch = await self.collect_batch(receive, producer, stream)
                train_started = time.monotonic()
                figures = await trio.to_thread.run_sync(self.update, batch.scored)
                sync_started = time.monotonic()
                state.step += 1
                if config.loop.updates_per_batch and state.step % config.loop.sync_every == 0:
                    state.weights_version += 1
                    await trio.to_thread.run_sync(self.push_weights, state.weights_version)
                producer.grant(config.rollout.groups_per_step)
                done = time.monotonic()
                figures.update(self.step_metrics(batch))
                figures.update({f"sync/{k}": v for k, v in getattr(self.sync, "last", {}).items()})  # vLLM pushes
                if self.vllm is not None:  # the servers in the rotation, those that left it
                    figures.update(self.vllm.engine.router.figures())
                figures.update(
                    {
                        "time/wait_rollout": train_started - step_started,
                        "time/train": sync_started - train_started,
                        "time/sync": done - sync_started,
                        "time/step": done - step_started,
                        "perf/tokens_per_s": figures.get("tokens", 0.0) / max(done - step_started, 1e-9),
                        "perf/train_tokens_per_s": figures.get("tokens", 0.0) / max(sync_started - train_started, 1e-9),
                        "perf/peak_rss_mb": peak_rss_mb(),
                    }
                )
                self.metrics.log(state.step, figures)
                self.write_trajectories(batch.groups)
                state.data_cursor, state.consumed = stream.cursor()
                if state.step % config.checkpoint.every == 0 or state.step == config.loop.steps:
                    await trio.to_thread.run_sync(self.save)
                if config.eval.every and (state.step % config.eval.every == 0 or state.step == config.loop.steps):
                    await self.evaluate(pool, state.step)
                if (stop := self.tally.exceeded()) is not None:
                    break
            nursery.cancel_scope.cancel()
        if stop is not None:  # raised outside the nursery, so it is not wrapped in an exception group
            raise stop

    def ray_workers(self, env, stream, replay: bool):
        from trainer.ray_workers import RayWorkers

        weights_bytes = sum(t.numel() * t.element_size() for t in self.learner.model.state_dict().values())
        return RayWorkers(
            self.config,
            env,
            stream,
            self.ray or None,
            bundle_dir=self.run_dir / "bundles",
            record_routes=replay,
            weights_bytes=weights_bytes,
        )

    async def attach(self, workers) -> None:
        """In-process engines: every node's engine gets the learner's weights and version now, and every later
        push with this process's own (evaluation) engine. A policy server (engine.type http) is pushed to as ever."""
        if self.config.engine.type != "in_process":
            return
        version = self.learner.state.weights_version
        await trio.to_thread.run_sync(lambda: workers.push(self.gather_weights(), version))
        from trainer.policy import FanOutSync

        self.sync = FanOutSync((self.sync, workers))

    def update(self, scored: list[Scored]) -> dict[str, float]:
        if not self.config.loop.updates_per_batch:  # a baseline run: the weights stay the starting ones
            return {}
        self.command(Step(scored))
        return self.learner.train_step(scored)

    def save(self) -> None:
        self.command(Save(self.learner.state))
        self.learner.save()

    async def collect_batch(self, receive, producer, stream) -> StepBatch:
        """Consume groups until the batch is full; dropped groups are replaced by new draws.

        On-policy (max_staleness = 0) replacements are drawn in rounds, once every outstanding group
        is in, so a step's groups do not depend on the order episodes finish in (exact resume);
        otherwise a replacement is drawn as soon as a group is dropped.
        """
        config = self.config
        filler = BatchFiller(config.rollout.groups_per_step, config.algorithm.dynamic_sampling.max_draw_factor)
        rewards: list[float] = []
        waited = 0.0
        while not filler.done:
            started = time.monotonic()
            group = mask_ahead(await receive.receive(), self.learner.state.weights_version)
            waited += time.monotonic() - started
            offsets = await trio.to_thread.run_sync(self.learner.kl_reward_offsets, group)
            outcome = select_group(group, self.learner.state.weights_version, config.algorithm, config.loop, offsets)
            filler.add(group, outcome)
            stream.consumed(group.index)
            self.tally.add(group.samples)
            self.tampered += sum(FailureKind.TAMPERED in s.trajectory.failures for s in group.samples)
            rewards.extend(s.reward for s in group.samples if not s.masked)
            missing = filler.groups_per_step - filler.kept_groups
            if filler.done or missing <= 0:
                continue
            # groups granted but not received: waiting for a credit, running, or delivered and queued here
            # (counting only the producer's side would refill while finished groups wait in the channel:
            # extra groups on the current weights, stale at the next step)
            pending = producer.outstanding + receive.statistics().current_buffer_used
            if config.loop.max_staleness == 0:
                if pending == 0:
                    producer.grant(missing)
            elif pending < missing:
                producer.grant(missing - pending)
        scored = sorted(
            filler.scored,
            key=lambda s: (s.sample.trajectory.seeds.position or 0, s.sample.trajectory.seeds.member or 0),
        )
        self.step_rewards.append(mean(rewards))
        graded = [s for g in filler.groups for s in g.samples if not s.masked]
        self.step_pass_rates.append(
            mean([float(passed(s.trajectory.reward_breakdown, self.correctness_weight)) for s in graded])
        )
        return StepBatch(
            groups=filler.groups,
            scored=scored,
            counts=filler.counts,
            wait_s=waited,
            version=self.learner.state.weights_version,
            rewards=rewards,
        )

    def step_metrics(self, batch: StepBatch) -> dict[str, float]:
        samples = [s for g in batch.groups for s in g.samples]
        graded = [s for s in samples if not s.masked]
        gaps = [batch.version - s.version for s in samples] or [0]
        phases = Counter()
        for group in batch.groups:
            phases.update(group.timings)
        ends = Counter(s.trajectory.end_reason or "unknown" for s in samples)
        figures = {
            "reward/mean": mean(batch.rewards),
            "reward/std": statistics.pstdev(batch.rewards) if len(batch.rewards) > 1 else 0.0,
            "reward/kept_mean": mean([s.reward for s in batch.scored]),
            "reward/correct_share": mean(
                [float(s.trajectory.reward_breakdown.get("correctness", 0.0) > 0) for s in graded]
            ),
            "reward/pass_rate": self.step_pass_rates[-1] if self.step_pass_rates else 0.0,
            "staleness/mean": mean([max(0, g) for g in gaps]),
            "staleness/max": float(max(max(gaps), 0)),
            "samples/drawn": float(len(samples)),
            "samples/trained": float(len(batch.scored)),
            "samples/masked_share": batch.counts["masked"] / max(len(samples), 1),
            "samples/masked_share_run": self.tally.share,
            "samples/sampled_tokens_mean": mean([float(s.num_sampled) for s in samples]),
            "groups/drawn": float(len(batch.groups)),
            "weights_version": float(batch.version),
            **{f"time/episode_{k}": float(v) for k, v in phases.items()},
            **{f"end/{k}": float(v) for k, v in ends.items()},
            **{f"count/{k}": float(v) for k, v in batch.counts.items()},
        }
        if self.config.loop.partial_rollouts:  # staleness of each token by its own version (trainer.staleness)
            trajectories = (s.trajectory for s in graded)
            figures.update(token_staleness(trajectories, batch.version, self.config.loop.max_staleness))
        return figures

    def write_trajectories(self, groups: list[Group]) -> None:
        if not self.config.write_trajectories:
            return
        from gym.trajectory import write_jsonl

        write_jsonl(self.run_dir / "trajectories.jsonl", (s.trajectory for g in groups for s in g.samples), append=True)

    async def evaluate(self, pool, step: int) -> None:
        """pass@k on the held-out environment with the current engine weights."""
        from gym.environment import Environment
        from gym.registry import environment_config
        from gym.rollout import collect_async
        from trainer.evaluation import evaluate, per_task
        from trainer.sample import Sample

        if self.eval_env is None:
            self.eval_env = Environment(environment_config(self.config.eval.environment))  # a file or a name
        env = self.eval_env
        started = time.monotonic()
        # the same seeds at every step: evaluations differ by the weights only (common random numbers)
        trajectories, _ = await collect_async(
            env,
            self.engine,
            pool,
            len(env.tasks),
            self.config.eval.samples,
            self.config.rollout.seed + 1_000_003,
            stream=env.stream(),
            grader=self.grader,
        )
        by_group: dict[str, list] = {}
        for t in trajectories:
            by_group.setdefault(t.group_key, []).append(Sample(t))
        groups = [Group(task_id=s[0].trajectory.task_id, samples=tuple(s)) for s in by_group.values()]
        weight = env.config.rubric.correctness.weight
        figures = evaluate(groups, self.config.eval.k, weight)
        figures["time/eval"] = time.monotonic() - started
        self.evals.append((step, figures))
        counts = {task: list(pair) for task, pair in per_task(groups, weight).items()}
        with (self.run_dir / "evals.jsonl").open("a") as out:  # task -> [passing, graded]: paired comparisons
            out.write(json.dumps({"step": step, "per_task": counts}) + "\n")
        log.info(
            "held-out eval at step %d: %s",
            step,
            ", ".join(f"{k} {v:.3f}" for k, v in figures.items() if k.startswith("pass@")),
        )
        self.metrics.log(step, figures, kind="eval")

    def summary(self, stopped: MaskedShareError | None = None) -> dict:
        """summary.json. reward_first / reward_last and pass_rate_first / pass_rate_last: mean reward and
        share of graded episodes passing every test over the same first / last quarter of this run's steps
        (``window_steps``, at least one step each): one step's 16 samples swing with the tasks drawn.
        heldout_pass1_before / _after: pass@1 of the
        evaluation before the first step (``eval.before``) and of the last one after it (null if none).
        masked_share: masked / consumed samples of this run (``samples``), with the most frequent
        reasons; tampered: consumed samples graded ``tampered`` (the candidate's code reached into an SWE test
        run: scored 0, never masked); ``stopped``: the MaskedShareError's message when the run stopped on it,
        else null."""
        state = self.learner.state
        rewards, rates = self.step_rewards, self.step_pass_rates
        window = max(1, len(rewards) // 4)  # one window for every first/last figure
        before = next((f.get("pass@1") for step, f in self.evals if step == 0), None)
        after = next((f.get("pass@1") for step, f in reversed(self.evals) if step > 0), None)
        summary = {
            "wall_s": round(time.monotonic() - self.started, 2),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "steps": state.step,
            "reward_first": round(mean(rewards[:window]), 4) if rewards else None,
            "reward_last": round(mean(rewards[-window:]), 4) if rewards else None,
            "window_steps": window,
            "rewards": [round(r, 4) for r in rewards],
            "pass_rate_first": round(mean(rates[:window]), 4) if rates else None,
            "pass_rate_last": round(mean(rates[-window:]), 4) if rates else None,
            "pass_rates": [round(r, 4) for r in rates],
            "heldout_pass1_before": round(before, 4) if before is not None else None,
            "heldout_pass1_after": round(after, 4) if after is not None else None,
            "samples": self.tally.samples,
            "masked": self.tally.masked,
            "masked_share": round(self.tally.share, 4),
            "masked_reasons": dict(self.tally.reasons.most_common(5)),
            "tampered": self.tampered,
            "stopped": str(stopped) if stopped is not None else None,
            "weights_version": state.weights_version,
            "resumed": self.learner.resumed,
            "bundle_disk": budget.figures() if (budget := self.bundle_budget) is not None else None,
        }
        if budget is not None and (budget.skipped or budget.truncated):
            log.warning(
                "bundles: %d written, %d truncated (%d bytes cut), %d skipped (%d bytes) past replay.run_bytes %d",
                budget.written,
                budget.truncated,
                budget.cut_bytes,
                budget.skipped,
                budget.skipped_bytes,
                budget.limit,
            )
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.draw_curves()
        return summary

    def draw_curves(self) -> None:
        """``curves.png`` next to summary.json (`gym.plot`); a picture that cannot be drawn never fails the run."""
        from gym.plot import PlotError, curves

        try:
            curves(self.run_dir)
        except (PlotError, ImportError, OSError, ValueError, RuntimeError) as exc:
            log.warning("curves.png not drawn: %s", exc)


__all__ = ["Loop", "StepBatch", "TrainerState", "train"]
