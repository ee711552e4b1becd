"""Triton grouped GEMM kernels for ``kernels.swiglu.grouped_swiglu`` (forward and backward).

Rows are split into tiles of BLOCK_M rows that never straddle two experts. The tile schedule
(expert, first row, end row per tile) is built on the device from ``tokens_per_expert`` with a few
torch ops, over a fixed upper bound of ``cdiv(M, BLOCK_M) + E`` tiles, so no host sync is needed;
tiles past the real count exit at once.

Forward: ``_gate_up_kernel`` computes both projections of a tile in one pass over x and applies
SwiGLU in its epilogue (writing the pre-activations g, u for the backward and the product h);
``_grouped_matmul_kernel`` then applies the down projection.

Backward (all Triton): ``_swiglu_backward_kernel`` computes ``dh = dy @ w_down[e]`` and turns it into
dg, du in its epilogue; ``_grouped_matmul_kernel`` gives ``dx = dg @ w_gate[e] + du @ w_up[e]`` in one
fp32 accumulator; ``_weight_grad_kernel`` reduces over each expert's rows for the three weight
gradients (one program per expert and output tile; an empty expert gets zeros).
Saved for the backward: g, u and h, each (M, F) in the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels import backend as dispatch


@triton.jit
def _tile_matmul(
    a_ptr,
    w_ptr,
    rows,
    row_ok,
    cols,
    col_ok,
    K,
    stride_a,
    stride_wn,
    stride_wk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """fp32 (BLOCK_M, BLOCK_N) tile of a[rows] @ W.T where W[n, k] sits at w_ptr + n*stride_wn + k*stride_wk."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + tl.arange(0, BLOCK_K)
        k_ok = k < K
        a = tl.load(a_ptr + rows[:, None] * stride_a + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(
            w_ptr + k[:, None] * stride_wk + cols[None, :] * stride_wn, mask=k_ok[:, None] & col_ok[None, :], other=0.0
        )
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _tile(tile_expert_ptr, start, end, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(expert, rows, row mask, output columns) of this program's row tile and column block."""
    expert = tl.load(tile_expert_ptr + tl.program_id(0)).to(tl.int64)
    rows = start.to(tl.int64) + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    return expert, rows, rows < end, cols


@triton.jit
def _gate_up_kernel(
    x_ptr,
    wg_ptr,
    wu_ptr,
    g_ptr,
    u_ptr,
    h_ptr,
    tile_expert_ptr,
    tile_start_ptr,
    tile_end_ptr,
    F,
    H,
    stride_x,
    stride_we,
    stride_wf,
    stride_out,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    start = tl.load(tile_start_ptr + tl.program_id(0))
    end = tl.load(tile_end_ptr + tl.program_id(0))
    if start >= end:  # a spare tile of the upper-bound grid
        return
    expert, rows, row_ok, cols = _tile(tile_expert_ptr, start, end, BLOCK_M, BLOCK_N)
    col_ok = cols < F
    wg = wg_ptr + expert * stride_we
    wu = wu_ptr + expert * stride_we
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, H, BLOCK_K):
        k = k_start + tl.arange(0, BLOCK_K)
        k_ok = k < H
        a = tl.load(x_ptr + rows[:, None] * stride_x + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        bg = tl.load(wg + cols[None, :] * stride_wf + k[:, None], mask=w_mask, other=0.0)
        bu = tl.load(wu + cols[None, :] * stride_wf + k[:, None], mask=w_mask, other=0.0)
        acc_g = tl.dot(a, bg, acc_g, input_precision=PRECISION)
        acc_u = tl.dot(a, bu, acc_u, input_precision=PRECISION)
    out = rows[:, None] * stride_out + cols[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    dtype = h_ptr.dtype.element_ty
    tl.store(g_ptr + out, acc_g.to(dtype), mask=mask)
    tl.store(u_ptr + out, acc_u.to(dtype), mask=mask)
    tl.store(h_ptr + out, (acc_g * tl.sigmoid(acc_g) * acc_u).to(dtype), mask=mask)


@triton.jit
def _grouped_matmul_kernel(
    a_ptr,
    w_ptr,
    a2_ptr,
    w2_ptr,
    out_ptr,
    tile_expert_ptr,
    tile_start_ptr,
    tile_end_ptr,
    N_OUT,
    K,
    stride_a,
    stride_we,
    stride_wn,
    stride_wk,
    stride_out,
    HAS_SECOND: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """out[rows of e] = a[rows] @ W[e].T (+ a2[rows] @ W2[e].T), W[e] addressed through the given strides."""
    start = tl.load(tile_start_ptr + tl.program_id(0))
    end = tl.load(tile_end_ptr + tl.program_id(0))
    if start >= end:  # a spare tile of the upper-bound grid
        return
    expert, rows, row_ok, cols = _tile(tile_expert_ptr, start, end, BLOCK_M, BLOCK_N)
    col_ok = cols < N_OUT
    acc = _tile_matmul(
        a_ptr,
        w_ptr + expert * stride_we,
        rows,
        row_ok,
        cols,
        col_ok,
        K,
        stride_a,
        stride_wn,
        stride_wk,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        PRECISION,
    )
    if HAS_SECOND:
        acc += _tile_matmul(
            a2_ptr,
            w2_ptr + expert * stride_we,
            rows,
            row_ok,
            cols,
            col_ok,
            K,
            stride_a,
            stride_wn,
            stride_wk,
            BLOCK_M,
            BLOCK_N,
            BLOCK_K,
            PRECISION,
        )
    tl.store(
        out_ptr + rows[:, None] * stride_out + cols[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )


@triton.jit
def _swiglu_backward_kernel(
    dy_ptr,
    wd_ptr,
    g_ptr,
    u_ptr,
    dg_ptr,
    du_ptr,
    tile_expert_ptr,
    tile_start_ptr,
    tile_end_ptr,
    F,
    H,
    stride_dy,
    stride_we,
    stride_gu,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dh = dy @ w_down[e] (w_down[e] is (H, F)); dg = dh * u * silu'(g); du = dh * silu(g)."""
    start = tl.load(tile_start_ptr + tl.program_id(0))
    end = tl.load(tile_end_ptr + tl.program_id(0))
    if start >= end:  # a spare tile of the upper-bound grid
        return
    expert, rows, row_ok, cols = _tile(tile_expert_ptr, start, end, BLOCK_M, BLOCK_N)
    col_ok = cols < F
    # As "a @ W.T" with W[n=f, k=h] = w_down[e, h, f]: stride_wn = 1, stride_wk = F.
    dh = _tile_matmul(
        dy_ptr,
        wd_ptr + expert * stride_we,
        rows,
        row_ok,
        cols,
        col_ok,
        H,
        stride_dy,
        1,
        F,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        PRECISION,
    )
    at = rows[:, None] * stride_gu + cols[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    g = tl.load(g_ptr + at, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + at, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    dtype = dg_ptr.dtype.element_ty
    tl.store(dg_ptr + at, (dh * u * sig * (1.0 + g * (1.0 - sig))).to(dtype), mask=mask)
    tl.store(du_ptr + at, (dh * g * sig).to(dtype), mask=mask)


@triton.jit
def _weight_grad_kernel(
    a_ptr,
    b_ptr,
    out_ptr,
    seg_start_ptr,
    seg_end_ptr,
    P,
    Q,
    stride_a,
    stride_b,
    stride_oe,
    stride_op,
    BLOCK_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_R: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """out[e] (P, Q) = a[rows of e].T @ b[rows of e]; zeros for an expert with no rows."""
    expert = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    q = tl.program_id(2) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    p_ok = p < P
    q_ok = q < Q
    start = tl.load(seg_start_ptr + expert)  # int64, so the row offsets below are too
    end = tl.load(seg_end_ptr + expert)
    acc = tl.zeros((BLOCK_P, BLOCK_Q), dtype=tl.float32)
    for r_start in range(start, end, BLOCK_R):
        r = r_start + tl.arange(0, BLOCK_R)
        r_ok = r < end
        a = tl.load(a_ptr + r[None, :] * stride_a + p[:, None], mask=p_ok[:, None] & r_ok[None, :], other=0.0)
        b = tl.load(b_ptr + r[:, None] * stride_b + q[None, :], mask=r_ok[:, None] & q_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(
        out_ptr + expert * stride_oe + p[:, None] * stride_op + q[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=p_ok[:, None] & q_ok[None, :],
    )


class _Blocks:
    """Tile sizes: small ones in the interpreter (quick tests), H100-sized ones on the GPU."""

    def __init__(self, dtype: torch.dtype) -> None:
        if dispatch.interpreting():
            self.m, self.n, self.k, self.warps, self.stages = 16, 16, 16, 1, 1
        elif dtype == torch.float32:
            self.m, self.n, self.k, self.warps, self.stages = 64, 64, 32, 4, 3
        else:
            self.m, self.n, self.k, self.warps, self.stages = 128, 128, 64, 8, 3
        self.precision = "ieee" if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32 else "tf32"


def segments(tokens_per_expert: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Each expert's first and end row, clamped to ``num_rows`` so a bad count can never address past x."""
    ends = torch.cumsum(tokens_per_expert, 0)
    return (ends - tokens_per_expert).clamp(0, num_rows), ends.clamp(0, num_rows)


def schedule(tokens_per_expert: Tensor, num_rows: int, block_m: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per tile (expert, first row, end row), int32, over ``cdiv(num_rows, block_m) + E`` tiles; spare tiles are empty.

    Each expert's rows [start_e, end_e) become cdiv(n_e, block_m) tiles; sum_e cdiv(n_e, B)
    <= cdiv(M, B) + E bounds the count without reading it on the host.
    """
    num_experts = tokens_per_expert.shape[0]
    starts, ends = segments(tokens_per_expert, num_rows)
    counts = ends - starts
    tiles = (counts + block_m - 1) // block_m
    tile_ends = torch.cumsum(tiles, 0)
    ids = torch.arange(triton.cdiv(num_rows, block_m) + num_experts, device=counts.device)
    expert = torch.searchsorted(tile_ends, ids, right=True)
    valid = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    first = starts[e] + (ids - (tile_ends[e] - tiles[e])) * block_m
    start = torch.where(valid, first, 0)
    end = torch.where(valid, ends[e], 0)
    return e.to(torch.int32), start.to(torch.int32), end.to(torch.int32)


def _grouped_matmul(
    a: Tensor,
    w: Tensor,
    w_strides: tuple[int, int, int],
    n_out: int,
    plan,
    blocks: _Blocks,
    second: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    out = torch.zeros((a.shape[0], n_out), dtype=a.dtype, device=a.device)
    a2, w2 = second if second is not None else (a, w)
    _grouped_matmul_kernel[(plan[0].numel(), triton.cdiv(n_out, blocks.n))](
        a,
        w,
        a2,
        w2,
        out,
        *plan,
        n_out,
        a.shape[1],
        a.stride(0),
        *w_strides,
        out.stride(0),
        HAS_SECOND=second is not None,
        BLOCK_M=blocks.m,
        BLOCK_N=blocks.n,
        BLOCK_K=blocks.k,
        PRECISION=blocks.precision,
        num_warps=blocks.warps,
        num_stages=blocks.stages,
    )
    return out


def _weight_grad(a: Tensor, b: Tensor, counts: Tensor, like: Tensor, blocks: _Blocks) -> Tensor:
    """(E, P, Q) with [e] = a[rows of e].T @ b[rows of e], in ``like``'s dtype."""
    out = torch.empty((counts.shape[0], a.shape[1], b.shape[1]), dtype=like.dtype, device=a.device)
    starts, ends = segments(counts, a.shape[0])
    grid = (counts.shape[0], triton.cdiv(a.shape[1], blocks.n), triton.cdiv(b.shape[1], blocks.n))
    _weight_grad_kernel[grid](
        a,
        b,
        out,
        starts,
        ends,
        a.shape[1],
        b.shape[1],
        a.stride(0),
        b.stride(0),
        out.stride(0),
        out.stride(1),
        BLOCK_P=blocks.n,
        BLOCK_Q=blocks.n,
        BLOCK_R=blocks.k,
        PRECISION=blocks.precision,
        num_warps=blocks.warps,
        num_stages=blocks.stages,
    )
    return out


class _GroupedSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, counts, w_gate, w_up, w_down):  # type: ignore[override]
        # One dtype for tl.dot (no mixed inputs); the weight gradients come back in the weights' own dtypes.
        dtype = torch.promote_types(x.dtype, w_gate.dtype)
        x, w_gate, w_up, w_down = (t.to(dtype).contiguous() for t in (x, w_gate, w_up, w_down))
        (m, h), f = x.shape, w_gate.shape[1]
        blocks = _Blocks(x.dtype)
        plan = schedule(counts, m, blocks.m)
        # empty, not zeros: rows outside every segment are never read (the output's are zeroed in _grouped_matmul)
        g, u, act = (torch.empty((m, f), dtype=x.dtype, device=x.device) for _ in range(3))
        _gate_up_kernel[(plan[0].numel(), triton.cdiv(f, blocks.n))](
            x,
            w_gate,
            w_up,
            g,
            u,
            act,
            *plan,
            f,
            h,
            x.stride(0),
            w_gate.stride(0),
            w_gate.stride(1),
            g.stride(0),
            BLOCK_M=blocks.m,
            BLOCK_N=blocks.n,
            BLOCK_K=blocks.k,
            PRECISION=blocks.precision,
            num_warps=blocks.warps,
            num_stages=blocks.stages,
        )
        out = _grouped_matmul(act, w_down, (w_down.stride(0), w_down.stride(1), 1), h, plan, blocks)
        ctx.save_for_backward(x, counts, w_gate, w_up, w_down, g, u, act, *plan)
        ctx.blocks = blocks
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, counts, w_gate, w_up, w_down, g, u, act, *plan = ctx.saved_tensors
        blocks: _Blocks = ctx.blocks
        dy = grad_out.contiguous().to(x.dtype)
        h, f = x.shape[1], w_gate.shape[1]
        dg, du = torch.empty_like(g), torch.empty_like(u)
        _swiglu_backward_kernel[(plan[0].numel(), triton.cdiv(f, blocks.n))](
            dy,
            w_down,
            g,
            u,
            dg,
            du,
            *plan,
            f,
            h,
            dy.stride(0),
            w_down.stride(0),
            g.stride(0),
            BLOCK_M=blocks.m,
            BLOCK_N=blocks.n,
            BLOCK_K=blocks.k,
            PRECISION=blocks.precision,
            num_warps=blocks.warps,
            num_stages=blocks.stages,
        )
        # dx = dg @ w_gate[e] + du @ w_up[e]: as "a @ W.T" with W[n=h, k=f] = w[e, f, h].
        grad_x = _grouped_matmul(
            dg, w_gate, (w_gate.stride(0), 1, w_gate.stride(1)), h, plan, blocks, second=(du, w_up)
        )
        grad_gate = _weight_grad(dg, x, counts, w_gate, blocks)
        grad_up = _weight_grad(du, x, counts, w_up, blocks)
        grad_down = _weight_grad(dy, act, counts, w_down, blocks)
        return grad_x, None, grad_gate, grad_up, grad_down


def grouped_swiglu(x: Tensor, tokens_per_expert: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """Triton grouped SwiGLU, (M, H); see ``kernels.swiglu.grouped_swiglu``."""
    return _GroupedSwiGLU.apply(x, tokens_per_expert, w_gate, w_up, w_down)
