"""RDEP: routed experts sharded over ranks, tokens sent to the rank that owns their expert.

One `Dispatcher` interface, three implementations:

* `LocalDispatcher` (one rank owns every expert: permute -> grouped SwiGLU -> unpermute);
* `policies.shm_dispatcher.SharedMemoryDispatcher` (intra-node: each rank writes rows straight
  into the owner's receive buffer in shared memory; the CPU analogue of CUDA IPC buffers);
* `policies.collective_dispatcher.CollectiveDispatcher` (multi-node fallback on torch.distributed).

The two remote ones share `RemoteDispatcher.combine`, the RDEP algorithm. Expert e lives on rank
e // (E / W). A rank groups its (token, k) rows by expert (so by owner), *dispatches* each owner's
slice into that owner's buffer together with per-expert counts, the owner runs its experts on
everything it received, and *returns* the results into the senders' buffers. Both legs are one
transport primitive, `exchange(rows, counts)`, wrapped in an autograd function whose backward is
the opposite exchange, so gradients flow back through the same buffers. Buffers have a fixed
capacity (rows per sender -> owner pair); every rank checks every pair after the counts are
written, so an overflow raises the same `DispatchCapacityError` on all ranks instead of a hang.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from kernels import moe_permute, moe_unpermute

ExpertFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""experts(rows (M, H) grouped by local expert, tokens_per_local_expert (E_local,)) -> (M, H)."""


class DispatchCapacityError(RuntimeError):
    """A sender -> owner pair needs more rows than the fixed receive buffer holds."""


class Dispatcher(ABC):
    """Runs a MoE layer's routed experts for this rank's tokens, wherever the experts live."""

    rank: int = 0
    world_size: int = 1

    def __init__(self, num_experts: int) -> None:
        if num_experts % self.world_size:
            raise ValueError(f"num_experts={num_experts} is not divisible by world_size={self.world_size}")
        self.num_experts = num_experts

    @property
    def num_local_experts(self) -> int:
        return self.num_experts // self.world_size

    @property
    def first_local_expert(self) -> int:
        return self.rank * self.num_local_experts

    @abstractmethod
    def combine(self, x: torch.Tensor, expert_idx: torch.Tensor, gate: torch.Tensor, experts: ExpertFn) -> torch.Tensor:
        """sum_k gate[t, k] * expert_{idx[t, k]}(x[t]) for x (T, H), expert_idx (T, K), gate (T, K)."""

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over ranks in place (router load counts); identity on one rank."""
        return tensor

    def close(self) -> None:  # noqa: B027 (a no-op default: a dispatcher without buffers has nothing to release)
        """Release buffers; idempotent."""


class LocalDispatcher(Dispatcher):
    """Every expert on this rank: no communication."""

    def combine(self, x: torch.Tensor, expert_idx: torch.Tensor, gate: torch.Tensor, experts: ExpertFn) -> torch.Tensor:
        permuted, row_map, tokens_per_expert = moe_permute(x, expert_idx, self.num_experts)
        out = experts(permuted, tokens_per_expert)
        return moe_unpermute(out, row_map, gate.to(out.dtype), x.shape[0])


class _Exchange(torch.autograd.Function):
    """Differentiable exchange: backward sends the gradient rows back the way they came."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, counts: torch.Tensor, dispatcher: RemoteDispatcher):  # type: ignore[override]
        out, counts_recv = dispatcher.exchange(rows, counts)
        ctx.dispatcher = dispatcher
        ctx.counts_recv = counts_recv
        ctx.width, ctx.dtype, ctx.device = rows.shape[1], rows.dtype, rows.device
        ctx.mark_non_differentiable(counts_recv)
        return out, counts_recv

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor | None, _grad_counts: None):  # type: ignore[override]
        if grad_out is None:  # still take part: the other ranks are inside the same exchange
            grad_out = torch.zeros(int(ctx.counts_recv.sum()), ctx.width, dtype=ctx.dtype, device=ctx.device)
        grad_rows, _ = ctx.dispatcher.exchange(grad_out.contiguous(), ctx.counts_recv)
        return grad_rows, None, None


class RemoteDispatcher(Dispatcher):
    """The RDEP algorithm over a transport (`exchange`) that subclasses provide.

    Every rank must call `combine` (and backward through it) the same number of times in the
    same order: each exchange is collective.
    """

    def __init__(self, num_experts: int, rank: int, world_size: int, capacity: int) -> None:
        self.rank, self.world_size = rank, world_size
        super().__init__(num_experts)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 row per rank pair, got {capacity}")
        self.capacity = capacity

    @abstractmethod
    def exchange(self, rows: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Collective. rows (N, H): consecutive slices for ranks 0..W-1, slice d has counts[d].sum() rows;
        counts (W, E_local) int64 rows per destination and local expert.

        Returns the rows received from ranks 0..W-1 concatenated in sender order, and their counts
        (W, E_local): row s is what rank s sent here.
        """

    def check_capacity(self, pair_rows: torch.Tensor) -> None:
        """pair_rows (W_src, W_dst): raise the same error on every rank when any pair overflows."""
        over = (pair_rows > self.capacity).nonzero()
        if len(over):
            src, dst = (int(v) for v in over[0])
            raise DispatchCapacityError(
                f"RDEP dispatch overflow: rank {src} -> rank {dst} needs {int(pair_rows[src, dst])} rows but the "
                f"receive buffer holds {self.capacity} rows per rank pair (largest pair: {int(pair_rows.max())}); "
                "raise the dispatcher capacity or send fewer tokens per step"
            )

    def combine(self, x: torch.Tensor, expert_idx: torch.Tensor, gate: torch.Tensor, experts: ExpertFn) -> torch.Tensor:
        permuted, row_map, tokens_per_expert = moe_permute(x, expert_idx, self.num_experts)
        counts = tokens_per_expert.to(torch.int64).view(self.world_size, self.num_local_experts)
        received, counts_recv = _Exchange.apply(permuted, counts, self)  # dispatch
        # Received rows are ordered (sender, local expert); the grouped matmul wants them by expert.
        counts_recv = counts_recv.to(received.device)
        local_expert = torch.arange(self.num_local_experts, device=received.device).repeat(self.world_size)
        row_expert = local_expert.repeat_interleave(counts_recv.flatten())
        order = torch.argsort(row_expert, stable=True)
        grouped_out = experts(received[order], counts_recv.sum(dim=0))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=order.device)
        out = grouped_out[inverse]  # back to (sender, local expert) order
        returned, _ = _Exchange.apply(out, counts_recv, self)  # return
        return moe_unpermute(returned, row_map, gate.to(returned.dtype), x.shape[0])
