"""`python -m gym rollout CONFIG`: run episodes of an environment and write trajectories and bundles.

    python -m gym rollout configs/cp_smoke.yaml --episodes 16 --policy scripted:reference --out runs/smoke

Writes under ``--out``: ``environment.json`` (the resolved configuration),
``trajectories.jsonl`` (one token-exact trajectory per line, in finishing
order), ``bundles/*.json`` (replay bundles: failures always, a sampled share
of the rest, per the environment's ``replay`` section) and ``summary.json``
(the figures printed on stdout). Policy specs: ``scripted:reference``,
``http://HOST:PORT``, ``checkpoint:DIR`` (see gym/engine.py). ``--set KEY=VALUE``
(repeatable) overrides a field of the file before validation (gym/overrides.py),
e.g. ``--set episode.max_turns=4``; ``environment.json`` shows the result.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.overrides import add_argument

    del argv
    parser.add_argument("config", type=Path, help="environment YAML or TOML (e.g. configs/cp_smoke.yaml)")
    parser.add_argument("--episodes", type=int, required=True, help="episodes to run (a multiple of --group-size)")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per task draw (a GRPO group; default 1)")
    parser.add_argument("--policy", default="scripted:reference", help="scripted:reference (default), scripted:empty, http://HOST:PORT or checkpoint:DIR")
    parser.add_argument("--out", type=Path, required=True, help="run directory to write")
    parser.add_argument("--seed", type=int, default=0, help="rollout seed (sampling seeds derive from it)")
    parser.add_argument("--concurrency", type=int, default=None, help="episodes at once (default: the config's)")
    parser.add_argument("--replay-rate", type=float, default=None, help="share of successful episodes bundled (default: the config's)")
    add_argument(parser, "episode.max_turns=4 --set task_pool.sources.0.pool.limit=2 (or task_pool.path=... for a jsonl pool)")


def run(args: argparse.Namespace) -> int:
    import time

    import trio

    from gym.engine import load_engine
    from gym.environment import Environment, EnvironmentConfig, EnvironmentConfigError
    from gym.overrides import OverrideError, exit_usage
    from gym.rollout import collect_async, summarize
    from gym.trajectory import write_jsonl
    from sandbox.pool import WorkspacePool

    if args.episodes < 1 or args.group_size < 1 or args.episodes % args.group_size:
        raise SystemExit(f"--episodes ({args.episodes}) must be a positive multiple of --group-size ({args.group_size})")
    overrides = list(args.set)  # --replay-rate is an override too, applied after --set
    if args.replay_rate is not None:
        overrides.append((("replay", "rate"), args.replay_rate))
    try:
        config = EnvironmentConfig.from_file(args.config, overrides=overrides)
        env = Environment(config)
        engine = load_engine(args.policy, env)
    except OverrideError as exc:
        exit_usage("rollout", exc)
    except (EnvironmentConfigError, ValueError, OSError) as exc:
        raise SystemExit(str(exc)) from None
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "environment.json").write_text(env.resolved())

    async def main():
        async with WorkspacePool(config.sandbox) as pool:
            return await collect_async(env, engine, pool, args.episodes // args.group_size, args.group_size,
                                       args.seed, concurrency=args.concurrency, bundle_dir=out / "bundles")

    started = time.monotonic()
    trajectories, workers = trio.run(main)
    summary = {**summarize(trajectories, time.monotonic() - started), "policy": args.policy,
               "bundles": len(workers.bundles), "stream_position": workers.stream.position}
    write_jsonl(out / "trajectories.jsonl", trajectories)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0
