"""Config files shared by the config-loading tests (unit) and the CLI tests (integration)."""

from __future__ import annotations

TRAIN_TOML = """\
run_dir = "runs/x"
environment = "configs/cp_smoke.yaml"

[policy]
type = "rdep_moe"

[policy.model]
vocab_size = 64
hidden_size = 16
num_hidden_layers = 2
num_dense_layers = 1
num_attention_heads = 2
num_key_value_heads = 1
head_dim = 8
intermediate_size = 32
moe_intermediate_size = 8
num_experts = 4
num_experts_per_tok = 2
num_shared_experts = 1
max_position_embeddings = 256

[optimizer]
lr = 0.001
"""
