"""Fused token logprob + entropy from hidden states and the LM head, chunked over the vocabulary.

For rows ``h`` (N, H), LM head ``W`` (V, H), targets ``y`` and temperature ``T`` the logits are
``z = h @ W.T / T``. With ``lse = logsumexp(z)`` and ``p = softmax(z)``:

    logprob = z[y] - lse        entropy = lse - sum_v p_v z_v

The full (N, V) logits are never held: the forward keeps an online logsumexp and an online
``sum p z`` per row over vocabulary chunks; the backward recomputes one chunk of logits at a time and
turns it into ``dL/dz = g_lp (onehot(y) - p) - g_ent p (z - E_p[z])``, then into the hidden and weight
gradients with two matmuls per chunk. Peak extra memory is one (N, chunk_size) block.

Two implementations share that autograd skeleton: the pure-torch reference here (fp32 maths on any
device) and Triton kernels in ``kernels.logprob_triton`` (forward fully fused; backward fuses the
logit recompute with the softmax/entropy gradient, the two matmuls per chunk run in cuBLAS).
"""

from __future__ import annotations

import sys
from types import ModuleType

import torch
from torch import Tensor

from kernels import backend as dispatch


def _check(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk_size: int) -> None:
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} must be (N, H) and (V, H)")
    if targets.shape != hidden.shape[:1] or targets.dtype != torch.int64:
        raise ValueError(
            f"targets must be int64 of shape ({hidden.shape[0]},), got {targets.dtype} {tuple(targets.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def stats(
    hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Reference forward: (target logit, logsumexp, E_p[z]) per row, fp32, by online reduction over chunks."""
    n = hidden.shape[0]
    h = hidden.float()  # (N, H)
    running_max = torch.full((n,), float("-inf"), device=hidden.device)
    sum_exp = torch.zeros(n, device=hidden.device)
    sum_exp_z = torch.zeros(n, device=hidden.device)  # sum exp(z - max) * z: E_p[z] = sum_exp_z / sum_exp
    target_logit = torch.zeros(n, device=hidden.device)
    for start in range(0, weight.shape[0], chunk_size):
        z = h @ weight[start : start + chunk_size].float().T / temperature  # (N, C)
        new_max = torch.maximum(running_max, z.amax(dim=1))
        scale = torch.exp(running_max - new_max)
        e = torch.exp(z - new_max[:, None])
        sum_exp = sum_exp * scale + e.sum(dim=1)
        sum_exp_z = sum_exp_z * scale + (e * z).sum(dim=1)
        running_max = new_max
        local = targets - start
        inside = (local >= 0) & (local < z.shape[1])
        picked = z.gather(1, local.clamp(0, z.shape[1] - 1)[:, None]).squeeze(1)
        target_logit = torch.where(inside, picked, target_logit)
    lse = running_max + torch.log(sum_exp)
    return target_logit, lse, sum_exp_z / sum_exp


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
    """Reference backward for one vocab chunk: dL/d(h @ W_chunk.T), fp32 (N, C).

    ``local_targets`` are the targets minus the chunk start; rows whose target is elsewhere get no one-hot term.
    """
    z = hidden.float() @ weight_chunk.float().T / temperature  # (N, C)
    p = torch.exp(z - lse[:, None])
    dz = -p * (grad_logprob[:, None] + grad_entropy[:, None] * (z - mean_logit[:, None]))
    inside = (local_targets >= 0) & (local_targets < z.shape[1])
    rows = inside.nonzero().squeeze(1)
    dz[rows, local_targets[rows]] += grad_logprob[rows]
    return dz / temperature


class _LogprobEntropy(torch.autograd.Function):
    """Shared autograd skeleton; ``impl`` supplies ``stats`` and ``logit_grad`` (this module or the Triton one)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk_size, impl: ModuleType):  # type: ignore[override]
        target_logit, lse, mean_logit = impl.stats(hidden, weight, targets, temperature, chunk_size)
        ctx.save_for_backward(hidden, weight, targets, lse, mean_logit)
        ctx.temperature, ctx.chunk_size, ctx.impl = temperature, chunk_size, impl
        return target_logit - lse, lse - mean_logit

    @staticmethod
    def backward(ctx, grad_logprob, grad_entropy):  # type: ignore[override]
        hidden, weight, targets, lse, mean_logit = ctx.saved_tensors
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if want_hidden else None
        grad_weight = torch.empty_like(weight) if want_weight else None
        g_lp, g_ent = grad_logprob.float().contiguous(), grad_entropy.float().contiguous()
        h_cast: Tensor | None = None  # hidden in dz's dtype, made once, only for the weight gradient
        for start in range(0, weight.shape[0], ctx.chunk_size):
            w_chunk = weight[start : start + ctx.chunk_size]
            dz = ctx.impl.logit_grad(hidden, w_chunk, targets - start, lse, mean_logit, g_lp, g_ent, ctx.temperature)
            if grad_hidden is not None:
                grad_hidden += dz @ w_chunk.to(dz.dtype)
            if grad_weight is not None:
                h_cast = hidden.to(dz.dtype) if h_cast is None else h_cast
                grad_weight[start : start + ctx.chunk_size] = dz.T @ h_cast
        grad_hidden = grad_hidden.to(hidden.dtype) if grad_hidden is not None else None
        return grad_hidden, grad_weight, None, None, None, None


def token_logprob_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 4096,
    backend: str | None = None,
) -> tuple[Tensor, Tensor]:
    """Logprob of each target token and the entropy of each row's distribution, both fp32 (N,).

    hidden (N, H) and weight (V, H) (the LM head) are differentiable; targets (N,) int64 must lie in
    [0, V) (not checked on the device, to keep the call free of host syncs). ``temperature`` divides the
    logits. ``chunk_size`` bounds the vocabulary slice held at once (the reference forward and both
    backwards; the Triton forward streams the vocabulary in tiles and needs no chunk). ``backend``:
    see ``kernels.backend``.
    """
    _check(hidden, weight, targets, temperature, chunk_size)
    if dispatch.resolve(backend, hidden.device) == "triton" and hidden.shape[0] > 0:
        impl = dispatch.triton_module("logprob_triton")
    else:
        impl = sys.modules[__name__]  # this module's stats / logit_grad
    return _LogprobEntropy.apply(hidden, weight, targets, float(temperature), int(chunk_size), impl)
