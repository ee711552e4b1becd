"""Architecture of the RDEP MoE policy: one pydantic model.

`MoEArchitecture` is the single source of truth for sizes (it is what the YAML `model:` section
holds); `policies.hf_config.RdepMoeConfig` is the `transformers` config that carries exactly those fields so the
model round-trips through `save_pretrained` / `AutoConfig.from_pretrained`. This module imports no transformers:
reading and checking a config (``gym train``, ``plan``, ``serve`` with a typo) costs no model library's import.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

MODEL_TYPE = "rdep_moe"


class MoEArchitecture(BaseModel):
    """Sizes and routing rules of the decoder-only MoE transformer."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    vocab_size: int = Field(512, ge=2)
    """Rows of the (untied) input embedding and of the output head."""
    hidden_size: int = Field(64, ge=1)
    """Width of the residual stream."""
    num_hidden_layers: int = Field(3, ge=1)
    """Decoder layers in total (dense ones first, then MoE ones)."""
    num_dense_layers: int = Field(1, ge=0)
    """How many leading layers use a dense SwiGLU MLP instead of experts."""
    num_attention_heads: int = Field(4, ge=1)
    """Query heads."""
    num_key_value_heads: int = Field(2, ge=1)
    """Key/value heads (grouped-query attention); must divide `num_attention_heads`."""
    head_dim: int = Field(16, ge=2)
    """Width of one attention head (even: RoPE rotates pairs)."""
    intermediate_size: int = Field(128, ge=1)
    """Hidden width of the dense layers' SwiGLU MLP."""
    moe_intermediate_size: int = Field(32, ge=1)
    """Hidden width of one routed (and one shared) expert's SwiGLU."""
    num_experts: int = Field(8, ge=1)
    """Routed experts per MoE layer."""
    num_experts_per_tok: int = Field(2, ge=1)
    """Top-k: routed experts each token is sent to."""
    num_shared_experts: int = Field(1, ge=0)
    """Always-on experts per MoE layer (fused into one SwiGLU of width k * moe_intermediate_size)."""
    routed_scaling_factor: float = Field(1.0, gt=0)
    """Multiplier on the routed experts' gates."""
    norm_topk_prob: bool = True
    """Normalise the selected sigmoid scores to sum to one before scaling."""
    router_bias_update_rate: float = Field(1e-3, ge=0)
    """Step of the aux-loss-free sign rule: bias += rate * sign(mean_load - load)."""
    aux_loss_coef: float = Field(0.0, ge=0)
    """Weight of the optional batch-wise balance loss (0 during RL: balance comes from the bias)."""
    rope_theta: float = Field(10000.0, gt=0)
    """RoPE base."""
    max_position_embeddings: int = Field(4096, ge=1)
    """Longest sequence (prompt + completion) the model accepts."""
    rms_norm_eps: float = Field(1e-6, gt=0)
    """RMSNorm epsilon."""
    initializer_range: float = Field(0.02, gt=0)
    """Std of the normal init of every matrix."""
    bos_token_id: int | None = Field(None, ge=0)
    """Beginning-of-sequence id, if the tokenizer has one."""
    eos_token_id: int | list[int] | None = None
    """End-of-sequence id(s) `generate()` stops on."""
    pad_token_id: int | None = Field(None, ge=0)
    """Padding id used by `generate()`."""

    @model_validator(mode="after")
    def _check(self) -> MoEArchitecture:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs)")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} > num_experts={self.num_experts}")
        if self.num_dense_layers > self.num_hidden_layers:
            raise ValueError(f"num_dense_layers={self.num_dense_layers} > num_hidden_layers={self.num_hidden_layers}")
        return self

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.num_dense_layers
