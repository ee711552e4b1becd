"""`LeanDecoder.step` (the continuous engine's decode step in few ops) computes what the model's forward computes.

Each test runs one decode step twice on equal copies of a `SlotCache`: through the lean step and through the
model's forward (`CausalLMPolicy.step`, the path every other caller takes), and compares logits (float32:
within 1e-5; measured ~2e-7), routes (equal) and the keys/values written; then whole completions of the engine
with and without the lean step.
"""

from __future__ import annotations

import pytest
import torch

import policies.experts as experts_module
from policies.decode import LeanDecoder
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import SamplingParams
from tests.policy_support import copy_of, filled_cache, small_model


def both_steps(model, fed, lengths, cache):
    """(lean output, forward output, lean cache, forward cache) of one decode step from equal caches."""
    lean_cache, forward_cache = copy_of(cache), copy_of(cache)
    lean = LeanDecoder(model, cache.capacity).step(fed, lengths, lean_cache)
    columns = torch.arange(cache.start, cache.end + 1)
    mask = (columns[None, :] >= (cache.end - lengths)[:, None]).to(torch.int64)
    forward = CausalLMPolicy(model).step(fed[:, None], mask, lengths[:, None], forward_cache)
    return lean, forward, lean_cache, forward_cache


def assert_same_step(lean, forward, lean_cache, forward_cache) -> None:
    assert lean.logits.shape == forward.logits.shape
    # measured max |diff| over default/avx2/avx512 kernels: logits 1.2e-7 (margin 80x), keys 1.5e-7 and values 1.0e-7
    # (margin 7x and 10x)
    assert torch.allclose(lean.logits, forward.logits, atol=1e-5, rtol=0)
    assert torch.equal(lean.routes, forward.routes)
    assert torch.allclose(lean_cache.keys, forward_cache.keys, atol=1e-6, rtol=0)
    assert torch.allclose(lean_cache.values, forward_cache.values, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "lengths,start,end",
    [
        ([0], 40, 40),  # a row whose only token is this one
        ([7, 3, 12], 30, 42),  # rows that start at different columns: shorter rows mask what lies before them
        ([50] * 16, 10, 60),  # a full step
        ([5, 90], 10, 100),  # a window far from column 0
    ],
)
def test_a_lean_step_computes_what_the_forward_computes(lengths, start, end) -> None:
    model = small_model()
    n = len(lengths)
    fed = torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(n))
    lengths = torch.tensor(lengths)
    assert_same_step(*both_steps(model, fed, lengths, filled_cache(model, n, start, end)))


def test_rows_routed_through_the_block_itself_match_too(monkeypatch) -> None:
    """Where the block does not run every expert on every row (more rows than the shortcut's bound, an
    expert-parallel dispatcher, a GPU) the lean step hands the MoE block its rows: still the same step."""
    monkeypatch.setattr(experts_module, "ALL_EXPERTS_MAX_ROWS", 0)
    model = small_model()
    fed, lengths = torch.tensor([3, 9, 27]), torch.tensor([4, 11, 8])
    assert_same_step(*both_steps(model, fed, lengths, filled_cache(model, 3, 20, 31)))


def test_the_lean_step_reads_weights_updated_in_place() -> None:
    """No copy of a weight is kept: an in-place update (the engine's `load_state_dict`) is seen at the next step."""
    model = small_model()
    lean = LeanDecoder(model, model.config.max_position_embeddings)
    fed, lengths = torch.tensor([5, 6]), torch.tensor([3, 3])
    before = lean.step(fed, lengths, filled_cache(model, 2, 10, 13)).logits
    with torch.no_grad():
        for name, value in small_model(seed=7).state_dict().items():
            model.state_dict()[name].copy_(value)
    after = lean.step(fed, lengths, filled_cache(model, 2, 10, 13))
    assert not torch.allclose(before, after.logits)
    lean_out, forward, lean_cache, forward_cache = both_steps(model, fed, lengths, filled_cache(model, 2, 10, 13))
    assert torch.equal(after.logits, lean_out.logits)
    assert_same_step(lean_out, forward, lean_cache, forward_cache)


def test_the_engine_samples_the_same_completions_with_and_without_the_lean_step() -> None:
    policy = CausalLMPolicy(small_model())
    prompts = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11, 12], [1, 2, 3, 4, 5]]
    params = [
        SamplingParams(max_tokens=n, seed=s, return_routed_experts=True, stop_token_ids=[3])
        for n, s in ((30, 1), (5, 2), (50, 3), (30, 4))
    ]
    lean = GenerationEngine(policy, max_batch_size=3)
    assert lean._batcher.lean is not None
    general = GenerationEngine(policy, max_batch_size=3)
    general._batcher.lean = None  # the model's forward on the slot cache
    for a, b in zip(lean.generate_batch(prompts, params), general.generate_batch(prompts, params), strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.routed_experts == b.routed_experts
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
