"""A small RDEP MoE model with a fixed seed, for policy, engine and server tests."""

from __future__ import annotations

import torch

from policies.config import RdepMoeConfig
from policies.modeling import RdepMoeForCausalLM

SMALL = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=3,
    num_dense_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_experts=8,
    num_experts_per_tok=2,
    num_shared_experts=1,
    max_position_embeddings=128,
)


def small_model(seed: int = 0, **overrides) -> RdepMoeForCausalLM:
    torch.manual_seed(seed)
    return RdepMoeForCausalLM(RdepMoeConfig(**{**SMALL, **overrides})).eval()
