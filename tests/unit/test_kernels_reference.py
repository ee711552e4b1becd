"""The torch reference kernels against plain full-tensor oracles (CPU, fp64 oracles where it matters)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from kernels import grouped_swiglu, moe_permute, moe_unpermute, token_logprob_entropy

REF = "reference"


def full_vocab_oracle(hidden, weight, targets, temperature):
    """Materialises every logit: what the chunked kernel must equal."""
    logp = torch.log_softmax(hidden @ weight.T / temperature, dim=-1)
    return logp.gather(1, targets[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)


def dense_swiglu_oracle(x, counts, w_gate, w_up, w_down):
    """Every row through its own expert's weights, gathered per row (no segments, no loop)."""
    expert = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    g = torch.einsum("mh,mfh->mf", x, w_gate[expert])
    u = torch.einsum("mh,mfh->mf", x, w_up[expert])
    return torch.einsum("mf,mhf->mh", F.silu(g) * u, w_down[expert])


@pytest.mark.parametrize("chunk_size", [1, 7, 32, 100, 4096])
def test_logprob_entropy_matches_full_softmax(chunk_size):
    torch.manual_seed(0)
    n, v, h = 9, 100, 12
    hidden = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(v, h, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, v, (n,))
    g_lp, g_ent = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)

    logprob, entropy = token_logprob_entropy(hidden, weight, targets, 0.7, chunk_size, backend=REF)
    (logprob * g_lp + entropy * g_ent).sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    want_lp, want_ent = full_vocab_oracle(hidden, weight, targets, 0.7)
    (want_lp * g_lp + want_ent * g_ent).sum().backward()

    assert logprob.dtype == entropy.dtype == torch.float32
    # The reference computes in fp32 from fp64 inputs; over all chunk sizes the measured max abs error
    # is 4.5e-6 (|logprob| up to 19): atol 5e-5 is an 11x margin.
    torch.testing.assert_close(logprob.double(), want_lp, rtol=0, atol=5e-5)
    torch.testing.assert_close(entropy.double(), want_ent, rtol=0, atol=5e-5)
    # Gradients up to 12 in magnitude; measured max abs error 1.4e-5: 7x margin.
    torch.testing.assert_close(grads[0], hidden.grad, rtol=0, atol=1e-4)
    torch.testing.assert_close(grads[1], weight.grad, rtol=0, atol=1e-4)


def test_logprob_entropy_one_output_and_frozen_head():
    torch.manual_seed(1)
    hidden = torch.randn(5, 8, requires_grad=True)
    weight = torch.randn(30, 8)  # frozen LM head: no weight gradient is built
    targets = torch.randint(0, 30, (5,))
    logprob, _ = token_logprob_entropy(hidden, weight, targets, chunk_size=8, backend=REF)
    logprob.sum().backward()  # entropy unused: its incoming gradient is None
    hidden_ref = hidden.detach().clone().requires_grad_()
    full_vocab_oracle(hidden_ref, weight, targets, 1.0)[0].sum().backward()
    assert weight.grad is None
    # fp32 both ways; measured max abs error 4.8e-7 on gradients up to 3.4: 20x margin.
    torch.testing.assert_close(hidden.grad, hidden_ref.grad, rtol=0, atol=1e-5)


def test_logprob_entropy_bad_inputs_name_the_input():
    hidden, weight = torch.randn(3, 4), torch.randn(10, 4)
    with pytest.raises(ValueError, match="targets"):
        token_logprob_entropy(hidden, weight, torch.zeros(3, dtype=torch.int32), backend=REF)
    with pytest.raises(ValueError, match="temperature"):
        token_logprob_entropy(hidden, weight, torch.zeros(3, dtype=torch.int64), temperature=0.0, backend=REF)
    with pytest.raises(ValueError, match="weight"):
        token_logprob_entropy(hidden, torch.randn(10, 5), torch.zeros(3, dtype=torch.int64), backend=REF)


def test_permute_layout_by_hand():
    x = torch.arange(4.0)[:, None].repeat(1, 2)  # token t's row is [t, t]
    expert_idx = torch.tensor([[2, 0], [0, 2], [1, 0], [2, 1]])  # T=4, K=2, E=4 (expert 3 empty)
    permuted, row_map, counts = moe_permute(x, expert_idx, 4, backend=REF)
    # slots (t*K+k) sorted by expert, stable: expert 0 <- slots 1,2,5; expert 1 <- 4,7; expert 2 <- 0,3,6.
    assert row_map.tolist() == [1, 2, 5, 4, 7, 0, 3, 6]
    assert counts.tolist() == [3, 2, 3, 0]
    assert permuted[:, 0].tolist() == [0, 1, 2, 2, 3, 0, 1, 3]  # token of each row = row_map // K


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.integers(1, 6), st.randoms(use_true_random=False))
def test_permute_then_unpermute_is_the_gated_sum(tokens, top_k, experts, rnd):
    gen = torch.Generator().manual_seed(rnd.randint(0, 2**31))
    x = torch.randn(tokens, 3, generator=gen, dtype=torch.float64)
    expert_idx = torch.randint(0, experts, (tokens, top_k), generator=gen)
    gate = torch.rand(tokens, top_k, generator=gen, dtype=torch.float64)
    permuted, row_map, counts = moe_permute(x, expert_idx, experts, backend=REF)

    assert sorted(row_map.tolist()) == list(range(tokens * top_k))
    row_experts = expert_idx.reshape(-1)[row_map]
    assert torch.equal(row_experts, torch.sort(row_experts).values)  # grouped in expert order
    assert torch.equal(counts, torch.bincount(expert_idx.reshape(-1), minlength=experts))
    assert torch.equal(permuted, x[row_map // top_k])
    out = moe_unpermute(permuted, row_map, gate, tokens, backend=REF)
    torch.testing.assert_close(out, x * gate.sum(1, keepdim=True), rtol=1e-12, atol=1e-12)


def test_permute_unpermute_gradients():
    torch.manual_seed(2)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    expert_idx = torch.tensor([[0, 2], [2, 1], [1, 0], [0, 1], [2, 2], [1, 0]])
    gate = torch.rand(6, 2, dtype=torch.float64, requires_grad=True)

    def run(x, gate):
        permuted, row_map, _ = moe_permute(x, expert_idx, 3, backend=REF)
        return moe_unpermute(permuted.sin(), row_map, gate, 6, backend=REF)

    assert torch.autograd.gradcheck(run, (x, gate))


def test_permute_rejects_expert_ids_out_of_range():
    with pytest.raises(ValueError, match="num_experts=2"):
        moe_permute(torch.randn(2, 3), torch.tensor([[0, 2], [1, 1]]), 2, backend=REF)


def test_unpermute_rejects_mismatched_gate():
    permuted, row_map, _ = moe_permute(torch.randn(3, 2), torch.tensor([[0], [1], [0]]), 2, backend=REF)
    with pytest.raises(ValueError, match="gate"):
        moe_unpermute(permuted, row_map, torch.ones(2, 1), 3, backend=REF)


@pytest.mark.parametrize("counts", [[3, 0, 5, 1], [0, 0, 9, 0], [0, 0, 0, 0]])
def test_grouped_swiglu_matches_dense_per_row_oracle(counts):
    torch.manual_seed(3)
    e, f, h = 4, 6, 5
    counts_t = torch.tensor(counts)
    x = torch.randn(sum(counts), h, dtype=torch.float64, requires_grad=True)
    weights = [
        torch.randn(e, f, h, dtype=torch.float64, requires_grad=True),
        torch.randn(e, f, h, dtype=torch.float64, requires_grad=True),
        torch.randn(e, h, f, dtype=torch.float64, requires_grad=True),
    ]
    out = grouped_swiglu(x, counts_t, *weights, backend=REF)
    want = dense_swiglu_oracle(x, counts_t, *weights)
    assert out.shape == (sum(counts), h)
    # Same fp64 maths in another order; measured max abs error 3.6e-15 (values up to 10).
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    if sum(counts):
        got = torch.autograd.grad(out.sum(), [x, *weights])
        expected = torch.autograd.grad(want.sum(), [x, *weights])
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_grouped_swiglu_rejects_counts_that_do_not_sum_to_rows():
    with pytest.raises(ValueError, match="sum to the 4 rows"):
        grouped_swiglu(
            torch.randn(4, 2),
            torch.tensor([1, 2]),
            torch.randn(2, 3, 2),
            torch.randn(2, 3, 2),
            torch.randn(2, 2, 3),
            backend=REF,
        )
