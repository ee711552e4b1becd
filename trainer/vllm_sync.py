"""Pushing the trainer's weights to a vLLM server, and starting one for a run (``engine.type: vllm``).

`VllmSync.push` writes the full weights as one safetensors file into a directory the server can read
(``engine.weights_dir``; atomically, by a rename, before the server is touched), then, inside the client's
`policies.vllm_engine.WeightsGate`, makes the server reload it (`policies.vllm_server.VllmAdmin.reload`: pause,
``reload_weights``, prefix-cache reset, resume) and moves the gate to the new version. Without
``loop.partial_rollouts`` the gate drains first (no completion spans a push, each is tagged with the version that
sampled all of it); with it, completions in flight go on across the push and keep the version they started under
(`policies.vllm_engine`). A tied output head is written as ``lm_head.weight`` too: vLLM's CPU build keeps its
own copy of the head, which a checkpoint without it leaves at the old weights.

`start_vllm` builds the engine and the sync of a run: it attaches to ``engine.url``, or launches ``engine.vllm``
on the trainer's initial weights written as a Hugging Face model directory under the weights directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from policies.vllm_engine import VllmEngine, WeightsGate, wait_healthy
from policies.vllm_server import VllmAdmin, VllmAdminError, VllmServer
from trainer.config import RolloutEngineConfig
from trainer.errors import TrainerError

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
ATTACH_TIMEOUT_S = 300.0
"""How long a run waits for an attached server's ``/health`` (it may still be loading its model)."""


class WeightSyncError(TrainerError):
    """A weight push to a vLLM server failed (the message names the server, the step of the push and the cause):
    the run stops, as sampling on unknown weights would train on a policy nobody knows."""


def tied_names(model: nn.Module) -> tuple[str, str] | None:
    """(output head key, input embedding key) of ``model``'s state dict when the two share one tensor, else None."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embed is None or head.weight is not embed.weight:
        return None
    names = {id(module): name for name, module in model.named_modules()}
    return f"{names[id(head)]}.weight", f"{names[id(embed)]}.weight"


def write_weights(tensors: Mapping[str, torch.Tensor], path: Path, tied: tuple[str, str] | None) -> int:
    """Write ``tensors`` as one safetensors file at ``path`` (a temporary name, then a rename); bytes written. A tied
    head's key is filled from the embedding when missing; tensors sharing storage are written as copies
    (safetensors refuses aliases)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    if tied is not None and tied[0] not in out and tied[1] in out:
        out[tied[0]] = out[tied[1]].clone()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    save_file(out, str(partial))
    os.replace(partial, path)
    return path.stat().st_size


class VllmSync:
    """A `trainer.policy.WeightSync` for one vLLM server (module docstring)."""

    def __init__(
        self,
        admin: VllmAdmin,
        gate: WeightsGate,
        weights_dir: Path,
        tied: tuple[str, str] | None,
        drain: bool = True,
        drain_timeout_s: float = 600.0,
    ) -> None:
        self.admin, self.gate, self.weights_dir, self.tied = admin, gate, weights_dir, tied
        self.drain, self.drain_timeout_s = drain, drain_timeout_s
        self.last: dict[str, float] = {}
        """The last push's figures: mb, write_s, wait_s (draining), pause_s, reload_s, reset_s, resume_s, total_s."""

    def push(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        started = time.monotonic()
        push_dir = self.weights_dir / "push"
        try:
            size = write_weights(tensors, push_dir / WEIGHTS_FILE, self.tied)
        except OSError as exc:
            raise WeightSyncError(f"weights for {self.admin.url} could not be written to {push_dir}: {exc}") from None
        written = time.monotonic()
        try:
            with self.gate.push(version, self.drain, self.drain_timeout_s):
                held = time.monotonic()
                times = self.admin.reload(push_dir, self.drain)
        except (VllmAdminError, TimeoutError) as exc:
            raise WeightSyncError(f"weight push of version {version} to {self.admin.url} failed: {exc}") from None
        self.last = {
            "mb": size / 1e6,
            "write_s": written - started,
            "wait_s": held - written,
            **times,
            "total_s": time.monotonic() - started,
        }
        log.info(
            "pushed version %d to %s: %.1f MB written in %.2f s, drained in %.2f s, reloaded in %.3f s (%.2f s in all)",
            version,
            self.admin.url,
            self.last["mb"],
            self.last["write_s"],
            self.last["wait_s"],
            times["reload_s"],
            self.last["total_s"],
        )


@dataclass
class VllmRollout:
    """What `start_vllm` hands the loop: the engine, its sync, and the server it launched (None when attached)."""

    engine: VllmEngine
    sync: VllmSync
    server: VllmServer | None

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def write_model_dir(model_dir: Path, source_dir: Path, tensors: Mapping[str, torch.Tensor], tied) -> None:
    """A Hugging Face model directory vLLM can load: the policy directory's config, generation and tokenizer files
    (copied) with ``tensors`` as its weights."""
    model_dir.mkdir(parents=True, exist_ok=True)
    for path in source_dir.iterdir():
        if path.is_file() and path.suffix in (".json", ".jinja", ".model", ".txt") and "index" not in path.name:
            shutil.copy2(path, model_dir / path.name)
    write_weights(tensors, model_dir / WEIGHTS_FILE, tied)


def start_vllm(
    config: RolloutEngineConfig,
    run_dir: Path,
    policy_dir: Path,
    model: nn.Module,
    tensors: Mapping[str, torch.Tensor],
    version: int,
    partial_rollouts: bool,
) -> tuple[VllmRollout, bool]:
    """The engine and sync of ``engine.type: vllm`` at the trainer's ``version``, and whether the weights must still
    be pushed (an attached server samples whatever it loaded; a launched one loaded ``tensors`` at start).

    ``policy_dir``: the Hugging Face directory of the policy (config and tokenizer files for a launched server);
    ``model``: the trainer's model (its vocabulary and whether its head is tied)."""
    weights_dir = Path(config.weights_dir) if config.weights_dir is not None else run_dir / "vllm"
    tied = tied_names(model)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    server = None
    if config.vllm is not None:
        launch = config.vllm
        model_dir = weights_dir / "model"
        write_model_dir(model_dir, policy_dir, tensors, tied)
        server = VllmServer(launch.python, model_dir, launch.args, launch.host, launch.port, weights_dir / "server.log")
        log.info("starting vLLM: %s", " ".join(server.command))
        try:
            waited = server.start(launch.startup_timeout_s)
        except VllmAdminError as exc:
            raise WeightSyncError(f"engine.vllm: {exc}") from None
        log.info("vLLM server %s healthy after %.1f s", server.url, waited)
        url = server.url
    else:
        assert config.url is not None  # RolloutEngineConfig checks it
        url = config.url
        try:
            wait_healthy(url, ATTACH_TIMEOUT_S)
        except TimeoutError as exc:
            raise WeightSyncError(f"engine.url: {exc}") from None
    gate = WeightsGate(version)
    engine = VllmEngine(url, vocab, gate, timeout_s=config.request_timeout_s)
    sync = VllmSync(
        VllmAdmin(url), gate, weights_dir, tied, drain=not partial_rollouts, drain_timeout_s=config.request_timeout_s
    )
    (weights_dir / "engine.json").parent.mkdir(parents=True, exist_ok=True)
    (weights_dir / "engine.json").write_text(json.dumps({"url": url, "launched": server is not None}) + "\n")
    return VllmRollout(engine, sync, server), server is None
