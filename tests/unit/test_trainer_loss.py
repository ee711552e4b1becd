"""Every GRPO loss term against values computed by hand on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.advantage import group_advantages, has_signal, overlong_penalty
from trainer.evaluation import pass_at_k
from trainer.loss import aggregate, importance_weights, kl_penalty, mismatch_metrics, policy_loss


def lp(*ratios: float) -> torch.Tensor:
    """log of the given ratios, as a (1, T) logprob row (the old logprobs are 0)."""
    return torch.tensor([[math.log(r) for r in ratios]])


ZERO = torch.zeros(1, 3)


# --- advantages -------------------------------------------------------------------------------


def test_mean_baseline_with_std_normalisation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    # mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    expected = torch.tensor([0.866025, -0.866025, -0.866025, 0.866025])
    assert torch.allclose(group_advantages(rewards, "mean", True, eps=0.0), expected, atol=1e-5)


def test_mean_baseline_without_std_is_dr_grpo():
    rewards = torch.tensor([3.0, 1.0, 2.0])
    assert torch.allclose(group_advantages(rewards, "mean", False), torch.tensor([1.0, -1.0, 0.0]))


def test_leave_one_out_baseline():
    rewards = torch.tensor([3.0, 1.0, 2.0])
    # A_0 = 3 - (1+2)/2 = 1.5, A_1 = 1 - (3+2)/2 = -1.5, A_2 = 2 - (3+1)/2 = 0
    got = group_advantages(rewards, "leave_one_out", False)
    assert torch.allclose(got, torch.tensor([1.5, -1.5, 0.0]))
    assert not torch.allclose(got, group_advantages(rewards, "mean", False))  # the two baselines differ


def test_negative_weight_scales_only_samples_below_the_baseline():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one success: mean 0.25 -> +0.75, -0.25 x 3
    got = group_advantages(rewards, "mean", False, negative_weight=0.2)
    assert torch.allclose(got, torch.tensor([0.75, -0.05, -0.05, -0.05]))
    # with std normalisation the scale applies after dividing: unbiased std 0.5 -> +1.5, -0.5 * 0.2
    got = group_advantages(rewards, "mean", True, eps=0.0, negative_weight=0.2)
    assert torch.allclose(got, torch.tensor([1.5, -0.1, -0.1, -0.1]))
    assert torch.equal(group_advantages(rewards, "mean", False, negative_weight=1.0), rewards - 0.25)


@pytest.mark.parametrize("weight", [0.0, -0.5, 1.5])
def test_negative_weight_outside_its_range_is_refused(weight):
    with pytest.raises(ValueError, match="negative_weight"):
        group_advantages(torch.tensor([1.0, 0.0]), negative_weight=weight)


def test_single_sample_has_no_advantage():
    assert group_advantages(torch.tensor([5.0]), "mean", True).tolist() == [0.0]


def test_zero_variance_group_has_no_signal():
    assert not has_signal([0.5, 0.5, 0.5])
    assert has_signal([0.5, 0.5, 0.6])
    assert not has_signal([1.0])


def test_overlong_penalty_ramp():
    assert overlong_penalty(700, max_tokens=1000, buffer_tokens=200) == 0.0
    assert overlong_penalty(800, 1000, 200) == 0.0
    assert overlong_penalty(900, 1000, 200) == pytest.approx(-0.5)
    assert overlong_penalty(1000, 1000, 200) == pytest.approx(-1.0)
    assert overlong_penalty(5000, 1000, 200) == -1.0


# --- clipped objective ------------------------------------------------------------------------


def test_clip_high_for_positive_advantage():
    # A = +1: loss = -min(r, 1.28) for r >= 1; below 1 - 0.2 the unclipped -r is larger (no clip)
    terms = policy_loss(lp(1.1, 1.5, 0.5), ZERO, torch.tensor([[1.0]]), 0.2, 0.28, None)
    assert torch.allclose(terms.loss, torch.tensor([[-1.1, -1.28, -0.5]]), atol=1e-6)
    assert terms.clipped.tolist() == [[False, True, False]]


def test_clip_low_for_negative_advantage():
    # A = -1: loss = max(r, clip(r)) -> r=0.5 gives max(0.5, 0.8) = 0.8 (clipped); r=1.1 gives 1.1
    terms = policy_loss(lp(0.5, 1.1, 1.0), ZERO, torch.tensor([[-1.0]]), 0.2, 0.28, None)
    assert torch.allclose(terms.loss, torch.tensor([[0.8, 1.1, 1.0]]), atol=1e-6)
    assert terms.clipped.tolist() == [[True, False, False]]


def test_dual_clip_caps_negative_advantage_loss():
    # A = -2, r = 5: unclipped loss 10, dual clip c=3 caps it at 3 * 2 = 6; r = 2 gives 4 (under the cap)
    terms = policy_loss(lp(5.0, 2.0, 0.5), ZERO, torch.tensor([[-2.0]]), 0.2, 0.28, 3.0)
    assert torch.allclose(terms.loss, torch.tensor([[6.0, 4.0, 1.6]]), atol=1e-5)
    assert terms.dual_clipped.tolist() == [[True, False, False]]
    without = policy_loss(lp(5.0, 2.0, 0.5), ZERO, torch.tensor([[-2.0]]), 0.2, 0.28, None)
    assert without.loss[0, 0] == pytest.approx(10.0, rel=1e-5)


def test_dual_clip_leaves_positive_advantages_alone():
    terms = policy_loss(lp(5.0), torch.zeros(1, 1), torch.tensor([[2.0]]), 0.2, 0.28, 3.0)
    assert terms.loss.item() == pytest.approx(-2.0 * 1.28)
    assert not terms.dual_clipped.any()


def test_policy_gradient_at_ratio_one():
    # d/dlogp of -A r at r = 1 is -A: the plain policy-gradient direction
    logprobs = torch.zeros(1, 2, requires_grad=True)
    policy_loss(logprobs, torch.zeros(1, 2), torch.tensor([[0.5]])).loss.sum().backward()
    assert torch.allclose(logprobs.grad, torch.tensor([[-0.5, -0.5]]))


# --- aggregations -----------------------------------------------------------------------------

VALUES = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


def test_token_mean():
    assert aggregate(VALUES, MASK, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_seq_mean_token_mean():
    assert aggregate(VALUES, MASK, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)


def test_seq_mean_token_sum_norm():
    assert aggregate(VALUES, MASK, "seq-mean-token-sum-norm", norm_length=5).item() == pytest.approx(10 / (2 * 5))
    with pytest.raises(ValueError, match="norm_length"):
        aggregate(VALUES, MASK, "seq-mean-token-sum-norm")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_sum_to_the_whole_batch(mode):
    whole = aggregate(VALUES, MASK, mode, norm_length=4)
    parts = sum(
        aggregate(VALUES[i : i + 1], MASK[i : i + 1], mode, num_tokens=4.0, num_sequences=2.0, norm_length=4)
        for i in range(2)
    )
    assert parts.item() == pytest.approx(whole.item())
    # without the global denominators the parts would not add up (the check can fail)
    local = sum(aggregate(VALUES[i : i + 1], MASK[i : i + 1], mode, norm_length=4) for i in range(2))
    assert local.item() != pytest.approx(whole.item())


# --- KL estimators ----------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    logprobs = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(2.0)  # log pi - log ref
    assert kl_penalty(logprobs, ref, "k1").item() == pytest.approx(d)
    assert kl_penalty(logprobs, ref, "k2").item() == pytest.approx(0.5 * d * d)
    assert kl_penalty(logprobs, ref, "k3").item() == pytest.approx(0.5 - 1 + d)  # ref/pi = 0.5


def test_kl_estimators_are_unbiased_where_they_should_be():
    # samples from pi over 3 outcomes; E_pi[k1] = E_pi[k3] = KL(pi || ref) exactly when weighted by pi
    pi = torch.tensor([0.7, 0.2, 0.1])
    ref = torch.tensor([0.3, 0.3, 0.4])
    exact = float((pi * (pi / ref).log()).sum())
    for estimator in ("k1", "k3"):
        values = kl_penalty(pi.log()[None], ref.log()[None], estimator)[0]
        assert float((pi * values).sum()) == pytest.approx(exact, rel=1e-5)
    k2 = float((pi * kl_penalty(pi.log()[None], ref.log()[None], "k2")[0]).sum())
    assert k2 != pytest.approx(exact, rel=1e-3)  # k2 is biased


# --- truncated importance sampling ------------------------------------------------------------

TRAINER = torch.log(torch.tensor([[0.9, 0.5, 0.2, 0.3]]))
BEHAVIOUR = torch.log(torch.tensor([[0.3, 0.5, 0.4, 0.3]]))
IS_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])


def test_token_tis_truncate():
    out = importance_weights(TRAINER, BEHAVIOUR, IS_MASK, "token", "truncate", 2.0)
    # ratios 3.0, 1.0, 0.5 -> 2.0 (capped), 1.0, 0.5; the unmasked 4th is 0
    assert torch.allclose(out.weights, torch.tensor([[2.0, 1.0, 0.5, 0.0]]), atol=1e-6)
    assert out.capped_fraction == pytest.approx(1 / 3)


def test_token_tis_mask():
    out = importance_weights(TRAINER, BEHAVIOUR, IS_MASK, "token", "mask", 2.0)
    assert torch.allclose(out.weights, torch.tensor([[0.0, 1.0, 0.5, 0.0]]), atol=1e-6)


def test_sequence_tis_truncate_and_mask():
    # product of ratios 3 * 1 * 0.5 = 1.5 (under 2): kept whole; with threshold 1.2: capped / masked
    out = importance_weights(TRAINER, BEHAVIOUR, IS_MASK, "sequence", "truncate", 2.0)
    assert torch.allclose(out.weights, torch.tensor([[1.5, 1.5, 1.5, 0.0]]), atol=1e-5)
    capped = importance_weights(TRAINER, BEHAVIOUR, IS_MASK, "sequence", "truncate", 1.2)
    assert torch.allclose(capped.weights, torch.tensor([[1.2, 1.2, 1.2, 0.0]]), atol=1e-5)
    assert capped.capped_fraction == 1.0
    masked = importance_weights(TRAINER, BEHAVIOUR, IS_MASK, "sequence", "mask", 1.2)
    assert masked.weights.abs().sum() == 0


def test_sequence_tis_does_not_overflow_on_long_sequences():
    trainer = torch.zeros(1, 5000)
    behaviour = torch.full((1, 5000), -1.0)  # ratio e per token: e^5000 overflows without log space
    out = importance_weights(trainer, behaviour, torch.ones(1, 5000), "sequence", "truncate", 2.0)
    assert torch.isfinite(out.weights).all() and out.weights.max().item() == pytest.approx(2.0)


def test_mismatch_metrics():
    m = mismatch_metrics(TRAINER, BEHAVIOUR, IS_MASK)
    diffs = [math.log(0.3 / 0.9), 0.0, math.log(0.4 / 0.2)]
    assert m["mismatch/abs_diff_mean"] == pytest.approx(sum(abs(d) for d in diffs) / 3, rel=1e-5)
    assert m["mismatch/abs_diff_max"] == pytest.approx(max(abs(d) for d in diffs), rel=1e-5)
    assert m["mismatch/kl_k1"] == pytest.approx(sum(diffs) / 3, rel=1e-5)
    assert m["mismatch/kl_k3"] == pytest.approx(sum(math.exp(-d) - 1 + d for d in diffs) / 3, rel=1e-5)
    same = mismatch_metrics(TRAINER, TRAINER, IS_MASK)
    assert same["mismatch/abs_diff_max"] == 0.0 and same["mismatch/kl_k3"] == 0.0


# --- pass@k -----------------------------------------------------------------------------------


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0  # fewer than k failures: some k-subset always passes
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
