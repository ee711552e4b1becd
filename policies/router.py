"""Sigmoid top-k router with aux-loss-free load balancing and routing replay.

Scores are `sigmoid(x W^T)` per expert. Selection uses `scores + bias`, where the per-expert
bias exists only to steer selection toward balance (DeepSeek-V3's aux-loss-free rule: after a
step, `bias += rate * sign(mean_load - load)`); gates use the unbiased scores, so the bias never
enters the gradient. Replay (R3): given routes replace the top-k choice, row by row, so a trainer
recomputes logprobs with exactly the experts the rollout used; a row of -1 means "route freely".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from policies.hf_config import RdepMoeConfig


@dataclass(frozen=True)
class Routing:
    """The router's decision for N tokens."""

    expert_idx: torch.Tensor  # (N, K) int64, global expert ids
    gate: torch.Tensor  # (N, K) float32 weights of the selected experts
    aux_loss: torch.Tensor | None  # scalar balance loss, only when aux_loss_coef > 0 and training


class Router(nn.Module):
    def __init__(self, config: RdepMoeConfig) -> None:
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.scaling = config.routed_scaling_factor
        self.aux_loss_coef = config.aux_loss_coef
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        # Selection-only bias: saved with the checkpoint, never trained by gradient.
        self.register_buffer("bias", torch.zeros(config.num_experts, dtype=torch.float32))
        # Selections counted since the last bias update (training mode only).
        self.register_buffer("load", torch.zeros(config.num_experts, dtype=torch.float32), persistent=False)

    def forward(self, x: torch.Tensor, routes: torch.Tensor | None = None) -> Routing:
        """Route x (N, H); `routes` (N, K) int64 replays given experts (-1 rows: route freely)."""
        scores = torch.sigmoid(x.float() @ self.weight.float().t())  # (N, E) router kept in fp32
        with torch.no_grad():
            chosen = torch.topk(scores + self.bias, self.top_k, dim=-1).indices
            if routes is not None:
                chosen = self._replayed(routes, chosen)
        gate = scores.gather(1, chosen)
        if self.norm_topk_prob:
            gate = gate / gate.sum(dim=-1, keepdim=True).clamp_min(1e-20)
        gate = gate * self.scaling
        if self.training:
            self.load += torch.bincount(chosen.flatten(), minlength=self.num_experts).to(self.load.dtype)
        aux = self._balance_loss(scores, chosen) if self.training and self.aux_loss_coef > 0 else None
        return Routing(expert_idx=chosen, gate=gate, aux_loss=aux)

    def _replayed(self, routes: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        if routes.shape != chosen.shape:
            raise ValueError(f"replayed routes have shape {tuple(routes.shape)}; expected {tuple(chosen.shape)}")
        routes = routes.to(device=chosen.device, dtype=torch.int64)
        if routes.numel() and (routes.min() < -1 or routes.max() >= self.num_experts):
            raise ValueError(f"replayed routes must be expert ids in [0, {self.num_experts}) or -1")
        free = (routes < 0).any(dim=-1, keepdim=True)
        return torch.where(free, chosen, routes)

    def _balance_loss(self, scores: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Batch-wise balance loss coef * sum_i f_i * P_i (f: selection share, P: mean normalised score)."""
        tokens = scores.shape[0]
        counts = torch.bincount(chosen.flatten(), minlength=self.num_experts).to(scores.dtype)
        f = counts * self.num_experts / (self.top_k * max(tokens, 1))
        p = (scores / scores.sum(dim=-1, keepdim=True)).mean(dim=0)
        return self.aux_loss_coef * (f * p).sum()

    @torch.no_grad()
    def update_bias(self, rate: float, load: torch.Tensor | None = None) -> float:
        """Apply the sign rule with `load` (default: this router's counts) and reset the counts.

        Returns the max load violation before the update: max(load) / mean(load) - 1 (0 is balanced).
        """
        load = self.load if load is None else load.to(self.load)
        mean = load.mean()
        violation = float(load.max() / mean - 1) if mean > 0 else 0.0
        self.bias += rate * torch.sign(mean - load)
        self.load.zero_()
        return violation
