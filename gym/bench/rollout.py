"""`python -m gym bench rollout`: rollout throughput with the scripted reference policy, and where time goes.

Runs ``--episodes`` episodes of an environment (default ``configs/cp_smoke.yaml``)
with ``scripted:reference`` on a fresh workspace pool (no bundles) and reports
episodes per second over the whole run (pool start-up included) and each
phase's share of the summed episode time: ``policy`` (engine calls),
``tools`` (tool calls in the workspace), ``grading`` (fresh grading
container + tests) and ``workspace`` (acquiring and releasing the episode's
workspace). ``--json FILE`` keys: ``episodes``, ``concurrency``,
``episodes_per_s``, ``mean_reward``, ``share_policy``, ``share_tools``,
``share_grading``, ``share_workspace``, ``wall_s``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_CONFIG = Path("configs/cp_smoke.yaml")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="environment YAML or registered name (default cp_smoke)"
    )
    parser.add_argument("--episodes", type=int, default=32, help="episodes to run (default 32)")
    parser.add_argument("--concurrency", type=int, default=None, help="episodes at once (default: the config's)")


def run(args: argparse.Namespace) -> dict:
    import trio

    from gym.environment import Environment
    from gym.registry import environment_config
    from gym.rollout import collect_async, summarize
    from gym.scripted import load_scripted
    from sandbox.fleet import open_pool

    env = Environment(environment_config(args.config))  # a file or a registered name
    engine = load_scripted("reference", env)
    concurrency = args.concurrency or env.config.concurrency

    async def main():
        async with open_pool(env.config.sandbox) as pool:
            trajectories, _ = await collect_async(env, engine, pool, args.episodes, 1, 0, concurrency=concurrency)
            return trajectories

    started = time.monotonic()
    trajectories = trio.run(main)
    summary = summarize(trajectories, time.monotonic() - started)
    return {
        "episodes": summary["episodes"],
        "concurrency": concurrency,
        "episodes_per_s": summary["episodes_per_s"],
        "mean_reward": summary["mean_reward"],
        "share_policy": summary["share_policy"],
        "share_tools": summary["share_tools"],
        "share_grading": summary["share_grading"],
        "share_workspace": summary["share_workspace"],
        "wall_s": summary["wall_s"],
    }
