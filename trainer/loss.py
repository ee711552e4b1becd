"""The GRPO loss terms as pure functions over (B, T) token tensors.

* `policy_loss`: PPO's clipped surrogate per token with separate low/high clip ranges
  (clip-higher, DAPO) and the optional dual clip for negative advantages (Ye et al. 2020).
* `aggregate`: reduces per-token values to the scalar loss (`token-mean`, `seq-mean-token-mean`,
  `seq-mean-token-sum-norm`) with denominators given by the caller, so micro-batches and ranks
  that each hold part of a batch sum to exactly the whole batch's loss.
* `kl_penalty`: the k1 / k2 / k3 estimators of KL(pi || ref) from token logprobs.
* `importance_weights`: truncated (or masked) importance sampling between the trainer's logprobs
  and the rollout engine's behaviour logprobs, per token or per sequence, and `mismatch_metrics`.

Masks are float tensors (1 = a sampled, trainable token); every reduction ignores the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]
ISLevel = Literal["token", "sequence"]
ISMode = Literal["truncate", "mask"]


@dataclass(frozen=True)
class PolicyLoss:
    """Per-token surrogate loss and where clipping was active (for metrics)."""

    loss: torch.Tensor  # (B, T) to minimise
    clipped: torch.Tensor  # (B, T) bool: the clipped branch was taken (gradient zero there)
    dual_clipped: torch.Tensor  # (B, T) bool: the dual clip bound was taken


def policy_loss(
    logprobs: torch.Tensor,  # (B, T) current policy, differentiable
    old_logprobs: torch.Tensor,  # (B, T) proximal policy the ratio is taken against, no grad
    advantages: torch.Tensor,  # (B, T) or (B, 1)
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
) -> PolicyLoss:
    """max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), then for A < 0 capped at -A * dual_clip.

    r = exp(logprobs - old_logprobs). The dual clip bounds how much a negative-advantage token with
    a huge ratio can push (its loss is at most dual_clip * |A|, with zero gradient there).
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)  # exp overflow guard; |log r| > 20 is broken data
    ratio = torch.exp(log_ratio)
    advantages = advantages.expand_as(ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    took_clip = clipped > unclipped
    dual = torch.zeros_like(took_clip)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        bound = -advantages * dual_clip
        dual = (advantages < 0) & (loss > bound)
        loss = torch.where(dual, bound, loss)
    return PolicyLoss(loss=loss, clipped=took_clip, dual_clipped=dual)


def aggregate(
    values: torch.Tensor,  # (B, T)
    mask: torch.Tensor,  # (B, T) float
    mode: Aggregation,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: int | None = None,
) -> torch.Tensor:
    """Scalar loss from per-token values.

    * ``token-mean``: sum over all tokens / num_tokens (every token weighs the same; DAPO).
    * ``seq-mean-token-mean``: each sequence's token mean, averaged over num_sequences (GRPO paper).
    * ``seq-mean-token-sum-norm``: sum over all tokens / (num_sequences * norm_length) with a
      constant norm_length (Dr. GRPO: no length bias).

    num_tokens / num_sequences default to this call's own counts; pass the global counts of the
    whole batch (all micro-batches, all ranks) so that the parts add up to the whole.
    """
    masked = values * mask
    if mode == "token-mean":
        denominator = float(mask.sum()) if num_tokens is None else num_tokens
        return masked.sum() / max(denominator, 1.0)
    sequences = float((mask.sum(-1) > 0).sum()) if num_sequences is None else num_sequences
    if mode == "seq-mean-token-mean":
        per_sequence = masked.sum(-1) / mask.sum(-1).clamp_min(1.0)
        return per_sequence.sum() / max(sequences, 1.0)
    if mode == "seq-mean-token-sum-norm":
        if norm_length is None or norm_length < 1:
            raise ValueError("seq-mean-token-sum-norm needs norm_length >= 1 (the constant length it divides by)")
        return masked.sum() / (max(sequences, 1.0) * norm_length)
    raise ValueError(f"unknown aggregation {mode!r}")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi (Schulman's k1, k2, k3).

    With d = logprobs - ref_logprobs: k1 = d (unbiased, high variance, can be negative),
    k2 = d^2 / 2 (biased, low variance), k3 = exp(-d) - 1 + d (unbiased, low variance, >= 0).
    """
    d = logprobs - ref_logprobs
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        return torch.exp((-d).clamp(max=20.0)) - 1.0 + d
    raise ValueError(f"unknown KL estimator {estimator!r}")


@dataclass(frozen=True)
class ImportanceWeights:
    """Behaviour-policy correction weights and how often the threshold bit."""

    weights: torch.Tensor  # (B, T), 0 outside the mask
    capped_fraction: float  # share of weighted units (tokens or sequences) truncated or masked


def importance_weights(
    trainer_logprobs: torch.Tensor,  # (B, T) proximal policy (the trainer's weights), no grad
    behaviour_logprobs: torch.Tensor,  # (B, T) what the engine reported when sampling
    mask: torch.Tensor,  # (B, T) float
    level: ISLevel = "token",
    mode: ISMode = "truncate",
    threshold: float = 2.0,
) -> ImportanceWeights:
    """w = pi_trainer / pi_behaviour per token (or its product over a sequence), then

    * ``truncate``: w = min(w, threshold) (TIS);
    * ``mask``: w = w where w <= threshold, else 0 (the token, or the whole sequence, is dropped).

    Computed in log space so a long sequence's product cannot overflow.
    """
    if threshold <= 0:
        raise ValueError(f"importance-sampling threshold must be > 0, got {threshold}")
    log_w = (trainer_logprobs - behaviour_logprobs) * mask
    if level == "sequence":
        log_w = log_w.sum(-1, keepdim=True).expand_as(mask)
    elif level != "token":
        raise ValueError(f"unknown importance-sampling level {level!r}")
    log_threshold = math.log(threshold)
    over = log_w > log_threshold
    if mode == "truncate":
        weights = torch.exp(log_w.clamp(max=log_threshold))
    elif mode == "mask":
        weights = torch.where(over, torch.zeros_like(log_w), torch.exp(log_w.clamp(max=log_threshold)))
    else:
        raise ValueError(f"unknown importance-sampling mode {mode!r}")
    valid = mask > 0
    if level == "sequence":
        rows = valid.any(-1)
        capped = float(over[:, 0][rows].float().mean()) if rows.any() else 0.0
    else:
        capped = float(over[valid].float().mean()) if valid.any() else 0.0
    return ImportanceWeights(weights=weights * mask, capped_fraction=capped)


def mismatch_metrics(
    trainer_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the engine's logprobs are from the trainer's on the sampled tokens.

    ``kl_k1`` and ``kl_k3`` estimate KL(behaviour || trainer) from the behaviour's own samples.
    """
    valid = mask > 0
    if not valid.any():
        return {
            "mismatch/abs_diff_mean": 0.0,
            "mismatch/abs_diff_max": 0.0,
            "mismatch/kl_k1": 0.0,
            "mismatch/kl_k3": 0.0,
        }
    diff = (behaviour_logprobs - trainer_logprobs)[valid].double()  # log(behaviour / trainer)
    return {
        "mismatch/abs_diff_mean": float(diff.abs().mean()),
        "mismatch/abs_diff_max": float(diff.abs().max()),
        "mismatch/kl_k1": float(diff.mean()),
        "mismatch/kl_k3": float((torch.exp(-diff) - 1.0 + diff).mean()),
    }
