"""Feed-forward blocks: the dense SwiGLU MLP, a shard of routed experts, and the MoE block."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels import grouped_swiglu
from policies.dispatcher import Dispatcher, LocalDispatcher
from policies.hf_config import RdepMoeConfig
from policies.router import Router

# Rows x experts up to which an inference step on the CPU runs every expert on every row (`all_experts_swiglu`)
# instead of grouping rows by expert: a decode step of the tiny policy (<= 128 rows x 8 experts) then costs a
# handful of ops per MoE layer instead of a permute, one matmul chain per expert and an unpermute.
ALL_EXPERTS_MAX_ROWS = 1024


def all_experts_swiglu(
    x: torch.Tensor,
    expert_idx: torch.Tensor,
    gate: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
) -> torch.Tensor:
    """(N, H): ``out[n] = sum_k gate[n, k] * down_e(silu(gate_e(x[n])) * up_e(x[n]))`` with ``e = expert_idx[n, k]``.

    x (N, H); expert_idx (N, K) int64 local expert ids; gate (N, K); w_gate, w_up (E, F, H); w_down (E, H, F).
    Every expert runs on every row (E/K times the FLOPs of the grouped path, in three matmuls) and the unchosen
    experts get weight 0, so the result equals the grouped path up to float rounding. The gates and the sum are
    in float32 at least, as in ``moe_unpermute``.
    """
    experts, width, hidden_size = w_gate.shape
    rows = x.shape[0]
    hidden = F.silu(x @ w_gate.reshape(experts * width, hidden_size).T) * (
        x @ w_up.reshape(experts * width, hidden_size).T
    )
    per_expert = torch.bmm(hidden.view(rows, experts, width).transpose(0, 1), w_down.transpose(1, 2))  # (E, N, H)
    acc = torch.promote_types(torch.promote_types(x.dtype, gate.dtype), torch.float32)
    weights = torch.zeros(rows, experts, dtype=acc, device=x.device).scatter_add_(1, expert_idx, gate.to(acc))
    return torch.einsum("ne,enh->nh", weights, per_expert.to(acc)).to(x.dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)); the dense layers' MLP and the fused shared experts."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ExpertShard(nn.Module):
    """Routed experts [first, first + count) of one MoE layer, as stacked SwiGLU weights."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.first = 0
        self.w_gate = nn.Parameter(torch.empty(num_experts, intermediate_size, hidden_size))  # (E, F, H)
        self.w_up = nn.Parameter(torch.empty(num_experts, intermediate_size, hidden_size))  # (E, F, H)
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))  # (E, H, F)

    @property
    def count(self) -> int:
        return self.w_gate.shape[0]

    def forward(self, x: torch.Tensor, tokens_per_expert: torch.Tensor) -> torch.Tensor:
        """x (M, H) grouped by local expert, tokens_per_expert (count,) -> (M, H)."""
        return grouped_swiglu(x, tokens_per_expert, self.w_gate, self.w_up, self.w_down)

    @torch.no_grad()
    def shard_(self, first: int, count: int) -> None:
        """Keep only experts [first, first + count) (this rank's slice of the full layer)."""
        if first < self.first or first + count > self.first + self.count:
            raise ValueError(f"experts [{first}, {first + count}) are not all held by this shard")
        start = first - self.first
        for name in ("w_gate", "w_up", "w_down"):
            full = getattr(self, name)
            setattr(self, name, nn.Parameter(full[start : start + count].clone(), requires_grad=full.requires_grad))
        self.first = first


@dataclass(frozen=True)
class MoEOutput:
    hidden: torch.Tensor  # (B, T, H)
    expert_idx: torch.Tensor  # (B, T, K) int64
    aux_loss: torch.Tensor | None


class MoEBlock(nn.Module):
    """Shared experts plus top-k routed experts run through a `Dispatcher`."""

    def __init__(self, config: RdepMoeConfig) -> None:
        super().__init__()
        self.router = Router(config)
        self.experts = ExpertShard(config.num_experts, config.hidden_size, config.moe_intermediate_size)
        self.shared = (
            SwiGLU(config.hidden_size, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts
            else None
        )
        # Not a submodule (it holds process-group state, not weights); swapped by `use_dispatcher`.
        self.dispatcher: Dispatcher = LocalDispatcher(config.num_experts)

    def forward(self, x: torch.Tensor, routes: torch.Tensor | None = None) -> MoEOutput:
        """x (B, T, H); routes (B, T, K) replays given experts."""
        batch, length, hidden = x.shape
        flat = x.reshape(-1, hidden)
        routing = self.router(flat, None if routes is None else routes.reshape(batch * length, -1))
        if self.runs_all_experts(flat):
            local = routing.expert_idx - self.experts.first
            experts = self.experts
            out = all_experts_swiglu(flat, local, routing.gate, experts.w_gate, experts.w_up, experts.w_down)
        else:
            out = self.dispatcher.combine(flat, routing.expert_idx, routing.gate, self.experts)
        if self.shared is not None:
            out = out + self.shared(flat)
        return MoEOutput(
            hidden=out.view(batch, length, hidden),
            expert_idx=routing.expert_idx.view(batch, length, -1),
            aux_loss=routing.aux_loss,
        )

    def runs_all_experts(self, flat: torch.Tensor) -> bool:
        """An inference step on the CPU with every expert here and few rows: run all experts on all rows."""
        return (
            not torch.is_grad_enabled()
            and flat.device.type == "cpu"
            and isinstance(self.dispatcher, LocalDispatcher)
            and self.experts.count == self.dispatcher.num_experts
            and flat.shape[0] * self.experts.count <= ALL_EXPERTS_MAX_ROWS
        )
