"""Triton kernels for ``kernels.logprob.token_logprob_entropy``.

Forward (``stats``): one fused kernel. Each program owns BLOCK_N rows and one slice of the vocabulary;
it computes logit tiles with ``tl.dot`` (fp32 accumulation, never rounded to the input dtype), keeps an
online max / sum-exp / sum-exp*z and picks the target logit. The slices are merged in torch (a few
(splits, N) vectors), so the grid fills the GPU even when N is small.

Backward (``logit_grad``): one Triton kernel per vocab chunk recomputes the logit tile the same way
and writes ``dL/d(h @ W.T)`` for the chunk in the input dtype; the two gradient matmuls
(``dz @ W_chunk`` and ``dz.T @ h``) are plain torch matmuls (cuBLAS) in ``kernels.logprob``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels import backend as dispatch


@triton.jit
def _logit_tile(
    h_ptr,
    w_ptr,
    rows,
    cols,
    H,
    stride_h,
    stride_w,
    inv_temp,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """(BLOCK_N, BLOCK_V) fp32 tile of h @ W.T / T; out-of-range rows/cols read zeros."""
    rows = rows.to(tl.int64)  # int64: V * H can pass 2**31 for large vocabularies
    cols = cols.to(tl.int64)
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    for start in range(0, H, BLOCK_H):
        k = start + tl.arange(0, BLOCK_H)
        a = tl.load(h_ptr + rows[:, None] * stride_h + k[None, :], mask=k[None, :] < H, other=0.0)
        b = tl.load(w_ptr + cols[:, None] * stride_w + k[None, :], mask=k[None, :] < H, other=0.0)
        acc = tl.dot(a, tl.trans(b), acc, input_precision=PRECISION)
    return acc * inv_temp


@triton.jit
def _stats_kernel(
    h_ptr,
    w_ptr,
    tgt_ptr,
    max_ptr,
    sum_ptr,
    sum_z_ptr,
    picked_ptr,
    N,
    V,
    H,
    stride_h,
    stride_w,
    inv_temp,
    cols_per_split,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    split = tl.program_id(1)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    safe_rows = tl.where(row_ok, rows, 0)  # clamp so every load is in bounds; results of padded rows are dropped
    target = tl.load(tgt_ptr + safe_rows)
    run_max = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    run_sum = tl.zeros((BLOCK_N,), tl.float32)
    run_sum_z = tl.zeros((BLOCK_N,), tl.float32)
    picked = tl.zeros((BLOCK_N,), tl.float32)
    col_start = split * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, V)
    for tile in range(col_start, col_end, BLOCK_V):
        cols = tile + tl.arange(0, BLOCK_V)
        col_ok = cols < col_end
        z = _logit_tile(
            h_ptr,
            w_ptr,
            safe_rows,
            tl.where(col_ok, cols, 0),
            H,
            stride_h,
            stride_w,
            inv_temp,
            BLOCK_N,
            BLOCK_V,
            BLOCK_H,
            PRECISION,
        )
        z_masked = tl.where(col_ok[None, :], z, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(z_masked, axis=1))  # finite: every tile has a valid column
        scale = tl.exp(run_max - new_max)
        e = tl.exp(z_masked - new_max[:, None])  # 0 on padded columns
        run_sum = run_sum * scale + tl.sum(e, axis=1)
        run_sum_z = run_sum_z * scale + tl.sum(tl.where(col_ok[None, :], e * z, 0.0), axis=1)
        run_max = new_max
        hit = (cols[None, :] == target[:, None]) & col_ok[None, :]
        picked += tl.sum(tl.where(hit, z, 0.0), axis=1)
    out = split * N + rows
    tl.store(max_ptr + out, run_max, mask=row_ok)
    tl.store(sum_ptr + out, run_sum, mask=row_ok)
    tl.store(sum_z_ptr + out, run_sum_z, mask=row_ok)
    tl.store(picked_ptr + out, picked, mask=row_ok)


@triton.jit
def _logit_grad_kernel(
    h_ptr,
    w_ptr,
    tgt_ptr,
    lse_ptr,
    mean_ptr,
    g_lp_ptr,
    g_ent_ptr,
    dz_ptr,
    N,
    C,
    H,
    stride_h,
    stride_w,
    stride_dz,
    inv_temp,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ok = rows < N
    col_ok = cols < C
    safe_rows = tl.where(row_ok, rows, 0)
    z = _logit_tile(
        h_ptr,
        w_ptr,
        safe_rows,
        tl.where(col_ok, cols, 0),
        H,
        stride_h,
        stride_w,
        inv_temp,
        BLOCK_N,
        BLOCK_V,
        BLOCK_H,
        PRECISION,
    )
    lse = tl.load(lse_ptr + safe_rows)
    mean = tl.load(mean_ptr + safe_rows)
    g_lp = tl.load(g_lp_ptr + safe_rows)
    g_ent = tl.load(g_ent_ptr + safe_rows)
    target = tl.load(tgt_ptr + safe_rows)  # already relative to the chunk start
    p = tl.exp(z - lse[:, None])
    dz = -p * (g_lp[:, None] + g_ent[:, None] * (z - mean[:, None]))
    dz += tl.where(cols[None, :] == target[:, None], g_lp[:, None], 0.0)
    dz = dz * inv_temp
    ptrs = dz_ptr + rows[:, None] * stride_dz + cols[None, :]
    tl.store(ptrs, dz.to(dz_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _common(hidden: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Both operands contiguous in one dtype (tl.dot takes no mixed inputs): e.g. bf16 rows, fp32 head -> fp32."""
    dtype = torch.promote_types(hidden.dtype, weight.dtype)
    return hidden.to(dtype).contiguous(), weight.to(dtype).contiguous()


def _shared_memory(device: torch.device) -> int:
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", 0)


def _blocks(dtype: torch.dtype, device: torch.device) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_V, BLOCK_H, num_warps, num_stages); small tiles in the interpreter keep tests quick."""
    if dispatch.interpreting():
        return 16, 16, 16, 1, 1
    if dtype == torch.float32:
        return 64, 64, 32, 4, 3
    # 128x256 tiles: 11.1 ms vs 12.4 ms for 128x128 (forward, 8192 x 151936 x 2048 bf16, H100); their
    # 3 pipeline stages need ~144 KiB of shared memory, more than some GPUs give one block.
    if _shared_memory(device) >= 160 * 1024:
        return 128, 256, 64, 8, 3
    return 128, 128, 64, 8, 3


def _precision(dtype: torch.dtype) -> str:
    # fp32 inputs follow torch's own matmul setting, so the reference and Triton agree on TF32 use.
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def stats(
    hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Triton forward: (target logit, logsumexp, E_p[z]) per row, fp32. ``chunk_size`` is unused here."""
    del chunk_size  # the kernel streams the vocabulary in BLOCK_V tiles
    hidden, weight = _common(hidden, weight)
    n, h = hidden.shape
    v = weight.shape[0]
    block_n, block_v, block_h, warps, stages = _blocks(hidden.dtype, hidden.device)
    row_blocks = triton.cdiv(n, block_n)
    # Enough vocabulary slices that about four programs run per SM; each slice a whole number of tiles.
    splits = max(1, min(triton.cdiv(4 * _sm_count(hidden.device), row_blocks), triton.cdiv(v, block_v)))
    cols_per_split = triton.cdiv(triton.cdiv(v, splits), block_v) * block_v
    splits = triton.cdiv(v, cols_per_split)
    part = torch.empty((4, splits, n), dtype=torch.float32, device=hidden.device)
    _stats_kernel[(row_blocks, splits)](
        hidden,
        weight,
        targets,
        part[0],
        part[1],
        part[2],
        part[3],
        n,
        v,
        h,
        hidden.stride(0),
        weight.stride(0),
        1.0 / temperature,
        cols_per_split,
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        BLOCK_H=block_h,
        PRECISION=_precision(hidden.dtype),
        num_warps=warps,
        num_stages=stages,
    )
    run_max, run_sum, run_sum_z, picked = part.unbind(0)
    top = run_max.amax(dim=0)
    scale = torch.exp(run_max - top)
    sum_exp = (run_sum * scale).sum(dim=0)
    return picked.sum(dim=0), top + torch.log(sum_exp), (run_sum_z * scale).sum(dim=0) / sum_exp


def logit_grad(
    hidden: Tensor,
    weight_chunk: Tensor,
    local_targets: Tensor,
    lse: Tensor,
    mean_logit: Tensor,
    grad_logprob: Tensor,
    grad_entropy: Tensor,
    temperature: float,
) -> Tensor:
    """Triton backward for one vocab chunk: dL/d(h @ W_chunk.T) (N, C) in the input dtype."""
    hidden, weight_chunk = _common(hidden, weight_chunk)
    n, h = hidden.shape
    c = weight_chunk.shape[0]
    block_n, block_v, block_h, warps, stages = _blocks(hidden.dtype, hidden.device)
    dz = torch.empty((n, c), dtype=hidden.dtype, device=hidden.device)
    grid = (triton.cdiv(n, block_n), triton.cdiv(c, block_v))
    _logit_grad_kernel[grid](
        hidden,
        weight_chunk,
        local_targets.contiguous(),
        lse,
        mean_logit,
        grad_logprob,
        grad_entropy,
        dz,
        n,
        c,
        h,
        hidden.stride(0),
        weight_chunk.stride(0),
        dz.stride(0),
        1.0 / temperature,
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        BLOCK_H=block_h,
        PRECISION=_precision(hidden.dtype),
        num_warps=warps,
        num_stages=stages,
    )
    return dz
