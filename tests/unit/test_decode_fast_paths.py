"""The engine's inference shortcuts compute what the general paths compute.

* `all_experts_swiglu` (a CPU inference step with few rows runs every expert on every row) equals the grouped
  path (permute, grouped SwiGLU, unpermute), and `MoEBlock` takes it only without autograd, on the CPU, with
  every expert local and few rows.
* `sample`, when no row processes its logits (temperature 1 or greedy, no top-k or top-p), inverts the CDF of
  exp(logits - max) instead of taking log-softmaxes: the same tokens as the general formula through
  `processed_logprobs` with the same draws, logprobs equal to float rounding; a greedy row among them leaves
  the other rows' draws as they were.
"""

from __future__ import annotations

import pytest
import torch

from kernels import grouped_swiglu, moe_permute, moe_unpermute
from policies.experts import ALL_EXPERTS_MAX_ROWS, MoEBlock, all_experts_swiglu
from policies.hf_config import RdepMoeConfig
from policies.sampler import RowSampling, processed_logprobs, sample
from policies.sampling import SamplingParams


def grouped(x, idx, gate, wg, wu, wd):
    permuted, row_map, counts = moe_permute(x, idx, wg.shape[0])
    return moe_unpermute(grouped_swiglu(permuted, counts, wg, wu, wd), row_map, gate, x.shape[0])


@pytest.mark.parametrize("experts,top_k,rows", [(8, 2, 64), (4, 1, 7), (16, 4, 33), (8, 2, 0)])
def test_all_experts_equals_the_grouped_path(experts, top_k, rows):
    g = torch.Generator().manual_seed(experts * 100 + rows)
    hidden, width = 24, 16
    x = torch.randn(rows, hidden, generator=g)
    wg, wu = (torch.randn(experts, width, hidden, generator=g) * 0.2 for _ in range(2))
    wd = torch.randn(experts, hidden, width, generator=g) * 0.2
    picks = [torch.randperm(experts, generator=g)[:top_k] for _ in range(rows)]
    idx = torch.stack(picks) if picks else torch.zeros(0, top_k, dtype=torch.int64)
    gate = torch.rand(rows, top_k, generator=g)
    want = grouped(x, idx, gate, wg, wu, wd)
    got = all_experts_swiglu(x, idx, gate, wg, wu, wd)
    assert got.shape == want.shape == (rows, hidden)
    # measured max |diff| 4.2e-7 over default/avx2/avx512 kernels (0.11 of the tolerance): margin 9x
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_replayed_route_naming_one_expert_twice_counts_it_twice():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 8, generator=g)
    wg, wu, wd = torch.randn(4, 6, 8, generator=g), torch.randn(4, 6, 8, generator=g), torch.randn(4, 8, 6, generator=g)
    idx = torch.tensor([[2, 2], [0, 3], [1, 1]])
    gate = torch.rand(3, 2, generator=g)
    # float32 default tolerance; measured max |diff| 2.9e-6 (default kernels), 1.9e-6 (avx2/avx512), 0.19 of the
    # tolerance: margin 5x. Counting each repeated expert once instead moves the output by up to 5.2.
    torch.testing.assert_close(all_experts_swiglu(x, idx, gate, wg, wu, wd), grouped(x, idx, gate, wg, wu, wd))


def block_config() -> RdepMoeConfig:
    return RdepMoeConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_dense_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=32,
        moe_intermediate_size=8,
        num_experts=8,
        num_experts_per_tok=2,
        num_shared_experts=1,
    )


def block() -> MoEBlock:
    config = block_config()
    torch.manual_seed(0)
    moe = MoEBlock(config)
    for weight in (moe.experts.w_gate, moe.experts.w_up, moe.experts.w_down, moe.router.weight):
        torch.nn.init.normal_(weight, std=0.3)
    return moe


def test_the_block_runs_all_experts_only_for_small_inference_steps(monkeypatch):
    moe = block()
    calls = []
    import policies.experts as experts_module

    real = experts_module.all_experts_swiglu
    monkeypatch.setattr(experts_module, "all_experts_swiglu", lambda *a: calls.append(1) or real(*a))
    small = torch.randn(2, 5, 16)
    with torch.no_grad():
        fast = moe(small).hidden
    assert calls == [1]
    with torch.no_grad():  # the general path on the same rows: the same result
        monkeypatch.setattr(experts_module, "ALL_EXPERTS_MAX_ROWS", 0)
        general = moe(small).hidden
    assert calls == [1]
    # measured max |diff| 4.8e-7 over default/avx2/avx512 kernels (0.11 of the tolerance): margin 9x
    torch.testing.assert_close(fast, general, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(experts_module, "ALL_EXPERTS_MAX_ROWS", ALL_EXPERTS_MAX_ROWS)
    moe(small)  # autograd on (training, the trainer's logprobs): the grouped path
    large = torch.randn(1, ALL_EXPERTS_MAX_ROWS // 8 + 1, 16)
    with torch.no_grad():
        moe(large)  # too many rows
    assert calls == [1]


def rows_of(params: list[SamplingParams]) -> RowSampling:
    return RowSampling.build(params, list(range(len(params))), torch.device("cpu"))


def general_formula(logits: torch.Tensor, params: list[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, logprobs) by the general path with the same seeds: the processed distribution's CDF (float64)
    inverted at one float64 draw per row; greedy rows take the argmax with logprob 0."""
    reference = rows_of(params)
    logp = processed_logprobs(logits, reference)
    u = torch.tensor([d.next() for d in reference.draws], dtype=torch.float64)
    cdf = torch.cumsum(logp.exp(), dim=-1, dtype=torch.float64)
    drawn = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True)[:, 0]
    greedy = reference.temperature == 0
    tokens = torch.where(greedy, torch.argmax(logits, dim=-1), drawn)
    return tokens, torch.where(greedy, torch.zeros(len(params)), logp.gather(1, tokens[:, None])[:, 0])


def test_plain_rows_sample_as_through_the_processed_distribution():
    logits = torch.randn(32, 500, generator=torch.Generator().manual_seed(3)) * 3
    params = [SamplingParams(temperature=1.0 if b % 4 else 0.0) for b in range(32)]
    got = sample(logits, rows_of(params))
    tokens, logprobs = general_formula(logits, params)
    assert torch.equal(got.tokens, tokens)
    # logprobs here and below: measured max |diff| 4.8e-7 over default/avx2/avx512 kernels: margin 20x
    assert torch.allclose(got.logprobs, logprobs, atol=1e-5, rtol=0)
    assert (got.logprobs[::4] == 0).all()  # the greedy rows
    raw = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
    assert torch.allclose(got.raw_logprobs, raw, atol=1e-5, rtol=0)
    assert got.per_row() == list(zip(tokens.tolist(), got.logprobs.tolist(), got.raw_logprobs.tolist()))


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_a_batch_without_greedy_rows_samples_as_the_general_formula(temperature):
    logits = torch.randn(16, 400, generator=torch.Generator().manual_seed(5)) * 2
    params = [SamplingParams(temperature=temperature)] * 16
    got = sample(logits, rows_of(params))
    tokens, logprobs = general_formula(logits, params)
    assert torch.equal(got.tokens, tokens)
    # logprobs here and below: measured max |diff| 4.8e-7 over default/avx2/avx512 kernels: margin 20x
    assert torch.allclose(got.logprobs, logprobs, atol=1e-5, rtol=0)
    raw = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
    assert torch.allclose(got.raw_logprobs, raw, atol=1e-5, rtol=0)
    # and one greedy row among them takes the other path, leaving the sampled rows' draws as they were
    mixed = sample(logits, rows_of([SamplingParams(temperature=0.0)] + params[1:]))
    assert mixed.tokens[0] == torch.argmax(logits[0]) and mixed.logprobs[0] == 0
    assert torch.equal(mixed.tokens[1:], got.tokens[1:])


@pytest.mark.parametrize("params", [{"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.5}])
def test_a_processing_row_still_samples_its_processed_distribution(params):
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(4))
    mixed = [SamplingParams(), SamplingParams(**params), SamplingParams(), SamplingParams()]
    got = sample(logits, rows_of(mixed))
    processed = processed_logprobs(logits, rows_of(mixed))
    assert torch.equal(got.logprobs, processed.gather(1, got.tokens[:, None])[:, 0])
    if "temperature" not in params:
        assert torch.isfinite(processed[1, got.tokens[1]])


def test_a_one_token_step_reads_grouped_keys_in_place_with_the_same_result():
    from policies.attention import Attention, attention_mask_4d, rope_cos_sin

    config = block_config()
    attention = Attention(config, 0)
    g = torch.Generator().manual_seed(5)
    batch, past = 3, 9
    keys = torch.randn(batch, config.num_key_value_heads, past, config.head_dim, generator=g)
    values = torch.randn(batch, config.num_key_value_heads, past, config.head_dim, generator=g)

    class Cache:  # the `Cache.update` contract: append the step's key/value to the past ones
        def update(self, k, v, layer_idx):
            return torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)

    x = torch.randn(batch, 1, config.hidden_size, generator=g)
    padding = torch.ones(batch, past + 1, dtype=torch.int64)
    padding[0, :4] = 0  # a row that starts later
    mask = attention_mask_4d(padding, batch, 1, past, x.device)
    cos, sin = rope_cos_sin(torch.tensor([[past], [past], [past - 4]]), config.head_dim, config.rope_theta)
    with torch.no_grad():
        fast = attention(x, cos, sin, mask, Cache())
        # the general path: keys and values repeated per query head
        q = attention.q_proj(x).view(batch, 1, config.num_attention_heads, config.head_dim).transpose(1, 2)
        k = attention.k_proj(x).view(batch, 1, config.num_key_value_heads, config.head_dim).transpose(1, 2)
        v = attention.v_proj(x).view(batch, 1, config.num_key_value_heads, config.head_dim).transpose(1, 2)
        from policies.attention import apply_rope

        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = Cache().update(k, v, 0)
        groups = config.num_attention_heads // config.num_key_value_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        general = attention.o_proj(out.transpose(1, 2).reshape(batch, 1, -1))
    # measured max |diff| 7.5e-8 over default/avx2/avx512 kernels (0.06 of the tolerance): margin 16x
    torch.testing.assert_close(fast, general, rtol=1e-5, atol=1e-6)
