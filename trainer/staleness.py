"""Staleness: how many weights versions behind the trainer a sample was drawn, and what that costs its loss.

A sample's gap is ``current - version``. Without partial rollouts every token of a sample counts as drawn by its
trajectory's ``policy_version`` (the oldest weights that sampled any of its tokens), and the whole sample is kept
(gap <= ``max_staleness``), dropped, or down-weighted by ``stale_weight ** (gap - max_staleness)``
(`staleness_weight`). With ``loop.partial_rollouts`` the engine swaps weights between decode steps, so an
episode's tokens come from several versions (`gym.trajectory.Trajectory.token_versions`) and the same rule is
applied to each token with its own gap (`token_weights`): the fresh tokens of a long episode keep their full
weight while its oldest ones are dropped or down-weighted. Staleness is measured in tokens either way
(`token_staleness`, the step's ``staleness/token_*`` metrics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from gym.trajectory import Trajectory
from trainer.config import LoopConfig
from trainer.sample import Group

AHEAD = "engine_error"
"""The `Trajectory.placement` key under which `mask_ahead` says why it masked a sample (`trainer.masking`)."""


def staleness_weight(gap: int, loop: LoopConfig) -> float | None:
    """Loss weight of a sample ``gap`` versions behind the trainer; None means drop it."""
    if gap < 0:
        raise ValueError(f"sample is {-gap} versions ahead of the trainer: weights versions are out of order")
    if gap <= loop.max_staleness:
        return 1.0
    if loop.stale_policy == "drop":
        return None
    return loop.stale_weight ** (gap - loop.max_staleness)


def token_versions(trajectory: Trajectory) -> np.ndarray:
    """(T,) int64 over ``trajectory.ids``: the weights version of each sampled token, -1 elsewhere (a record
    without ``token_versions``: ``policy_version`` for every sampled token)."""
    if trajectory.token_versions is None:
        return np.where(np.asarray(trajectory.sampled, dtype=bool), trajectory.policy_version, -1).astype(np.int64)
    return np.fromiter((-1 if v is None else v for v in trajectory.token_versions), np.int64, len(trajectory.ids))


def token_weights(trajectory: Trajectory, current: int, loop: LoopConfig) -> np.ndarray:
    """(T,) float32 over ``trajectory.ids``: each sampled token's loss weight by its own gap (`staleness_weight`'s
    rule per token: 1 within ``max_staleness``, then 0 for ``drop`` or ``stale_weight ** excess``), 0 elsewhere."""
    versions = token_versions(trajectory)
    sampled = versions >= 0
    gaps = current - versions[sampled]
    if gaps.size and gaps.min() < 0:
        raise ValueError(
            f"task {trajectory.task_id}: a token is {-gaps.min()} versions ahead of the trainer: weights versions "
            "are out of order"
        )
    excess = gaps - loop.max_staleness
    if loop.stale_policy == "drop":
        sampled_weights = (excess <= 0).astype(np.float32)
    else:
        sampled_weights = np.power(loop.stale_weight, np.maximum(excess, 0)).astype(np.float32)
    weights = np.zeros(len(versions), dtype=np.float32)
    weights[sampled] = sampled_weights
    return weights


def token_staleness(trajectories: Iterable[Trajectory], current: int, max_staleness: int) -> dict[str, float]:
    """Staleness of the sampled tokens of ``trajectories`` against the trainer's ``current`` version: mean and max
    gap in versions, the share of tokens more than ``max_staleness`` behind, and the share of trajectories whose
    tokens span more than one version (episodes a weight update landed in)."""
    gaps, spanning, count = [], 0, 0
    for trajectory in trajectories:
        versions = token_versions(trajectory)
        versions = versions[versions >= 0]
        if not versions.size:
            continue
        count += 1
        spanning += int(versions.min() != versions.max())
        gaps.append(current - versions)
    every = np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)
    if not every.size:
        return {"staleness/token_mean": 0.0, "staleness/token_max": 0.0, "staleness/token_stale_share": 0.0,
                "staleness/multi_version_share": 0.0}  # fmt: skip
    every = np.maximum(every, 0)
    return {
        "staleness/token_mean": float(every.mean()),
        "staleness/token_max": float(every.max()),
        "staleness/token_stale_share": float((every > max_staleness).mean()),
        "staleness/multi_version_share": spanning / count,
    }


def mask_ahead(group: Group, current: int) -> Group:
    """``group`` with every sample masked whose tokens the engine says were drawn by weights newer than the trainer's
    ``current`` version. Only the trainer makes versions, so such a sample is the engine's fault (a server that
    lost count, or one that lies): its episode is masked and counted like any engine failure, and the run goes on
    (`select_group` never sees a version ahead of it)."""
    samples = []
    for sample in group.samples:
        versions = token_versions(sample.trajectory)
        newest = int(max(versions.max(initial=-1), sample.trajectory.policy_version))
        if newest <= current or sample.masked:
            samples.append(sample)
            continue
        why = f"weights version {newest} reported, the trainer's newest is {current}"
        trajectory = sample.trajectory.model_copy(
            update={"masked": True, "reward": None, "placement": {**sample.trajectory.placement, AHEAD: why}}
        )
        samples.append(dataclasses.replace(sample, trajectory=trajectory))
    return dataclasses.replace(group, samples=tuple(samples))
