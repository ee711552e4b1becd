"""Any local causal-LM directory is a policy: a tiny random Qwen2 / Llama saved to disk, loaded, sampled."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from policies.generation import GenerationEngine
from policies.hf_adapter import load_policy
from policies.sampling import SamplingParams
from tests.policy_support import HF_TINY, small_model


@pytest.mark.parametrize("config_cls, model_cls", [(Qwen2Config, Qwen2ForCausalLM), (LlamaConfig, LlamaForCausalLM)])
def test_hf_directory_as_policy(tmp_path, config_cls, model_cls) -> None:
    torch.manual_seed(0)
    model_cls(config_cls(**HF_TINY)).save_pretrained(tmp_path)
    policy = load_policy(tmp_path)
    assert not policy.is_moe and policy.vocab_size == 96 and policy.context_length == 128
    engine = GenerationEngine(policy)
    prompts = [[3, 4, 5, 6], [7, 8]]
    out = engine.generate_batch(prompts, [SamplingParams(max_tokens=7, temperature=0.0)] * 2)
    for prompt, c in zip(prompts, out):
        reference = policy.model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
            max_new_tokens=7,
            do_sample=False,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
        assert c.token_ids == reference
        assert c.routed_experts is None
    sampled = engine.generate_batch(prompts, [SamplingParams(max_tokens=5, seed=1, return_routed_experts=True)] * 2)
    assert all(len(c.token_ids) == 5 and c.routed_experts is None for c in sampled)  # dense model: no routes
    recompute = GenerationEngine(policy, mode="recompute").generate_batch(
        prompts, [SamplingParams(max_tokens=5, seed=1)] * 2
    )
    assert [c.token_ids for c in recompute] == [c.token_ids for c in sampled]


def test_our_saved_policy_loads_through_the_adapter(tmp_path) -> None:
    small_model().save_pretrained(tmp_path)
    policy = load_policy(tmp_path)
    assert policy.is_moe
    out = GenerationEngine(policy).generate_batch(
        [[1, 2, 3]], [SamplingParams(max_tokens=4, return_routed_experts=True)]
    )
    assert len(out[0].routed_experts) == 2


def test_missing_directory_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(tmp_path / "nowhere")
