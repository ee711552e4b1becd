"""Scored samples -> padded token tensors, split into micro-batches and over ranks.

Layout: sequences are right-padded to the longest in the micro-batch. Position t of every
per-token tensor refers to the *target* ``ids[t + 1]`` (what the model predicts from the prefix
``ids[: t + 1]``), so every per-token tensor is (B, T - 1). Staleness weights are one per sequence,
(B, 1), unless a sample carries a weight per token (partial rollouts, `Scored.token_weights`): then
(B, T - 1), and a token whose weight is 0 (too stale, ``stale_policy: drop``) is out of the loss mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trainer.selection import Scored


@dataclass(frozen=True)
class TrainBatch:
    """One micro-batch of token tensors."""

    input_ids: torch.Tensor  # (B, T) int64, right-padded with pad_id
    attention_mask: torch.Tensor  # (B, T) int64, 1 = real token
    loss_mask: torch.Tensor  # (B, T-1) float, 1 where the target token was sampled by the policy
    behaviour_logprobs: torch.Tensor  # (B, T-1) float, the engine's logprob of sampled targets, 0 elsewhere
    advantages: torch.Tensor  # (B, 1) float
    weights: torch.Tensor  # (B, 1) float staleness weights, or (B, T-1) per target when a sample has token weights
    routes: torch.Tensor | None  # (L_moe, B, T, K) int64, -1 = route freely

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def num_sequences(self) -> int:
        return int((self.loss_mask.sum(-1) > 0).sum())

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device) -> TrainBatch:
        """The same batch on ``device`` (collation happens on the CPU; the model may live on a GPU)."""
        if self.input_ids.device == device:
            return self
        moved = {
            name: getattr(self, name).to(device, non_blocking=True)
            for name in ("input_ids", "attention_mask", "loss_mask", "behaviour_logprobs", "advantages", "weights")
        }
        return TrainBatch(**moved, routes=None if self.routes is None else self.routes.to(device, non_blocking=True))


def collate(scored: Sequence[Scored], pad_id: int = 0, routes: bool = True) -> TrainBatch:
    """Pad ``scored`` into one TrainBatch; ``routes=False`` (or a sample without routes) disables replay rows."""
    if not scored:
        raise ValueError("cannot collate an empty list of samples")
    width = max(len(s.sample.trajectory.ids) for s in scored)
    size = len(scored)
    input_ids = torch.full((size, width), pad_id, dtype=torch.int64)
    attention = torch.zeros((size, width), dtype=torch.int64)
    loss_mask = torch.zeros((size, width - 1), dtype=torch.float32)
    behaviour = torch.zeros((size, width - 1), dtype=torch.float32)
    per_token = any(s.token_weights is not None for s in scored)  # partial rollouts: a weight per target
    weights = torch.tensor([[s.weight] for s in scored], dtype=torch.float32)
    if per_token:
        weights = torch.zeros((size, width - 1), dtype=torch.float32)
    route_rows = [s.sample.routes for s in scored] if routes else []
    route_tensor = None
    shapes = {r.shape[::2] for r in route_rows if r is not None}
    if route_rows and len(shapes) == 1:
        layers, top_k = shapes.pop()
        route_tensor = torch.full((layers, size, width, top_k), -1, dtype=torch.int64)
    elif len(shapes) > 1:
        raise ValueError(f"samples carry routes of different (layers, top_k): {sorted(shapes)}")
    for b, item in enumerate(scored):
        trajectory = item.sample.trajectory
        n = len(trajectory.ids)
        input_ids[b, :n] = torch.tensor(trajectory.ids, dtype=torch.int64)
        attention[b, :n] = 1
        sampled = torch.tensor(trajectory.sampled[1:], dtype=torch.float32)
        loss_mask[b, : n - 1] = sampled
        behaviour[b, : n - 1] = torch.tensor([lp or 0.0 for lp in trajectory.logprobs[1:]], dtype=torch.float32)
        if per_token:
            own = item.token_weights
            weights[b, : n - 1] = item.weight if own is None else torch.from_numpy(own[1:n]) * item.weight
            if own is not None:  # a dropped token leaves the loss (its KL, entropy and the token counts too)
                loss_mask[b, : n - 1] *= torch.from_numpy(own[1:n] > 0).to(torch.float32)
        if route_tensor is not None and item.sample.routes is not None:
            route_tensor[:, b, :n] = torch.from_numpy(np.asarray(item.sample.routes, dtype=np.int64))
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        behaviour_logprobs=behaviour,
        advantages=torch.tensor([[s.advantage] for s in scored], dtype=torch.float32),
        weights=weights,
        routes=route_tensor,
    )


def shard(items: Sequence[Scored], rank: int, world_size: int) -> list[Scored]:
    """This rank's share of a batch: items rank, rank + W, ... (sorted by length first, so shards
    get similar token counts)."""
    order = sorted(range(len(items)), key=lambda i: (len(items[i].sample.trajectory.ids), i))
    return [items[i] for i in order[rank::world_size]]


def micro_batches(items: Sequence[Scored], micro_batch_size: int, count: int | None = None) -> list[list[Scored]]:
    """Consecutive chunks of at most micro_batch_size; ``count`` pads with empty chunks so every
    rank runs the same number of forward passes (an RDEP exchange is collective)."""
    chunks = [list(items[i : i + micro_batch_size]) for i in range(0, len(items), micro_batch_size)]
    if count is not None:
        if count < len(chunks):
            raise ValueError(f"{len(chunks)} micro-batches do not fit in {count}")
        chunks += [[] for _ in range(count - len(chunks))]
    return chunks
