"""`python -m gym train CONFIG [--resume] [--ray [ADDRESS]]`: GRPO on a gym environment (see trainer/__init__.py).

The config is validated (and every environment file it names loaded) before anything starts; an
error names the field. ``--set KEY=VALUE`` (repeatable) overrides a field before validation
(gym/overrides.py): ``--set optimizer.lr=1e-3 --set environment.episode.max_turns=4``. Under
``torchrun --nproc-per-node N -m gym train CONFIG`` rank 0 runs the rollouts and every rank trains
its shard. ``--ray [ADDRESS]`` runs the rollouts on a Ray cluster, one actor per node
(trainer/ray_workers.py, docs/scaling.md); without it Ray is not imported. The run directory gets
checkpoints, metrics.jsonl, trajectories.jsonl, replay bundles, config.json and summary.json. A run
that stops on a trainer error (too many masked samples: `loop.max_masked_share`; under ``--ray`` no
rollout actor started) prints it as one line and exits 1; a bad config exits 2, a run directory
that cannot be written 6, a Docker engine that does not answer 3, all checked before the policy is
built and before the run directory gets any file (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import TrainConfig

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.overrides import add_argument

    del argv
    parser.add_argument("config", type=Path, help="training YAML (e.g. configs/cp_grpo_tiny.yaml)")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    parser.add_argument("--steps", type=int, default=None, help="override loop.steps")
    parser.add_argument("--run-dir", type=Path, default=None, help="override run_dir")
    parser.add_argument(
        "--engine-url",
        default=None,
        metavar="URL",
        help="sample from a policy server (python -m gym serve) at URL and push weights to it, instead of in process",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the rollouts on a Ray cluster, one actor per node with its own workspace pool on the node's Docker "
        "engine and its own policy engine (docs/scaling.md); ADDRESS (host:port of the head) joins that cluster, "
        "without it RAY_ADDRESS, else a Ray started on this host; put it after CONFIG",
    )
    add_argument(
        parser,
        "optimizer.lr=1e-3 --set environment.episode.max_turns=4",
        scope=" from the top of the training config (an environment given as a file is read in first)",
    )


def engine_answers(config: TrainConfig) -> None:
    """Raise EngineUnreachable (exit 3) now when the Docker engine does not answer a ping: before the
    policy is built and before the run directory holds anything (writable()'s empty directory aside)."""
    import trio

    from sandbox.docker_engine import Engine

    engine = Engine(config.env.sandbox)
    try:
        trio.run(partial(engine.call, "ping", engine.client.api.ping, timeout=min(5.0, engine.config.engine.timeout_s)))
    finally:
        engine.close()


def run(args: argparse.Namespace) -> int:
    from gym.fault import CommandError
    from gym.overrides import OverrideError, exit_usage
    from gym.run_dir import movable, writable
    from trainer.config import TrainConfig

    overrides = list(args.set)  # the dedicated flags are overrides too, applied after --set
    if args.steps is not None:
        overrides.append((("loop", "steps"), args.steps))
    if args.run_dir is not None:
        overrides.append((("run_dir",), str(args.run_dir)))
    if args.engine_url is not None:
        overrides += [(("engine", "type"), "http"), (("engine", "url"), args.engine_url)]
    try:
        config = TrainConfig.load(args.config, overrides=overrides)
    except OverrideError as err:
        exit_usage("train", err)
    if not args.resume:  # trainer.loop sets an earlier run aside: refuse one that holds the working directory
        movable(Path(config.run_dir))
    writable(Path(config.run_dir))  # exit 6 now, not after the policy is built
    engine_answers(config)

    from trainer.errors import TrainerError
    from trainer.loop import train

    try:
        # without --ray the call is what it always was (and Ray is never imported)
        summary = train(config, resume=args.resume, **({} if args.ray is None else {"ray": args.ray}))
    except TrainerError as err:  # e.g. MaskedShareError: summary.json is already written
        raise CommandError(f"train stopped: {err}", f"see {config.run_dir / 'summary.json'}") from err
    if summary:
        print(json.dumps(summary, indent=2))
        log.info(
            "run %s: %d steps in %.1f s, peak RSS %.0f MB, reward %s -> %s, %d masked (share %.3f)",
            config.run_dir,
            summary["steps"],
            summary["wall_s"],
            summary["peak_rss_mb"],
            summary["reward_first"],
            summary["reward_last"],
            summary["masked"],
            summary["masked_share"],
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # torch 2.13 on the CPU: a process that ran autograd and gloo collectives now and then aborts in interpreter
        # finalisation after its work is done ("terminate called without an active exception", SIGABRT: 3 of 10
        # bare runs, tests/integration/test_sharded_checkpoint.py), and torchrun then reports the finished run as
        # failed. The process group is already destroyed (trainer.loop.train); every file is written and closed.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(0)
    return 0
