"""Which samples enter the loss, with which advantage and weight.

Per group, in order:

1. masked samples (``infra_error``, or never graded) are removed and counted;
2. staleness (`trainer.staleness`): a sample sampled by weights ``gap = current - version`` versions old is
   kept when ``gap <= max_staleness``; beyond that it is dropped, or (``downweight``) its loss is multiplied
   by ``stale_weight ** (gap - max_staleness)``. With ``loop.partial_rollouts`` the rule applies to each
   sampled token by its own version (`Scored.token_weights`); a sample none of whose tokens is kept is
   dropped;
3. rewards get the overlong penalty and the KL-in-reward term when configured;
4. dynamic sampling drops the group when the remaining rewards are all equal;
5. advantages are computed over the remaining samples; with ``overlong.mode = filter`` truncated
   samples still count in the baseline but are kept out of the loss.

`BatchFiller` draws groups until `groups_per_step` are kept (dynamic sampling's refill), or until
the draw budget is spent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.advantage import group_advantages, has_signal, overlong_penalty
from trainer.config import AlgorithmConfig, LoopConfig
from trainer.sample import Group, Sample
from trainer.staleness import staleness_weight, token_weights

__all__ = ["BatchFiller", "GroupOutcome", "Scored", "select_group", "staleness_weight"]


@dataclass(frozen=True)
class Scored:
    """A sample that enters the loss."""

    sample: Sample
    advantage: float
    weight: float = 1.0
    """Multiplies the sample's token losses (staleness down-weighting)."""
    token_weights: np.ndarray | None = None
    """(T,) float32 over the trajectory's ids: each sampled token's staleness weight by its own version (partial
    rollouts), used instead of ``weight``; None: ``weight`` for every token."""
    reward: float = 0.0
    """The reward the advantage was computed from (after penalties)."""


@dataclass
class GroupOutcome:
    """What selection made of one group."""

    scored: list[Scored]
    counts: Counter
    kept: bool
    rewards: list[float] = field(default_factory=list)
    """Rewards of the unmasked, fresh-enough samples (after penalties)."""


def select_group(
    group: Group,
    current_version: int,
    algorithm: AlgorithmConfig,
    loop: LoopConfig,
    reward_offsets: Sequence[float] | None = None,
) -> GroupOutcome:
    """Apply masking, staleness, penalties, dynamic sampling and advantages to one group.

    ``reward_offsets[i]`` is added to sample i's reward (the KL-in-reward term, already negative).
    """
    counts: Counter = Counter(samples=len(group.samples))
    kept: list[tuple[Sample, float, np.ndarray | None, float]] = []  # (sample, weight, token weights, reward)
    for i, sample in enumerate(group.samples):
        if sample.masked:
            counts["masked"] += 1
            continue
        per_token = None
        if loop.partial_rollouts and sample.num_sampled:
            per_token = token_weights(sample.trajectory, current_version, loop)
            weights = per_token[np.asarray(sample.trajectory.sampled, dtype=bool)]
            dropped, lowered = int((weights == 0).sum()), int(((weights > 0) & (weights < 1)).sum())
            counts["stale_tokens_dropped"] += dropped  # counted (0 too) only with partial rollouts
            counts["stale_tokens_downweighted"] += lowered
            if dropped == weights.size:  # not one token fresh enough to learn from
                counts["stale_dropped"] += 1
                continue
            if lowered:
                counts["stale_downweighted"] += 1
            if not (dropped or lowered):
                per_token = None  # every token fresh: the plain weight says the same
            weight = 1.0
        else:
            weight = staleness_weight(current_version - sample.version, loop)
            if weight is None:
                counts["stale_dropped"] += 1
                continue
            if weight < 1.0:
                counts["stale_downweighted"] += 1
        reward = sample.reward
        if algorithm.overlong.mode == "penalty":
            penalty = overlong_penalty(
                sample.num_sampled, algorithm.overlong.max_tokens, algorithm.overlong.buffer_tokens
            )
            counts["overlong_penalised"] += penalty < 0
            reward += penalty
        if reward_offsets is not None:
            reward += reward_offsets[i]
        kept.append((sample, weight, per_token, reward))
    rewards = [reward for *_, reward in kept]
    if len(kept) < 2 or (algorithm.dynamic_sampling.enabled and not has_signal(rewards)):
        counts["groups_dropped"] += 1
        return GroupOutcome(scored=[], counts=counts, kept=False, rewards=rewards)
    advantages = group_advantages(
        torch.tensor(rewards, dtype=torch.float64),
        algorithm.advantage.baseline,
        algorithm.advantage.std_normalize,
        algorithm.advantage.eps,
        algorithm.advantage.negative_weight,
    ).tolist()
    scored = []
    for (sample, weight, per_token, reward), advantage in zip(kept, advantages):
        if algorithm.overlong.mode == "filter" and sample.truncated:
            counts["overlong_filtered"] += 1
            continue
        scored.append(
            Scored(
                sample=sample,
                advantage=advantage,
                weight=weight,
                token_weights=per_token,
                reward=reward,
            )
        )
    counts["groups_kept"] += 1
    return GroupOutcome(scored=scored, counts=counts, kept=True, rewards=rewards)


class BatchFiller:
    """Accumulates kept groups for one step; dynamic sampling refills until the batch is full."""

    def __init__(self, groups_per_step: int, max_draw_factor: float) -> None:
        self.groups_per_step = groups_per_step
        self.max_draws = max(groups_per_step, int(groups_per_step * max_draw_factor))
        self.scored: list[Scored] = []
        self.outcomes: list[GroupOutcome] = []
        self.groups: list[Group] = []
        self.counts: Counter = Counter()
        self.kept_groups = 0

    def add(self, group: Group, outcome: GroupOutcome) -> None:
        self.groups.append(group)
        self.outcomes.append(outcome)
        self.counts.update(outcome.counts)
        if outcome.kept:
            self.kept_groups += 1
            self.scored.extend(outcome.scored)

    @property
    def drawn(self) -> int:
        return len(self.groups)

    @property
    def full(self) -> bool:
        return self.kept_groups >= self.groups_per_step

    @property
    def exhausted(self) -> bool:
        """The draw budget is spent: train on what was kept (possibly nothing)."""
        return self.drawn >= self.max_draws

    @property
    def done(self) -> bool:
        return self.full or self.exhausted
