"""Any local causal-LM directory as the policy: ours (`rdep_moe`) or a Hugging Face one (Qwen2, Llama, ...).

`CausalLMPolicy` is the one view the engine needs of a model: a forward step with a KV cache
that returns next-token logits and, for MoE policies, the routes. Nothing is downloaded: paths
must be local directories (`local_files_only`).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache, PreTrainedModel

import policies.modeling  # noqa: F401  (registers rdep_moe with the Auto classes)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepOutput:
    logits: torch.Tensor  # (B, T_kept, V)
    routes: torch.Tensor | None  # (L_moe, B, T, K) for MoE policies


class CausalLMPolicy:
    """A `transformers` causal LM behind the step interface the engine drives."""

    def __init__(self, model: PreTrainedModel, name: str = "policy") -> None:
        self.model = model.eval()
        self.name = name
        params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in params
        self._routes = "routed_experts" in params  # our MoE model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def is_moe(self) -> bool:
        return self._routes

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    @torch.no_grad()
    def step(
        self,
        input_ids: torch.Tensor,  # (B, T)
        attention_mask: torch.Tensor,  # (B, past + T)
        position_ids: torch.Tensor,  # (B, T)
        cache: DynamicCache | None,
        last_only: bool = True,
    ) -> StepOutput:
        kwargs: dict = {"use_cache": cache is not None}
        if cache is not None:
            kwargs["past_key_values"] = cache
        if last_only and self._keeps_logits:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)
        logits = out.logits[:, -1:] if last_only else out.logits
        return StepOutput(logits=logits, routes=getattr(out, "routed_experts", None))

    def check_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """KeyError for a name the model does not have, ValueError for a shape it does not have or a NaN or
        infinite value (a diverged trainer's or a corrupt upload's: every sample would be NaN)."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(f"{len(unknown)} tensor(s) the policy does not have, e.g. {unknown[:3]}")
        for key, value in state.items():
            if value.shape != own[key].shape:
                raise ValueError(
                    f"{key}: shape {tuple(value.shape)} does not match the policy's {tuple(own[key].shape)}"
                )
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                bad = int((~torch.isfinite(value)).sum())
                raise ValueError(f"{key}: {bad} NaN or infinite value(s); the policy keeps its weights")

    def load_state_dict(self, state: dict[str, torch.Tensor], checked: bool = False) -> int:
        """Copy tensors into the model (a subset is fine); unknown names or shapes raise (`check_state_dict`, not
        again when the caller ``checked`` it). Returns count."""
        if not checked:
            self.check_state_dict(state)
        own = self.model.state_dict()
        with torch.no_grad():
            for key, value in state.items():
                own[key].copy_(value)
        return len(state)


def load_policy(path: str | Path, dtype: torch.dtype | None = None, device: str = "cpu") -> CausalLMPolicy:
    """Load a local causal-LM directory (config.json + safetensors) as a policy."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a local model directory (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    log.info("loaded %s (%s) from %s", type(model).__name__, model.config.model_type, path)
    return CausalLMPolicy(model.to(device), name=path.name)
