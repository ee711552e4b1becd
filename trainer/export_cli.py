"""`python -m gym export CHECKPOINT OUT`: a training checkpoint as a Hugging Face model directory.

    python -m gym export runs/cp_grpo_tiny runs/cp_grpo_tiny-hf

CHECKPOINT is a run directory, its ``checkpoints/``, their ``latest`` pointer (the newest complete checkpoint),
one ``step_N`` checkpoint or a model directory, in any of the trainer's formats: one process
(``model.safetensors``), data parallel with RDEP experts (``model-rankRR-of-WW.safetensors``, each rank's
experts joined in rank order) or sharded (torch.distributed.checkpoint under FSDP2; its digests are checked
before it is read). It is read here, in one process without a process group, whatever world size wrote it; OUT
gets ``config.json``, ``generation_config.json`` and the weights in safetensors files of at most
``--max-shard-gb`` (`trainer.sharded_checkpoint.export_hf`), and appears whole or not at all.
``transformers.AutoModelForCausalLM.from_pretrained(OUT, local_files_only=True)`` loads it (our RDEP policy
once `policies.modeling` is imported, as the gym's loaders do). A running job exports without stopping by
calling `export_hf` on every rank.

Exit codes (docs/cli.md): 2 when OUT exists and is not an empty directory, 5 when CHECKPOINT names no checkpoint
or one whose files are damaged, each one line ``gym: error: ...`` before OUT is touched.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

GB = 2**30


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument(
        "checkpoint",
        type=Path,
        help="a run directory, its checkpoints/, their `latest`, one step_N checkpoint or a model directory",
    )
    parser.add_argument("out", type=Path, help="the model directory to write (a new or empty directory)")
    parser.add_argument(
        "--max-shard-gb",
        type=float,
        default=2.0,
        help="largest safetensors file in GiB; a larger model is written as several with model.safetensors.index.json",
    )


def run(args: argparse.Namespace) -> int:
    from gym.fault import CommandError, ExitCode
    from trainer.checkpoint import checkpoint_directory, model_read_errors
    from trainer.errors import ConfigError

    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CommandError(f"{out}: exists and is not an empty directory", "name a new directory", ExitCode.USAGE)
    try:
        path = checkpoint_directory(args.checkpoint)
    except ConfigError as exc:
        raise CommandError(
            str(exc), "name a run directory, its checkpoints/, or one step_N checkpoint", ExitCode.INPUT
        ) from None
    from trainer.sharded_checkpoint import export_hf

    try:
        model = checkpoint_model(path)
    except model_read_errors() as exc:
        first = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise CommandError(
            f"{path}: cannot read the model: {first}", "name a complete checkpoint", ExitCode.INPUT
        ) from None
    export_hf(model, out, max(1, int(args.max_shard_gb * GB)))
    print(out)
    return 0


def checkpoint_model(path: Path) -> nn.Module:
    """The whole model the checkpoint (or model directory) ``path`` holds, read in this process."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    import policies.modeling  # noqa: F401  registers the RDEP policy with the Auto classes
    from trainer.checkpoint import is_sharded_checkpoint, weights_file

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):  # no random init: every weight is read below
        model = AutoModelForCausalLM.from_config(config)
    model = model.to_empty(device="cpu")
    model.tie_weights()
    if is_sharded_checkpoint(path):
        from trainer.sharded_checkpoint import read_checkpoint, stored_dtype

        model.to(stored_dtype(path))
        read_checkpoint(path, model)
        return model
    state_file = path / "state.json"
    world = json.loads(state_file.read_text())["world_size"] if state_file.is_file() else 1
    if world == 1 and not (path / weights_file(0, 1)).is_file():  # a model directory in another layout
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    ranks = [load_file(str(path / weights_file(rank, world))) for rank in range(world)]
    expected = model.state_dict()
    state = {}
    for key, value in ranks[0].items():
        if key in expected and value.shape != expected[key].shape:  # an RDEP shard: experts [r*E/W, (r+1)*E/W)
            value = torch.cat([part[key] for part in ranks])
        state[key] = value
    floating = [v.dtype for v in state.values() if v.is_floating_point()]
    if floating:
        model.to(floating[0])
    model.load_state_dict(state, strict=True)  # raises naming missing / unexpected tensors
    return model
