"""`python -m gym bench swe`: SWE episodes with the scripted reference, and where their time goes.

Runs ``--episodes`` episodes of ``configs/swe_smoke.yaml`` (the shipped instances; images are built
first, cached by input hash, and that time is not counted) with ``scripted:reference`` (gold patch
through ``apply_patch``, the tests through ``bash``, ``submit``), then measures the instance
workspace's readiness on its own: ``--prepares`` times per instance, a fresh container of the
instance image acquired and prepared (repository copied into the tmpfs, problem statement written).

``--json FILE`` keys: ``episodes``, ``instances``, ``concurrency``, ``episodes_per_min`` (whole run,
wall clock), ``mean_reward``, ``prepare_p50_s`` / ``prepare_p95_s`` (workspace ready),
``grade_p50_s`` (an episode's grading phase: the diff taken in a fresh container, then the tests in
another), ``share_policy``, ``share_tools``, ``share_grading``, ``share_workspace`` (of the summed
episode time), ``wall_s``. Target: ``prepare_p50_s`` <= 2 s.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

DEFAULT_CONFIG = Path("configs/swe_smoke.yaml")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="SWE environment YAML or registered name (default swe_smoke)",
    )
    parser.add_argument("--episodes", type=int, default=6, help="episodes to run (default 6)")
    parser.add_argument("--prepares", type=int, default=5, help="workspace preparations timed per instance (default 5)")
    parser.add_argument("--concurrency", type=int, default=None, help="episodes at once (default: the config's)")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run(args: argparse.Namespace) -> dict:
    import trio

    from gym.environment import Environment
    from gym.environment_config import EnvironmentConfigError
    from gym.registry import environment_config
    from gym.rollout import RolloutWorkers, summarize
    from gym.scripted import load_scripted
    from sandbox.fleet import open_pool
    from tasks.families import kind_of
    from tasks.swe.family import SWE, SweFamily

    env = Environment(environment_config(args.config))  # a file or a registered name
    if not any(kind_of(task) is SWE for task in env.tasks.values()):
        raise EnvironmentConfigError(f"{args.config}: `bench swe` needs an environment with a SWE task pool")
    engine = load_scripted("reference", env)
    concurrency = args.concurrency or env.config.concurrency

    async def main() -> tuple[list, float, list[float]]:
        async with open_pool(env.config.sandbox) as pool:
            workers = RolloutWorkers(env, engine, pool, concurrency=concurrency)
            family = workers.families.named("swe")
            assert isinstance(family, SweFamily), "the environment's SWE instances make a SWE family"
            await family.build()  # images first: their build is not an episode's time
            send, receive = trio.open_memory_channel(0)
            trajectories, prepares = [], []
            started = time.monotonic()
            async with workers.families.opened():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(functools.partial(workers.run, send, groups=args.episodes, group_size=1, seed=0))
                    async for trajectory in receive:
                        trajectories.append(trajectory)
                wall = time.monotonic() - started
                for instance in family.instances.values():
                    for _ in range(args.prepares):
                        began = time.monotonic()
                        async with family.workspace(instance, owner="bench-swe"):
                            prepares.append(time.monotonic() - began)
            return trajectories, wall, prepares

    trajectories, wall, prepares = trio.run(main)
    summary = summarize(trajectories, wall)
    grading = [t.timings.get("grading", 0.0) for t in trajectories if not t.masked]
    return {
        "episodes": summary["episodes"],
        "instances": len({t.task_id for t in trajectories}),
        "concurrency": concurrency,
        "episodes_per_min": 60.0 * summary["episodes"] / wall if wall > 0 else 0.0,
        "mean_reward": summary["mean_reward"],
        "masked": summary["masked"],
        "prepare_p50_s": statistics.median(prepares) if prepares else 0.0,
        "prepare_p95_s": _quantile(prepares, 0.95),
        "grade_p50_s": statistics.median(grading) if grading else 0.0,
        "share_policy": summary["share_policy"],
        "share_tools": summary["share_tools"],
        "share_grading": summary["share_grading"],
        "share_workspace": summary["share_workspace"],
        "wall_s": round(wall, 3),
    }
