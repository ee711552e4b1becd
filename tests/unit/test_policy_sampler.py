"""Sampling maths: processed distributions, greedy, seeds, and that draws follow the distribution."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from policies.sampler import BLOCK, DRAWS_AHEAD, RowDraws, RowSampling, _invert, processed_logprobs, sample
from policies.sampling import MAX_SEED, MIN_TEMPERATURE, Completion, SamplingParams

LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])


def rows(n: int = 1, seeds: list[int] | None = None, **params) -> RowSampling:
    p = SamplingParams(**params)
    return RowSampling.build([p] * n, seeds or list(range(n)), torch.device("cpu"))


def test_temperature_scales_logits() -> None:
    got = processed_logprobs(LOGITS, rows(temperature=0.5))
    assert torch.allclose(got, torch.log_softmax(LOGITS / 0.5, dim=-1))


def test_top_k_keeps_k_tokens_renormalised() -> None:
    got = processed_logprobs(LOGITS, rows(top_k=2))
    assert torch.isinf(got[0, 2:]).all()
    assert torch.allclose(got[0, :2], torch.log_softmax(LOGITS[0, :2], dim=-1))


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probs = torch.softmax(LOGITS, dim=-1)[0]  # 0.563, 0.207, 0.126, 0.076, ...
    got = processed_logprobs(LOGITS, rows(top_p=0.7))
    kept = torch.isfinite(got[0])
    assert kept.tolist() == [True, True, False, False, False, False]  # 0.563 < 0.7 <= 0.563 + 0.207
    assert torch.allclose(got[0, :2].exp().sum(), torch.tensor(1.0))
    tiny = processed_logprobs(LOGITS, rows(top_p=0.01))
    assert torch.isfinite(tiny[0]).tolist() == [True] + [False] * 5  # the top token always survives
    assert probs[0] > 0.5


def test_rows_use_their_own_settings() -> None:
    mixed = RowSampling.build([SamplingParams(top_k=1), SamplingParams(temperature=2.0)], [0, 1], torch.device("cpu"))
    got = processed_logprobs(LOGITS.repeat(2, 1), mixed)
    assert torch.isfinite(got[0]).sum() == 1
    assert torch.allclose(got[1], torch.log_softmax(LOGITS[0] / 2.0, dim=-1))


def test_greedy_takes_argmax_with_zero_logprob() -> None:
    out = sample(LOGITS, rows(temperature=0.0))
    assert out.tokens.tolist() == [0]
    assert out.logprobs.tolist() == [0.0]
    assert torch.isclose(out.raw_logprobs[0], torch.log_softmax(LOGITS, dim=-1)[0, 0])


def test_logprobs_are_those_of_the_sampled_tokens() -> None:
    r = rows(n=64, temperature=0.8, top_k=4)
    out = sample(LOGITS.repeat(64, 1), r)
    processed = processed_logprobs(LOGITS.repeat(64, 1), r)
    assert torch.equal(out.logprobs, processed.gather(1, out.tokens[:, None])[:, 0])
    assert torch.equal(out.raw_logprobs, torch.log_softmax(LOGITS, dim=-1)[0, out.tokens])
    assert (out.tokens < 4).all()


def test_draws_follow_the_distribution() -> None:
    n = 20000
    out = sample(LOGITS.repeat(n, 1), rows(n=n))
    freq = torch.bincount(out.tokens, minlength=6).float() / n
    probs = torch.softmax(LOGITS, dim=-1)[0]
    # binomial std at p=0.56, n=2e4 is 0.0035; 0.015 is > 4 sigma
    assert torch.allclose(freq, probs, atol=0.015)


def test_processed_draws_follow_their_distribution() -> None:
    n = 20000
    r = rows(n=n, temperature=0.7, top_k=4)
    out = sample(LOGITS.repeat(n, 1), r)
    freq = torch.bincount(out.tokens, minlength=6).float() / n
    probs = torch.softmax(LOGITS[0, :4] / 0.7, dim=-1)
    assert freq[4:].sum() == 0
    assert torch.allclose(freq[:4], probs, atol=0.015)  # > 4 binomial sigma at p ~ 0.6


def test_inversion_never_lands_on_a_token_of_probability_zero() -> None:
    weights = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]])  # tokens 0, 2 and 4 have p = 0
    for u, token in [(0.0, 1), (0.2, 1), (0.25, 3), (0.9, 3), (1 - 2**-53, 3), (1.0, 3)]:
        tokens, total = _invert(weights, torch.tensor([u], dtype=torch.float64))
        assert tokens.tolist() == [token] and total.tolist() == [[1.0]]


def test_blocked_inversion_lands_where_the_whole_cumulative_sum_does() -> None:
    """Across blocks (a vocabulary that is not a multiple of BLOCK, whole blocks of weight 0, weight on both sides
    of a block edge, weights 1e-30 beside 1): at 4,096 evenly spaced u the token is the one the float64 cumulative
    sum over the whole row gives, and never one of weight 0, including at u = 0 and u -> 1."""
    vocabulary = 5 * BLOCK + 17
    weights = torch.rand(3, vocabulary, generator=torch.Generator().manual_seed(0))
    weights[:, BLOCK : 3 * BLOCK] = 0  # two empty blocks
    weights[1, : BLOCK - 1] = 0  # row 1: the mass starts at the last token of block 0
    weights[2] = 0
    weights[2, [BLOCK - 1, BLOCK * 3, vocabulary - 1]] = torch.tensor([1e-30, 1.0, 0.5])
    weights[0] = 0
    weights[0, [0, 3 * BLOCK]] = torch.tensor([0.25, 0.75])  # row 0: u = 0.25 lands exactly on the end of block 0
    grid = [0.0, *((k + 0.5) / 4096 for k in range(4096)), 0.25, 0.75, 1 - 2**-53]
    cdf = torch.cumsum(weights.double(), dim=-1)
    for u in torch.tensor(grid, dtype=torch.float64):
        tokens, _ = _invert(weights, u.repeat(3))
        reference = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0]
        assert torch.equal(tokens, reference), float(u)
        assert (weights.gather(1, tokens[:, None]) > 0).all(), float(u)
    tokens, _ = _invert(weights, torch.ones(3, dtype=torch.float64))  # u = 1 (never drawn): still a token of weight
    assert (weights.gather(1, tokens[:, None]) > 0).all()


def test_a_block_whose_float32_mass_exceeds_its_cumulative_sum_still_yields_a_token_of_weight() -> None:
    """The block masses are float32 sums: [1, 1e-8 x 62, 0] sums to 1.00000083 in float32, its float64 cumulative
    sum ends at 1.00000062; a target in between must land on the last token of weight (62), not past it."""
    weights = torch.tensor([[1.0] + [1e-8] * 62 + [0.0]])
    assert weights.sum().double() > weights.double().cumsum(-1)[0, -1]
    for u in (1 - 1e-9, 1 - 2**-53, 1.0):
        tokens, _ = _invert(weights, torch.tensor([u], dtype=torch.float64))
        assert tokens.tolist() == [62], u


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_row_of_non_finite_logits_gets_a_vocabulary_token_and_spares_its_batch(bad: float) -> None:
    logits = LOGITS.repeat(3, 1)
    logits[1] = bad
    for r in (rows(n=3, seeds=[1, 2, 3]), rows(n=3, seeds=[1, 2, 3], top_k=3)):
        out = sample(logits, r)
        assert 0 <= int(out.tokens[1]) < 6
        alone = sample(LOGITS.repeat(3, 1), rows(n=3, seeds=[1, 2, 3], top_k=r.top_k[0].item()))
        assert out.tokens[0] == alone.tokens[0] and out.tokens[2] == alone.tokens[2]


def test_a_step_takes_one_number_from_each_row_generator() -> None:
    r = rows(n=3, seeds=[5, 6, 7])
    sample(LOGITS.repeat(3, 1), r)
    assert [d.taken for d in r.draws] == [1, 1, 1]
    second = sample(LOGITS.repeat(3, 1), r)
    skipped = rows(n=3, seeds=[5, 6, 7])
    for d in skipped.draws:
        d.next()  # a stream one number on: its next step samples as the second step above
    assert torch.equal(sample(LOGITS.repeat(3, 1), skipped).tokens, second.tokens)
    assert [d.taken for d in r.draws] == [2, 2, 2]


@pytest.mark.parametrize("seed", [0, 7, MAX_SEED + 63])
def test_a_rows_stream_is_its_generators_numbers_one_draw_at_a_time(seed: int) -> None:
    """Drawn `DRAWS_AHEAD` at a time, a row's uniforms are the numbers one call a step would draw."""
    draws = RowDraws(seed)
    got = [draws.next() for _ in range(3 * DRAWS_AHEAD + 5)]
    one_by_one = torch.Generator().manual_seed(seed)
    expected = [torch.rand(1, generator=one_by_one, dtype=torch.float64).item() for _ in range(len(got))]
    assert got == expected and draws.taken == len(got)


def test_the_settings_tensors_are_built_only_when_read() -> None:
    r = rows(n=2, temperature=0.5, top_k=3)
    assert "temperature" not in vars(r) and "top_k" not in vars(r)
    sample(LOGITS.repeat(2, 1), r)
    assert r.temperature.tolist() == [0.5, 0.5] and r.top_k.tolist() == [3, 3] and r.top_p.tolist() == [1.0, 1.0]


def test_seeded_rows_do_not_depend_on_the_batch() -> None:
    alone = sample(LOGITS, rows(seeds=[7]))
    batched = sample(LOGITS.repeat(3, 1), rows(n=3, seeds=[1, 7, 2]))
    assert alone.tokens[0] == batched.tokens[1]
    again = sample(LOGITS.repeat(3, 1), rows(n=3, seeds=[1, 7, 2]))
    assert torch.equal(again.tokens, batched.tokens)


@pytest.mark.parametrize(
    "bad",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"max_tokens": 0},
        {"stop_token_ids": [-3]},
        {"tempreature": 1.0},
        {"temperature": float("inf")},
        {"temperature": float("nan")},
        {"temperature": 1e-40},
        {"top_p": float("nan")},
    ],
)
def test_invalid_sampling_params_are_rejected(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SamplingParams(**bad)


def test_the_smallest_temperature_samples_finite_logprobs() -> None:
    """At `MIN_TEMPERATURE` the processed distribution is still finite (below it, logits / temperature
    overflowed float32 and every sample was NaN)."""
    out = sample((LOGITS * 30).repeat(2, 1), rows(n=2, temperature=MIN_TEMPERATURE))
    assert torch.isfinite(out.logprobs).all() and out.tokens.tolist() == [0, 0]


def test_completion_is_frozen() -> None:
    c = Completion(token_ids=[1], logprobs=[-0.1], raw_logprobs=[-0.2], finish_reason="length", weights_version=3)
    with pytest.raises(ValidationError):
        c.weights_version = 4  # type: ignore[misc]
