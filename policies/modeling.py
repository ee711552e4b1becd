"""The RDEP MoE transformer as a `transformers` model (registered with the Auto classes on import).

Decoder-only: untied embedding -> N x [RMSNorm -> GQA attention with RoPE -> RMSNorm -> MLP]
-> RMSNorm -> untied head. The first `num_dense_layers` MLPs are dense SwiGLU, the rest MoE blocks
(shared experts + sigmoid-routed top-k experts through a `Dispatcher`).

Extra forward inputs/outputs beyond a Hugging Face causal LM:
* `routed_experts` (L_moe, B, T, K) int64 in: replay these routes (R3; -1 rows route freely);
  `output.routed_experts` out: the routes used, same layout.
* `output.aux_loss`: the optional balance loss (already added to `loss` when labels are given).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, DynamicCache, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from kernels import token_logprob_entropy
from policies.attention import Attention, attention_mask_4d, causal_suffices, rope_cos_sin
from policies.config import MODEL_TYPE
from policies.dispatcher import Dispatcher
from policies.experts import ExpertShard, MoEBlock, SwiGLU
from policies.hf_config import RdepMoeConfig
from policies.router import Router


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class DecoderLayer(GradientCheckpointingLayer):
    """Pre-norm block. Under activation checkpointing the layer runs twice per step, so router
    load counts double; the sign rule and the reported violation are scale-free, so that is harmless."""

    def __init__(self, config: RdepMoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config, layer_idx)
        self.post_attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.is_moe = layer_idx >= config.num_dense_layers
        self.mlp: nn.Module = MoEBlock(config) if self.is_moe else SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin, mask, cache=None, routes=None):  # -> (hidden, expert_idx | None, aux | None)
        x = x + self.attn(self.input_norm(x), cos, sin, mask, cache)
        if not self.is_moe:
            return x + self.mlp(self.post_attn_norm(x)), None, None
        moe = self.mlp(self.post_attn_norm(x), routes)
        return x + moe.hidden, moe.expert_idx, moe.aux_loss


# The output field that holds the KV cache: `cache` from transformers 5.24 (which warns on the old name, in the
# constructor and on reading), `past_key_values` before.
CACHE_FIELD = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


@dataclass
class MoEModelOutput(BaseModelOutputWithPast):
    routed_experts: torch.LongTensor | None = None
    """(L_moe, B, T, K) experts each position was routed to, per MoE layer."""
    aux_loss: torch.FloatTensor | None = None


@dataclass
class MoECausalLMOutput(CausalLMOutputWithPast):
    routed_experts: torch.LongTensor | None = None
    """(L_moe, B, T, K) experts each position was routed to, per MoE layer."""
    aux_loss: torch.FloatTensor | None = None


class RdepMoePreTrainedModel(PreTrainedModel):
    config: RdepMoeConfig
    config_class = RdepMoeConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # transformers' `init` functions skip tensors already loaded from a checkpoint.
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, Router):
            init.normal_(module.weight, mean=0.0, std=std)
            init.zeros_(module.bias)
            init.zeros_(module.load)
        elif isinstance(module, ExpertShard):
            for weight in (module.w_gate, module.w_up, module.w_down):
                init.normal_(weight, mean=0.0, std=std)


class RdepMoeModel(RdepMoePreTrainedModel):
    def __init__(self, config: RdepMoeConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, past + T) 1 = real token
        position_ids: torch.LongTensor | None = None,  # (B, T)
        past_key_values: DynamicCache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, H)
        use_cache: bool | None = None,
        routed_experts: torch.Tensor | None = None,  # (L_moe, B, T, K)
        cache: DynamicCache | None = None,  # transformers >= 5.24 names the cache so (generate() passes it)
        **_ignored: object,  # generate() passes cache_position, return_dict, ...
    ) -> MoEModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if past_key_values is None:
            past_key_values = cache
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        batch, length, _ = x.shape
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if past + length > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence of {past + length} tokens exceeds max_position_embeddings={self.config.max_position_embeddings}"
            )
        if position_ids is None:
            position_ids = (past + torch.arange(length, device=x.device)).expand(batch, length)
        num_moe = self.config.num_hidden_layers - self.config.num_dense_layers
        if routed_experts is not None and routed_experts.shape[:3] != (num_moe, batch, length):
            raise ValueError(
                f"routed_experts has shape {tuple(routed_experts.shape)}; expected (moe_layers, batch, seq, k) "
                f"with leading dims {(num_moe, batch, length)}"
            )
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta)
        mask = (
            None
            if causal_suffices(attention_mask, batch, length, past)
            else attention_mask_4d(attention_mask, batch, length, past, x.device)
        )
        routes_used, aux_total = [], None
        for layer in self.layers:
            replay = None if routed_experts is None or not layer.is_moe else routed_experts[len(routes_used)]
            x, expert_idx, aux = layer(x, cos, sin, mask, cache=past_key_values, routes=replay)
            if expert_idx is not None:
                routes_used.append(expert_idx)
            if aux is not None:
                aux_total = aux if aux_total is None else aux_total + aux
        return MoEModelOutput(
            last_hidden_state=self.norm(x),
            routed_experts=torch.stack(routes_used) if routes_used else None,
            aux_loss=aux_total,
            **{CACHE_FIELD: past_key_values if use_cache else None},
        )

    def moe_blocks(self) -> list[MoEBlock]:
        return [layer.mlp for layer in self.layers if layer.is_moe]


class RdepMoeForCausalLM(RdepMoePreTrainedModel, GenerationMixin):
    _tied_weights_keys: dict[str, str] = {}

    def __init__(self, config: RdepMoeConfig) -> None:
        super().__init__(config)
        self.model = RdepMoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: DynamicCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (B, T), -100 ignored; shifted inside
        use_cache: bool | None = None,
        routed_experts: torch.Tensor | None = None,
        logits_to_keep: int = 0,
        cache: DynamicCache | None = None,  # transformers >= 5.24's name; RdepMoeModel reads either
        **kwargs: object,
    ) -> MoECausalLMOutput:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            routed_experts=routed_experts,
            cache=cache,
        )
        hidden = out.last_hidden_state
        logits = self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)
        loss = None
        if labels is not None:
            extra = {"num_items_in_batch": kwargs["num_items_in_batch"]} if "num_items_in_batch" in kwargs else {}
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **extra)
            if out.aux_loss is not None:
                loss = loss + out.aux_loss
        return MoECausalLMOutput(
            loss=loss,
            logits=logits,
            routed_experts=out.routed_experts,
            aux_loss=out.aux_loss,
            **{CACHE_FIELD: getattr(out, CACHE_FIELD)},
        )

    def token_logprobs(
        self,
        input_ids: torch.LongTensor,  # (B, T)
        attention_mask: torch.Tensor | None = None,
        routed_experts: torch.Tensor | None = None,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logprob and entropy (B, T-1) of input_ids[:, 1:] given the prefix, without full-vocab logits.

        The trainer's entry point: the fused `token_logprob_entropy` kernel works chunk-wise over
        the vocabulary straight from the hidden states; pass the rollout's routes for R3.
        """
        hidden = self.model(
            input_ids=input_ids, attention_mask=attention_mask, routed_experts=routed_experts
        ).last_hidden_state[:, :-1]
        batch, length, width = hidden.shape
        logprob, entropy = token_logprob_entropy(
            hidden.reshape(-1, width), self.lm_head.weight, input_ids[:, 1:].reshape(-1), temperature=temperature
        )
        return logprob.view(batch, length), entropy.view(batch, length)

    def use_dispatcher(self, dispatcher: Dispatcher) -> None:
        """Keep only this rank's experts and route every MoE layer through `dispatcher`."""
        if dispatcher.num_experts != self.config.num_experts:
            raise ValueError(f"dispatcher serves {dispatcher.num_experts} experts; model has {self.config.num_experts}")
        for block in self.model.moe_blocks():
            block.experts.shard_(dispatcher.first_local_expert, dispatcher.num_local_experts)
            block.dispatcher = dispatcher

    def update_router_biases(self, rate: float | None = None) -> list[float]:
        """Aux-loss-free balancing step: loads summed over ranks, sign rule, counts reset.

        Returns each MoE layer's load violation (max / mean - 1) before the update.
        """
        rate = self.config.router_bias_update_rate if rate is None else rate
        violations = []
        for block in self.model.moe_blocks():
            load = block.dispatcher.all_reduce_(block.router.load.clone())
            violations.append(block.router.update_bias(rate, load))
        return violations


AutoConfig.register(MODEL_TYPE, RdepMoeConfig, exist_ok=True)
AutoModel.register(RdepMoeConfig, RdepMoeModel, exist_ok=True)
AutoModelForCausalLM.register(RdepMoeConfig, RdepMoeForCausalLM, exist_ok=True)
