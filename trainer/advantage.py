"""Group-relative advantages and the group filters applied before them (dynamic sampling, overlong).

A GRPO group is the G samples drawn for one prompt. Each sample's advantage is its reward minus a
baseline from its group, optionally divided by the group's reward std:

* ``mean``:          A_i = r_i - mean_j r_j
* ``leave_one_out``: A_i = r_i - mean_{j != i} r_j  = G / (G - 1) * (r_i - mean_j r_j)   (RLOO)
* ``std_normalize``: A_i /= (std_j r_j + eps), std with Bessel's correction (GRPO; off = Dr. GRPO)
* ``negative_weight`` w in (0, 1]: A_i *= w where A_i < 0 (1 = the symmetric estimator). The gradient of a
  group splits into positive-sample reinforcement (PSR: raise the logprob of samples above the baseline) and
  negative-sample reinforcement (NSR: lower it for samples below); NSR spreads the freed probability over every
  other token and so raises the entropy, PSR sharpens (Zhu et al. 2025, "The Surprising Effectiveness of
  Negative Reinforcement in LLM Reasoning"). At a low pass rate a group has one success and several
  failures, so NSR dominates; w < 1 rebalances it. A group's advantages then no longer sum to zero.

Masked samples (``infra_error``) take no part: callers pass only the unmasked rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

Baseline = Literal["mean", "leave_one_out"]


def group_advantages(
    rewards: torch.Tensor,  # (G,) rewards of one group's unmasked samples
    baseline: Baseline = "mean",
    std_normalize: bool = True,
    eps: float = 1e-6,
    negative_weight: float = 1.0,
) -> torch.Tensor:  # (G,)
    """Advantage of each sample of one group (see the module docstring for the formulas)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be one group (G,), got shape {tuple(rewards.shape)}")
    size = rewards.numel()
    if size < 2:
        return torch.zeros_like(rewards)  # no baseline exists: such a sample carries no signal
    rewards = rewards.double()
    centred = rewards - rewards.mean()
    if baseline == "leave_one_out":
        centred = centred * size / (size - 1)
    elif baseline != "mean":
        raise ValueError(f"unknown baseline {baseline!r}")
    if std_normalize:
        centred = centred / (rewards.std(unbiased=True) + eps)
    if not 0.0 < negative_weight <= 1.0:
        raise ValueError(f"negative_weight must be in (0, 1], got {negative_weight}")
    centred = torch.where(centred < 0, centred * negative_weight, centred)
    return centred.float()


def has_signal(rewards: Sequence[float], tolerance: float = 1e-9) -> bool:
    """Dynamic sampling's keep rule: a group is kept only when its rewards are not all equal.

    A zero-variance group has all-zero advantages: it costs compute and contributes no gradient
    (DAPO). Groups with fewer than two unmasked samples are dropped too.
    """
    if len(rewards) < 2:
        return False
    return max(rewards) - min(rewards) > tolerance


def overlong_penalty(length: int, max_tokens: int, buffer_tokens: int) -> float:
    """DAPO's soft overlong punishment, added to the reward.

    0 up to ``max_tokens - buffer_tokens`` sampled tokens, then falling linearly to -1 at
    ``max_tokens``, and -1 beyond.
    """
    if buffer_tokens <= 0:
        return -1.0 if length > max_tokens else 0.0
    start = max_tokens - buffer_tokens
    if length <= start:
        return 0.0
    return max(-1.0, (start - length) / buffer_tokens)
