"""Triton kernels for ``kernels.permute``: row gather, gated combine, and the combine's backward.

Every kernel reads through an index and writes each output row exactly once (no atomics), so the
results are deterministic and equal the reference bit for bit in fp32 (the combine sums the K rows
in slot order, as the reference does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels import backend as dispatch
from kernels.permute import inverse


@triton.jit
def _gather_kernel(src_ptr, dst_ptr, slot_ptr, H, TOP_K: tl.constexpr, BLOCK_H: tl.constexpr):
    """dst[r] = src[slot[r] // TOP_K]."""
    row = tl.program_id(0).to(tl.int64)  # int64: (T*K) * H offsets overflow int32 at realistic sizes
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    token = tl.load(slot_ptr + row) // TOP_K
    values = tl.load(src_ptr + token * H + cols, mask=mask)
    tl.store(dst_ptr + row * H + cols, values, mask=mask)


@triton.jit
def _combine_kernel(
    y_ptr, inv_ptr, gate_ptr, out_ptr, H, TOP_K: tl.constexpr, HAS_GATE: tl.constexpr, BLOCK_H: tl.constexpr
):
    """out[t] = sum_k gate[t, k] * y[inv[t*K + k]] (gate = 1 without HAS_GATE), fp32 accumulation."""
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    acc = tl.zeros((BLOCK_H,), tl.float32)
    for k in range(TOP_K):
        row = tl.load(inv_ptr + token * TOP_K + k)
        values = tl.load(y_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_GATE:
            values = values * tl.load(gate_ptr + token * TOP_K + k).to(tl.float32)
        acc += values
    tl.store(out_ptr + token * H + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _combine_backward_kernel(
    grad_out_ptr, y_ptr, inv_ptr, gate_ptr, grad_y_ptr, grad_gate_ptr, H, TOP_K: tl.constexpr, BLOCK_H: tl.constexpr
):
    """grad_y[inv[t*K+k]] = gate[t, k] * grad_out[t];  grad_gate[t, k] = <grad_out[t], y[inv[t*K+k]]>."""
    token = tl.program_id(0).to(tl.int64)
    for k in range(TOP_K):
        row = tl.load(inv_ptr + token * TOP_K + k)
        g = tl.load(gate_ptr + token * TOP_K + k).to(tl.float32)
        dot = tl.zeros((BLOCK_H,), tl.float32)
        for start in range(0, H, BLOCK_H):
            cols = start + tl.arange(0, BLOCK_H)
            mask = cols < H
            go = tl.load(grad_out_ptr + token * H + cols, mask=mask, other=0.0).to(tl.float32)
            yv = tl.load(y_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(grad_y_ptr + row * H + cols, (go * g).to(grad_y_ptr.dtype.element_ty), mask=mask)
            dot += go * yv
        tl.store(grad_gate_ptr + token * TOP_K + k, tl.sum(dot, axis=0).to(grad_gate_ptr.dtype.element_ty))


def _block_h(h: int) -> int:
    cap = 64 if dispatch.interpreting() else 1024
    return min(cap, triton.next_power_of_2(h))


def _gather(src: Tensor, row_map: Tensor, top_k: int) -> Tensor:
    out = torch.empty((row_map.numel(), src.shape[1]), dtype=src.dtype, device=src.device)
    block = _block_h(src.shape[1])
    _gather_kernel[(row_map.numel(), triton.cdiv(src.shape[1], block))](
        src, out, row_map, src.shape[1], TOP_K=top_k, BLOCK_H=block
    )
    return out


def _combine(y: Tensor, inv: Tensor, gate: Tensor | None, num_tokens: int, top_k: int) -> Tensor:
    out = torch.empty((num_tokens, y.shape[1]), dtype=y.dtype, device=y.device)
    block = _block_h(y.shape[1])
    _combine_kernel[(num_tokens, triton.cdiv(y.shape[1], block))](
        y,
        inv,
        gate if gate is not None else inv,
        out,
        y.shape[1],
        TOP_K=top_k,
        HAS_GATE=gate is not None,
        BLOCK_H=block,
    )
    return out


class _Permute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, row_map, top_k):  # type: ignore[override]
        ctx.save_for_backward(row_map)
        ctx.top_k, ctx.num_tokens = top_k, x.shape[0]
        return _gather(x.contiguous(), row_map, top_k)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        (row_map,) = ctx.saved_tensors
        grad_x = _combine(grad_out.contiguous(), inverse(row_map), None, ctx.num_tokens, ctx.top_k)
        return grad_x, None, None


class _Unpermute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, row_map, gate):  # type: ignore[override]
        y, gate = y.contiguous(), gate.contiguous()
        inv = inverse(row_map)
        ctx.save_for_backward(y, inv, gate)
        return _combine(y, inv, gate, gate.shape[0], gate.shape[1])

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        y, inv, gate = ctx.saved_tensors
        grad_y = torch.empty_like(y)
        grad_gate = torch.empty_like(gate)
        _combine_backward_kernel[(gate.shape[0],)](
            grad_out.contiguous(),
            y,
            inv,
            gate,
            grad_y,
            grad_gate,
            y.shape[1],
            TOP_K=gate.shape[1],
            BLOCK_H=_block_h(y.shape[1]),
        )
        return grad_y, None, grad_gate


def permute(x: Tensor, row_map: Tensor, top_k: int) -> Tensor:
    """(T*K, H) rows ``x[row_map // top_k]`` (Triton), differentiable w.r.t. x."""
    return _Permute.apply(x, row_map, top_k)


def unpermute(y: Tensor, row_map: Tensor, gate: Tensor) -> Tensor:
    """(T, H) gated combine of y's rows (Triton), differentiable w.r.t. y and gate."""
    return _Unpermute.apply(y, row_map, gate)
