"""MoE permute / unpermute: group token rows by expert for top-k routing, and combine them back.

Layout. Token ``t``'s ``k``-th routing choice is the *slot* ``s = t * K + k``. ``moe_permute`` sorts the
T*K slots by expert, stably (ties keep slot order, so within an expert rows stay in token order), and
returns ``row_map``: permuted row ``r`` holds slot ``row_map[r]``, i.e. it is a copy of token
``row_map[r] // K`` sent to its ``row_map[r] % K``-th expert. Experts' rows are contiguous, in expert
order, ``tokens_per_expert[e]`` rows each (zero for an expert nobody picked).

``moe_unpermute`` inverts it with gate weighting: ``out[t] = sum_k gate[t, k] * y[r(t, k)]`` where
``r(t, k)`` is the permuted row of slot ``t * K + k``. Accumulation is at least fp32 (fp32 in the Triton
kernels); the output has y's dtype.

The slot sort and the counts are torch ops on both backends; the Triton backend (``kernels.permute_triton``)
moves the rows and computes the gradients with its own kernels, never with atomics.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import backend as dispatch


def routing(expert_idx: Tensor, num_experts: int) -> tuple[Tensor, Tensor]:
    """(row_map (T*K,) int64, tokens_per_expert (E,) int64) for expert_idx (T, K)."""
    if expert_idx.dim() != 2 or expert_idx.dtype != torch.int64:
        raise ValueError(f"expert_idx must be int64 (T, K), got {expert_idx.dtype} {tuple(expert_idx.shape)}")
    flat = expert_idx.reshape(-1)
    if capturing(flat):
        # inside a CUDA graph capture: bincount reads its largest id on the host (a sync capture forbids), so
        # count with scatter_add; the ids are the router's top-k there, in range by construction
        counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
        counts.scatter_add_(0, flat, torch.ones_like(flat))
        return torch.argsort(flat, stable=True), counts
    counts = torch.bincount(flat, minlength=num_experts)  # raises on negative ids
    if counts.shape[0] != num_experts:
        raise ValueError(f"expert_idx holds ids >= num_experts={num_experts} (largest is {counts.shape[0] - 1})")
    return torch.argsort(flat, stable=True), counts


def capturing(tensor: Tensor) -> bool:
    """Whether ``tensor``'s device is inside a CUDA graph capture on the current stream (never on the CPU)."""
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


def inverse(row_map: Tensor) -> Tensor:
    """(T*K,) permuted row of each slot: ``inverse(row_map)[row_map[r]] == r``."""
    inv = torch.empty_like(row_map)
    inv[row_map] = torch.arange(row_map.numel(), device=row_map.device)
    return inv


def moe_permute(
    x: Tensor, expert_idx: Tensor, num_experts: int, backend: str | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Rows of x (T, H) grouped by expert: (permuted (T*K, H), row_map (T*K,), tokens_per_expert (E,)).

    See the module docstring for the layout of ``row_map``. Differentiable w.r.t. x.
    """
    if x.dim() != 2 or expert_idx.shape[:1] != x.shape[:1]:
        raise ValueError(f"x {tuple(x.shape)} must be (T, H) with expert_idx (T, K), got {tuple(expert_idx.shape)}")
    row_map, counts = routing(expert_idx, num_experts)
    top_k = expert_idx.shape[1]
    if dispatch.resolve(backend, x.device) == "triton" and row_map.numel() > 0:
        permuted = dispatch.triton_module("permute_triton").permute(x, row_map, top_k)
    else:
        permuted = x[row_map // top_k]
    return permuted, row_map, counts


def moe_unpermute(y: Tensor, row_map: Tensor, gate: Tensor, num_tokens: int, backend: str | None = None) -> Tensor:
    """(T, H) with ``out[t] = sum_k gate[t, k] * y[row of slot t*K+k]``; differentiable w.r.t. y and gate.

    y (T*K, H) are expert outputs in permuted order, row_map from ``moe_permute``, gate (T, K).
    """
    if gate.dim() != 2 or gate.shape[0] != num_tokens:
        raise ValueError(f"gate must be (num_tokens={num_tokens}, K), got {tuple(gate.shape)}")
    if y.dim() != 2 or y.shape[0] != row_map.numel() or row_map.numel() != gate.numel():
        raise ValueError(
            f"y {tuple(y.shape)}, row_map {tuple(row_map.shape)} and gate {tuple(gate.shape)} disagree on T*K"
        )
    if dispatch.resolve(backend, y.device) == "triton" and row_map.numel() > 0:
        return dispatch.triton_module("permute_triton").unpermute(y, row_map, gate)
    rows = y[inverse(row_map)].view(num_tokens, gate.shape[1], y.shape[1])  # (T, K, H)
    acc = torch.promote_types(torch.promote_types(y.dtype, gate.dtype), torch.float32)  # fp32 at least
    return (rows.to(acc) * gate.to(acc)[..., None]).sum(dim=1).to(y.dtype)
