"""Grouped expert SwiGLU: each expert's contiguous segment of rows through its own SwiGLU MLP.

For expert ``e`` with rows ``x_e`` (its ``tokens_per_expert[e]`` rows, in expert order as
``moe_permute`` lays them out): ``y_e = (silu(x_e @ w_gate[e].T) * (x_e @ w_up[e].T)) @ w_down[e].T``.

The reference loops over experts with torch matmuls (one host sync to read the segment sizes) and
gets its backward from autograd. The Triton backend (``kernels.swiglu_triton``) runs grouped GEMMs
over a device-side tile schedule (no host sync) for the forward and the whole backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels import backend as dispatch


def _check(x: Tensor, tokens_per_expert: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> None:
    if x.dim() != 2 or w_gate.dim() != 3 or w_gate.shape != w_up.shape:
        raise ValueError(
            f"x {tuple(x.shape)} must be (M, H); w_gate {tuple(w_gate.shape)} and w_up {tuple(w_up.shape)} (E, F, H)"
        )
    e, f, h = w_gate.shape
    if w_down.shape != (e, h, f) or x.shape[1] != h:
        raise ValueError(f"w_down {tuple(w_down.shape)} must be (E, H, F) = {(e, h, f)} and x must have H={h} columns")
    if tokens_per_expert.shape != (e,) or tokens_per_expert.dtype != torch.int64:
        raise ValueError(
            f"tokens_per_expert must be int64 ({e},), got {tokens_per_expert.dtype} {tuple(tokens_per_expert.shape)}"
        )


def reference(x: Tensor, tokens_per_expert: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """Per-expert torch matmuls; raises if the segment sizes do not add up to the rows of x."""
    sizes = tokens_per_expert.tolist()
    if sum(sizes) != x.shape[0] or min(sizes, default=0) < 0:
        raise ValueError(f"tokens_per_expert {sizes} must be >= 0 and sum to the {x.shape[0]} rows of x")
    # unbind, not w[e]: indexing would give each expert's backward a full (E, ...) zero gradient to add.
    outs = [
        (F.silu(seg @ wg.T) * (seg @ wu.T)) @ wd.T
        for seg, wg, wu, wd in zip(x.split(sizes), w_gate.unbind(0), w_up.unbind(0), w_down.unbind(0))
    ]
    return torch.cat(outs) if outs else x.new_zeros(x.shape)


def grouped_swiglu(
    x: Tensor,
    tokens_per_expert: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    backend: str | None = None,
) -> Tensor:
    """(M, H): rows of x (M, H) in expert segments through down_e(silu(gate_e(x)) * up_e(x)).

    tokens_per_expert (E,) int64 sums to M (zeros allowed); w_gate, w_up (E, F, H); w_down (E, H, F).
    Differentiable w.r.t. x and the three weights. The Triton path does not check the sum on the
    device (that would sync); rows past the sum come out zero there.
    """
    _check(x, tokens_per_expert, w_gate, w_up, w_down)
    if dispatch.resolve(backend, x.device) == "triton" and x.shape[0] > 0:
        return dispatch.triton_module("swiglu_triton").grouped_swiglu(x, tokens_per_expert, w_gate, w_up, w_down)
    return reference(x, tokens_per_expert, w_gate, w_up, w_down)
