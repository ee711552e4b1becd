"""Group-relative advantages and the group filters applied before them (dynamic sampling, overlong).

A GRPO group is the G samples drawn for one prompt. Each sample's advantage is its reward minus a
baseline from its group, optionally divided by the group's reward std:

* ``mean``:          A_i = r_i - mean_j r_j
* ``leave_one_out``: A_i = r_i - mean_{j != i} r_j  = G / (G - 1) * (r_i - mean_j r_j)   (RLOO)
* ``std_normalize``: A_i /= (std_j r_j + eps), std with Bessel's correction (GRPO; off = Dr. GRPO)

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
