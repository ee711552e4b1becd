"""The trainer's model, the rollout engine it feeds, and pushing new weights to that engine.

The trainer holds the master weights; the in-process rollout engine holds its own copy (so a
generation in flight never sees half-updated weights). `WeightSync` pushes the trainer's weights
to an engine every `sync_every` steps, either in-process (`InProcessSync`: a tensor copy between two
batches, or between two decode steps with partial rollouts) or through the policy server's ``/update_weights_from_tensors`` endpoint
(`HttpSync`: safetensors bytes). Both bump the engine's weights version, which every later
completion reports.
"""

from __future__ import annotations

import copy
import logging
import time
import urllib.request
from typing import Protocol

import torch
from safetensors.torch import save as save_safetensors
from torch import nn

from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.serve_config import HFPolicySource, MoEPolicySource
from trainer.checkpoint import model_directory

log = logging.getLogger(__name__)


def build_model(
    source: MoEPolicySource | HFPolicySource,
    dtype: str = "float32",
    device: str = "cpu",
    aux_loss_coef: float | None = None,
) -> nn.Module:
    """The trainable model a policy source describes (random init is seeded by ``source.seed``)."""
    from transformers import AutoModelForCausalLM

    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM

    torch_dtype = getattr(torch, dtype)
    if isinstance(source, MoEPolicySource) and source.model is not None:
        arch = source.model
        if aux_loss_coef is not None:
            arch = arch.model_copy(update={"aux_loss_coef": aux_loss_coef})
        torch.manual_seed(source.seed)
        model = RdepMoeForCausalLM(RdepMoeConfig.from_architecture(arch))
    else:
        path = model_directory(source.checkpoint if isinstance(source, MoEPolicySource) else source.path)
        extra = (
            {"aux_loss_coef": aux_loss_coef}
            if aux_loss_coef is not None and isinstance(source, MoEPolicySource)
            else {}
        )
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **extra)
    return model.to(dtype=torch_dtype, device=device)


def frozen_copy(model: nn.Module) -> nn.Module:
    """A no-grad copy in eval mode (the KL reference policy)."""
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def build_engine(
    model: nn.Module,
    max_batch_size: int = 32,
    pad_token_id: int = 0,
    name: str = "policy",
    mode: str | None = None,
    prefill_chunk: int | None = None,
    partial_rollouts: bool = False,
) -> GenerationEngine:
    """An in-process generation engine over its own copy of ``model``'s weights (version 0); ``mode``,
    ``prefill_chunk`` and ``partial_rollouts`` as `GenerationEngine` (None: its default)."""
    copy_ = copy.deepcopy(model).eval()
    for p in copy_.parameters():
        p.requires_grad_(False)
    return GenerationEngine(
        CausalLMPolicy(copy_, name=name),
        max_batch_size=max_batch_size,
        mode=mode,
        pad_token_id=pad_token_id,
        prefill_chunk=prefill_chunk,
        partial_rollouts=partial_rollouts,
    )


class WeightSync(Protocol):
    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Make the rollout engine sample with these weights from now on, as ``version``.

        ``tensors``: every persistent tensor of the full model (parameters and router biases).
        """


class InProcessSync:
    """Copy weights into an engine living in this process."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.engine = engine

    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        self.engine.load_state_dict(tensors, version=version)


class FanOutSync:
    """Push to several engines in turn (`gym train --ray`: the trainer's own engine, then every node's)."""

    def __init__(self, syncs: tuple[WeightSync, ...]) -> None:
        self.syncs = syncs

    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        for sync in self.syncs:
            sync.push(tensors, version)


class HttpSync:
    """POST safetensors bytes to a policy server's /update_weights_from_tensors."""

    def __init__(self, base_url: str, timeout_s: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Block until the server answers /health (it may still be loading), or raise after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"policy server {self.base_url} did not answer /health within {timeout_s:.0f} s: {exc}"
                    ) from None
            time.sleep(1.0)

    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        body = save_safetensors(tensors)
        request = urllib.request.Request(
            f"{self.base_url}/update_weights_from_tensors?version={version}",
            data=body,
            method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            if response.status != 200:
                raise RuntimeError(
                    f"weight update to {self.base_url} answered {response.status}: {response.read()[:200]!r}"
                )
        log.info(
            "pushed %d tensors (%.1f MB) to %s as version %d", len(tensors), len(body) / 1e6, self.base_url, version
        )
