"""`gym plan`: the memory plan's counts against what torch actually holds, the shipped Qwen2 plans, the CLI.

The activation count of trainer/memory_plan.py is checked against the bytes autograd saves for backward
(storages deduplicated, weights left out) in a real CPU forward of a small Qwen2 model and of our RDEP
policy; the parameter, gradient and AdamW bytes against the tensors a real optimizer step leaves.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, Qwen2Config

from policies.config import MoEArchitecture
from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM
from tests.cli_support import ROOT
from trainer.config import TrainConfig
from trainer.memory_plan import (
    GIB,
    Setting,
    activation_elements_per_token,
    memory_plan,
    meta_model,
    model_shape,
    plan,
)


def saved_activation_bytes(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes of every distinct storage autograd keeps for backward in one forward, weights excluded."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(x: torch.Tensor) -> torch.Tensor:
        storage = x.untyped_storage()
        if x.is_floating_point() and storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return sum(seen.values())


def qwen2(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=1000,
    )
    return AutoModelForCausalLM.from_config(config).train()


def tiny_moe() -> torch.nn.Module:
    arch = yaml.safe_load((ROOT / "configs/cp_grpo_tiny.yaml").read_text())["policy"]["model"]
    torch.manual_seed(0)
    return RdepMoeForCausalLM(RdepMoeConfig.from_architecture(MoEArchitecture(**arch))).train()


@pytest.mark.parametrize(
    ("model", "batch", "sequence"),
    [
        (lambda: qwen2(128, 352, 4, 4, 2), 2, 256),
        (lambda: qwen2(96, 256, 2, 6, 3), 3, 128),
        (tiny_moe, 4, 256),
    ],
    ids=["qwen2-gqa", "qwen2-odd", "rdep-moe"],
)
def test_activation_count_matches_what_autograd_saves(model, batch, sequence):
    """Within 2%: the count leaves out only a few scalars per row (measured 0.3-1% under)."""
    model = model()
    vocab = model.config.vocab_size
    measured = saved_activation_bytes(model, torch.randint(0, vocab, (batch, sequence)))
    per_token, _ = activation_elements_per_token(model_shape(model))
    planned = per_token * batch * sequence * 4
    assert abs(planned - measured) / measured < 0.02, (planned, measured)


def test_checkpointed_forward_keeps_each_block_input_only():
    model = qwen2(128, 352, 4, 4, 2)
    model.activation_checkpointing_enable()
    shape = model_shape(model)
    measured = saved_activation_bytes(model, torch.randint(0, 1000, (2, 256)))
    assert measured == 2 * 256 * (shape.layers * shape.hidden + 2 * shape.hidden + 1) * 4


def setting(**changes) -> Setting:
    base = dict(
        gpus=1,
        gpu_memory_bytes=80 * GIB,
        master_bytes=4,
        compute_bytes=4,
        fsdp=False,
        expert_parallel=True,
        activation_checkpointing=False,
        cpu_offload=False,
        micro_batch=2,
        sequence=256,
        engine_in_process=False,
        engine_batch=8,
        reference=False,
        trainable_params=None,
    )
    return Setting(**{**base, **changes})


def test_state_bytes_equal_a_real_adamw_step():
    """Parameters + gradients + AdamW moments of one process: the plan's bytes are the tensors' bytes."""
    model = qwen2(64, 160, 2, 4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.randint(0, 1000, (1, 8))).logits.sum().backward()
    optimizer.step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    moments = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim() > 0)
    planned = memory_plan(model_shape(model), setting())
    assert (planned.parameters, planned.gradients, planned.optimizer) == (params, grads, moments)


def test_sharding_divides_state_and_experts_stay_expert_parallel():
    shape = model_shape(tiny_moe())
    assert 0 < shape.expert_params < shape.params_total
    one = memory_plan(shape, setting())
    fsdp = memory_plan(shape, setting(gpus=4, fsdp=True))
    replicated = memory_plan(shape, setting(gpus=4))  # data parallel: dense whole, experts / 4
    dense = shape.params_total - shape.expert_params
    assert replicated.parameters == (dense + -(-shape.expert_params // 4)) * 4
    assert fsdp.parameters <= one.parameters / 4 + 8
    assert fsdp.optimizer <= one.optimizer / 4 + 16
    assert fsdp.gathered_blocks == 2 * shape.largest_block_params * 4


def test_lora_trains_only_adapters_and_cpu_offload_moves_state_to_the_host():
    shape = model_shape(qwen2(128, 352, 4, 4, 2))
    lora = memory_plan(shape, setting(trainable_params=10_000))
    assert lora.trainable_params == 10_000 and lora.optimizer == 10_000 * 8 and lora.gradients == 10_000 * 4
    offload = memory_plan(shape, setting(gpus=2, fsdp=True, cpu_offload=True))
    assert offload.parameters == offload.gradients == offload.optimizer == 0 and offload.host_offload > 0


def shipped(name: str) -> TrainConfig:
    return TrainConfig.load(ROOT / "configs" / name)


@pytest.mark.parametrize(
    ("name", "params"),
    # Qwen2.5-1.5B and -7B as published: 1.54 B (tied head) and 7.62 B parameters
    [("qwen2_1.5b_grpo.yaml", 1_543_714_304), ("qwen2_7b_grpo.yaml", 7_615_616_512)],
)
def test_shipped_qwen2_plans_fit_their_gpus_and_the_unsharded_7b_does_not(name, params):
    config = shipped(name)
    assert sum(p.numel() for p in meta_model(config).parameters()) == params
    for gpus in (2, 8):
        result = plan(config, gpus, 80)
        assert result.params_total == params and result.fits, result
        state = result.parameters + result.gradients + result.optimizer
        assert state == pytest.approx(params * 16 / gpus, rel=1e-6)  # fp32 weights + grads + 2 moments
    if name.startswith("qwen2_7b"):
        unsharded = config.model_copy(
            update={"distributed": config.distributed.model_copy(update={"fsdp": type(config.distributed.fsdp)()})}
        )
        assert not plan(unsharded, 8, 80).fits  # 16 bytes x 7.6 B parameters on every rank: 113 GiB


def test_shipped_model_directories_hold_no_weights():
    # a model's architecture and, for the tiny HF policy trainer/tiny_hf.py writes, its chat template: text, no weights
    for directory in (ROOT / "configs/models").iterdir():
        names = sorted(p.name for p in directory.iterdir())
        assert names in (["config.json"], ["chat_template.jinja", "config.json"]), directory
        assert all((directory / name).stat().st_size < 8192 for name in names), directory
