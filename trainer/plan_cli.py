"""`python -m gym plan CONFIG --gpus N --gpu-memory GB`: will this training config fit on these GPUs?

Prints per-rank bytes of parameters, gradients, optimizer state, activations (from the config's
``environment.episode.max_total_tokens`` and ``loop.micro_batch_size``), the frozen KL reference and
an in-process engine, and whether they fit (trainer/memory_plan.py says how each is counted). Nothing
is downloaded or loaded: the policy is built on the meta device from its config.json (or its
``model:`` section), so a directory holding only a config.json plans as well as a full checkpoint.
``--set KEY=VALUE`` overrides a field first, as in `gym train`. ``--json FILE`` also writes the plan.
Exit 0 when it fits, 1 when it does not, 2 for a bad config (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.overrides import add_argument

    del argv
    parser.add_argument("config", type=Path, help="training YAML (e.g. configs/qwen2_1.5b_grpo.yaml)")
    parser.add_argument("--gpus", type=_positive(int), required=True, help="ranks (one GPU each)")
    parser.add_argument(
        "--gpu-memory", type=_positive(float), required=True, metavar="GIB", help="memory of one GPU in GiB"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the plan as JSON")
    add_argument(parser, "loop.micro_batch_size=2", scope=" from the top of the training config")


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
        return value

    return parse


def run(args: argparse.Namespace) -> int:
    from gym.fault import CommandError, ExitCode
    from gym.overrides import OverrideError, exit_usage
    from trainer.config import TrainConfig

    try:
        config = TrainConfig.load(args.config, overrides=list(args.set))
    except OverrideError as err:
        exit_usage("plan", err)
    # torch and transformers load once the config is known good: a typo is reported without their ~3 s import
    from trainer.checkpoint import model_read_errors
    from trainer.memory_plan import describe, lora_params, memory_plan, meta_model, model_shape, setting_of

    try:
        model = meta_model(config)
        shape = model_shape(model)
    except model_read_errors() as err:  # a policy directory whose config.json transformers cannot read
        where = getattr(config.policy, "path", None) or getattr(config.policy, "checkpoint", None)
        first = str(err).split(". ")[0].strip().rstrip(".")  # transformers' messages run on with advice
        raise CommandError(
            f"plan: {where}: cannot read the policy's architecture: {first}",
            "point policy.path at a directory whose config.json transformers reads",
            ExitCode.USAGE,
        ) from None
    setting = setting_of(config, args.gpus, args.gpu_memory, lora_params(model, config))
    result = memory_plan(shape, setting)
    print(describe(result, setting))
    if args.json is not None:
        args.json.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return 0 if result.fits else 1
