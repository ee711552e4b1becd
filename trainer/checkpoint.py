"""Atomic checkpoints: weights (safetensors), optimizer, scheduler, RNG states, step, version, data cursor.

Layout of ``RUN/checkpoints/``::

    step_000010/
        model.safetensors           (one process)  or  model-rank00-of-02.safetensors (one per rank:
        config.json                  each rank's expert shard + the replicated weights)
        optimizer-rank00.pt         optimizer + scheduler state of each rank
        rng-rank00.pt               torch / numpy / python RNG states of each rank
        state.json                  step, weights version, data cursor, world size
    latest                          the name of the newest complete checkpoint

A model holding DTensor parameters (FSDP2) is saved with torch.distributed.checkpoint instead of the
safetensors and optimizer files (`trainer.sharded_checkpoint`): ``.metadata`` and ``__R_I.distcp`` (model and
optimizer shards), ``scheduler-rank00.pt`` and ``digests.json`` (sha256 of every file, checked before reading).
The format follows the model, never a flag, and `load` refuses a checkpoint of the other kind.

A checkpoint is written into ``step_N.tmp`` and renamed into place only when every file is
written and flushed, then ``latest`` is replaced atomically; a crash or SIGKILL at any point
leaves the previous checkpoint intact (a stale ``.tmp`` is removed by the next save).
With one process, ``step_N/`` is also a model directory that `policies.hf_adapter.load_policy`
and the server's ``/update_weights`` load.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file, save_file
from torch import nn

from trainer.errors import ConfigError

log = logging.getLogger(__name__)

LATEST = "latest"
SHARDED_MARKS = (".metadata", "digests.json")
"""Files only a sharded checkpoint holds (DCP's index, trainer.sharded_checkpoint.DIGESTS; that module is not
imported here: DCP loads slowly). Either one marks it, so a checkpoint that lost one is reported damaged."""


class TrainerState(BaseModel):
    """Counters needed to continue exactly where a run stopped."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(0, ge=0)
    """Optimizer steps done."""
    weights_version: int = Field(0, ge=0)
    """Version of the weights last pushed to the rollout engine."""
    data_cursor: int = Field(0, ge=0)
    """First position of the task order not yet consumed (groups drawn but not trained on are redrawn)."""
    consumed: list[int] = Field(default_factory=list)
    """Positions past data_cursor already consumed (skipped on resume)."""
    world_size: int = Field(1, ge=1)
    """Processes that wrote the checkpoint (resume with the same number)."""
    extra: dict[str, float] = Field(default_factory=dict)
    """Running figures the summary needs (first reward, masked count, ...)."""


def checkpoint_directory(path: Path) -> Path:
    """The checkpoint or model directory ``path`` names: itself when its ``config.json`` is a model's (a
    ``model_type``; a run directory's config.json is the training config); else the newest complete checkpoint of
    a run directory, of its ``checkpoints/``, or of their ``latest`` pointer. Raises `ConfigError` naming
    ``path`` when it is none of these."""
    path = Path(path)
    if _model_config(path / "config.json"):
        return path
    for directory in (path.parent,) if path.name == LATEST and path.is_file() else (path, path / "checkpoints"):
        newest = Checkpointer(directory).latest()
        if newest is not None and (newest / "config.json").is_file():
            return newest
        if newest is not None:  # a LoRA run's checkpoints hold its adapters only (trainer/lora.py)
            run = directory.parent if directory.name == "checkpoints" else directory
            raise ConfigError(
                f"{newest}: a checkpoint without config.json holds no whole model (a LoRA run's holds its adapters "
                f"only); the merged model of a LoRA run's last step is {run / 'lora' / 'merged'}"
            )
    raise ConfigError(
        f"{path}: not a model directory (no config.json), nor a run, a checkpoints/ directory or a `latest` "
        "pointer with a complete checkpoint"
    )


MODEL_CONFIG_MAX_BYTES = 1 << 20
"""A model's config.json is a few kB; a larger file is not read whole to decide what a directory is."""


def _model_config(path: Path) -> bool:
    """Whether ``path`` is a model's config.json: a JSON object with a ``model_type``."""
    try:
        if not path.is_file() or path.stat().st_size > MODEL_CONFIG_MAX_BYTES:
            return False
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model_type"), str)


def model_read_errors() -> tuple[type[BaseException], ...]:
    """What transformers and safetensors raise on a model directory whose files are damaged or not a model's
    (huggingface_hub's strict config fields raise their own class, no ValueError)."""
    from huggingface_hub.errors import StrictDataclassError

    return (OSError, ValueError, KeyError, TypeError, StrictDataclassError)


def model_directory(path: Path) -> Path:
    """The model directory ``path`` names (`checkpoint_directory`: what a user points ``policy.checkpoint`` at
    after a run). A sharded checkpoint is none: `ConfigError` names the export that writes one."""
    found = checkpoint_directory(path)
    if is_sharded_checkpoint(found):
        raise ConfigError(
            f"{found}: a sharded checkpoint (torch.distributed.checkpoint) is no model directory; "
            f"write one with `python -m gym export {found} OUT` and name OUT"
        )
    return found


def is_sharded_checkpoint(path: Path) -> bool:
    return any((Path(path) / name).is_file() for name in SHARDED_MARKS)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_torch(obj: object, path: Path) -> None:
    with path.open("wb") as out:
        torch.save(obj, out)
        out.flush()
        os.fsync(out.fileno())


def weights_file(rank: int, world_size: int) -> str:
    return "model.safetensors" if world_size == 1 else f"model-rank{rank:02d}-of-{world_size:02d}.safetensors"


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies of every persistent tensor (parameters and buffers such as router biases)."""
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def holds_dtensors(model: nn.Module) -> bool:
    """Whether any parameter is a DTensor (FSDP2's ``fully_shard``): such a model is checkpointed with DCP."""
    if "torch.distributed.tensor" not in sys.modules:
        return False  # no DTensor exists before its module is loaded (and importing it costs half a second)
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


class Checkpointer:
    """Writes and reads the checkpoints of one run; every rank calls save/load together."""

    def __init__(
        self, directory: Path, rank: int = 0, world_size: int = 1, keep: int = 2, barrier=lambda: None
    ) -> None:
        self.directory = Path(directory)
        self.rank, self.world_size, self.keep = rank, world_size, keep
        self.barrier = barrier

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.directory / LATEST
        if not pointer.is_file():
            return None
        path = self.directory / pointer.read_text().strip()
        return path if (path / "state.json").is_file() else None

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler, state: TrainerState) -> Path:
        final = self.directory / f"step_{state.step:06d}"
        tmp = self.directory / f"step_{state.step:06d}.tmp"
        if self.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            for stale in self.directory.glob("*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp.mkdir()
        self.barrier()
        sharded = holds_dtensors(model)
        if sharded:
            from trainer.sharded_checkpoint import record_digests, save_sharded

            save_sharded(tmp, model, optimizer)
            _save_torch({"scheduler": scheduler.state_dict()}, tmp / f"scheduler-rank{self.rank:02d}.pt")
        else:
            save_file(
                model_tensors(model), str(tmp / weights_file(self.rank, self.world_size)), metadata={"format": "pt"}
            )
            _save_torch(
                {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                tmp / f"optimizer-rank{self.rank:02d}.pt",
            )
        _save_torch(rng_state(), tmp / f"rng-rank{self.rank:02d}.pt")
        if sharded:
            record_digests(tmp)
        self.barrier()
        if self.rank == 0:
            config = getattr(model, "config", None)
            if config is not None and hasattr(config, "to_json_file"):
                config.to_json_file(str(tmp / "config.json"))
            (tmp / "state.json").write_text(
                state.model_copy(update={"world_size": self.world_size}).model_dump_json(indent=2)
            )
            for file in tmp.iterdir():
                with file.open("rb") as handle:
                    os.fsync(handle.fileno())
            _fsync_dir(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            pointer_tmp = self.directory / f"{LATEST}.tmp"
            pointer_tmp.write_text(final.name + "\n")
            os.replace(pointer_tmp, self.directory / LATEST)
            _fsync_dir(self.directory)
            self._prune()
            log.info("checkpoint %s written", final)
        self.barrier()
        return final

    def _prune(self) -> None:
        done = sorted(p for p in self.directory.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
        for old in done[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def load(self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> TrainerState:
        """Restore everything from ``path``; raises `ConfigError` when the world size or the format (sharded or
        not) differs from this run's, `CheckpointError` when a sharded checkpoint's files are damaged."""
        state = TrainerState.model_validate_json((path / "state.json").read_text())
        if state.world_size != self.world_size:
            raise ConfigError(
                f"checkpoint {path} was written by {state.world_size} process(es); resume with the same number "
                f"(got {self.world_size})"
            )
        sharded = holds_dtensors(model)
        if sharded != is_sharded_checkpoint(path):
            written = "an unsharded (safetensors)" if sharded else "a sharded (torch.distributed.checkpoint)"
            model_is = "is sharded (FSDP2 DTensors)" if sharded else "is not sharded"
            raise ConfigError(
                f"checkpoint {path} is {written} checkpoint but this run's model {model_is}; resume with the "
                "distributed settings that wrote it"
            )
        if sharded:
            from trainer.sharded_checkpoint import load_sharded, verify_digests

            verify_digests(path)  # every rank raises together on a damaged file, before any is read
            load_sharded(path, model, optimizer)
            blob = torch.load(path / f"scheduler-rank{self.rank:02d}.pt", weights_only=False)
        else:
            tensors = load_file(str(path / weights_file(self.rank, self.world_size)))
            model.load_state_dict(tensors, strict=True)  # raises naming missing / unexpected tensors
            blob = torch.load(path / f"optimizer-rank{self.rank:02d}.pt", weights_only=False)
            optimizer.load_state_dict(blob["optimizer"])
        scheduler.load_state_dict(blob["scheduler"])
        set_rng_state(torch.load(path / f"rng-rank{self.rank:02d}.pt", weights_only=False))
        log.info(
            "resumed from %s (step %d, weights version %d, data cursor %d)",
            path,
            state.step,
            state.weights_version,
            state.data_cursor,
        )
        return state
