"""A one-token decode step of the RDEP MoE policy over the continuous engine's static cache, in fewer ops.

`RdepMoeForCausalLM.forward` serves every caller (training, prefill, Hugging Face `generate`): it builds a
4-D causal mask, a rotary table for the step's positions, output dataclasses, module calls and a
`Cache.update` per layer. On the CPU with the tiny policy a decode step's ops are so small that this per-call
work is most of the step. `LeanDecoder.step` computes the same thing for one new token per row and nothing
else (the torch profiler counts 768 aten calls, views included, for 16 rows of the tiny policy against the
forward's 1,112):

- rotary cos/sin are rows of a table built once (by `rope_cos_sin`, so each entry is the value the model
  computes for that position), read by the rows' positions; queries and keys are rotated together, the
  half-rotation as a matmul with a +-1 permutation (exact);
- keys/values are written into `SlotCache` at column ``end`` and attention reads the live window
  ``[start, end]`` in place: ``softmax(q k^T / sqrt(D) + mask) v`` with the query heads of each key/value
  head as that head's queries (GQA), the mask (B, 1, 1, W) additive (-inf before a row's start);
- norms, MLPs and routers are the model's own modules, the every-expert MoE path their ops on the model's
  own weights, read at every step (an in-place update is seen at once; nothing is copied); a MoE block
  that does not run every expert on every row (a dispatcher across ranks, many rows, a GPU) is called as a
  module.

It equals the model's forward up to float rounding (SDPA vs the explicit softmax, one fused projection):
logits within 1e-5 (measured ~2e-7), routes and written keys/values equal (tests/unit/test_lean_decode.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from policies.attention import rope_cos_sin
from policies.experts import MoEBlock, all_experts_swiglu
from policies.hf_adapter import StepOutput
from policies.modeling import RdepMoeForCausalLM
from policies.slot_cache import SlotCache


def _moe(block: MoEBlock, x: torch.Tensor, all_experts: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden (n, H), experts (n, 1, K)) of a MoE block for one token per row: the block's router, then every
    expert on every row where the block itself would (`MoEBlock.runs_all_experts`: inference on the CPU, few
    rows, all experts here), without the block's reshapes; anything else (a dispatcher across ranks, many rows)
    goes through the block itself. ``all_experts`` decides instead of the block when given (a trace, which must not
    read the row count on the host: `policies.cuda_graphs`)."""
    if not (block.runs_all_experts(x) if all_experts is None else all_experts):
        out = block(x[:, None])
        return out.hidden[:, 0], out.expert_idx
    routing = block.router(x)
    experts = block.experts
    out = all_experts_swiglu(
        x, routing.expert_idx - experts.first, routing.gate, experts.w_gate, experts.w_up, experts.w_down
    )
    if block.shared is not None:
        out = out + block.shared(x)
    return out, routing.expert_idx[:, None]


class LeanDecoder:
    """`step`: one decode step of every running row of a `SlotCache` (see the module docstring)."""

    def __init__(self, model: RdepMoeForCausalLM, capacity: int) -> None:
        config = model.config
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = 1.0 / math.sqrt(config.head_dim)
        device = next(model.parameters()).device
        cos, sin = rope_cos_sin(torch.arange(capacity, device=device)[None], config.head_dim, config.rope_theta)
        self.cos, self.sin = cos[0], sin[0]  # (capacity, D) float32
        # rotate_half as a matmul: x @ R = cat(-x[D/2:], x[:D/2]), exactly (one +-1 per column)
        half = config.head_dim // 2
        eye = torch.eye(half, device=device)
        self.rotation = torch.zeros(config.head_dim, config.head_dim, device=device)
        self.rotation[half:, :half] = -eye
        self.rotation[:half, half:] = eye
        self.all_experts: bool | None = None  # set: every MoE block takes that path without asking (`_moe`)

    @staticmethod
    def supports(model: object) -> bool:
        return isinstance(model, RdepMoeForCausalLM)

    @torch.no_grad()
    def step(self, fed: torch.Tensor, positions: torch.Tensor, cache: SlotCache) -> StepOutput:
        """fed (n,) token ids, positions (n,) their positions (each row's token count so far); writes column
        ``cache.end`` of slots 0..n-1. Returns logits (n, 1, V) and routes (L_moe, n, 1, K)."""
        n, start, end = cache.n, cache.start, cache.end
        columns = torch.arange(start, end + 1, device=fed.device)
        hidden = columns[None, :] < (end - positions)[:, None]  # before a row's own start

        def write(index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
            cache.keys[index, :n, :, end] = keys
            cache.values[index, :n, :, end] = values

        return self._layers(fed, positions, hidden, write, slice(start, end + 1), cache)

    @torch.no_grad()
    def step_static(
        self, fed: torch.Tensor, positions: torch.Tensor, end: torch.Tensor, width: int, cache: SlotCache
    ) -> StepOutput:
        """The same step with every shape fixed by (rows, ``width``) and the write column a tensor, as a CUDA graph
        needs (`policies.cuda_graphs`): fed, positions (m,) for slots 0..m-1, end (1,) int64 the write column
        (``end < width``); attends columns ``[0, width)`` and masks those before a row's start or after ``end``.
        A padding row (fed 0, position 0) sees only its own column ``end``: finite, and never read by a real row.
        Returns logits (m, 1, V) and routes (L_moe, m, 1, K)."""
        m = fed.shape[0]
        columns = torch.arange(width, device=fed.device)
        hidden = (columns[None, :] < (end - positions)[:, None]) | (columns[None, :] > end)

        def write(index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
            cache.keys[index, :m].index_copy_(2, end, keys[:, :, None])
            cache.values[index, :m].index_copy_(2, end, values[:, :, None])

        return self._layers(fed, positions, hidden, write, slice(0, width), cache)

    def _layers(self, fed, positions, hidden, write, window: slice, cache: SlotCache) -> StepOutput:
        """The layers of a step: ``hidden`` (n, W) True where a row must not attend, ``write(layer, keys (n, kv_heads,
        D), values)`` stores the step's keys/values, ``window`` the cache columns attended."""
        model, inner = self.model, self.model.model
        n = fed.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        x = inner.embed_tokens.weight[fed]  # (n, H)
        dtype = x.dtype
        rotation = self.rotation.to(dtype)
        cos = self.cos[positions].to(dtype)[:, None]  # (n, 1, D)
        sin = self.sin[positions].to(dtype)[:, None]
        mask = torch.zeros(hidden.shape, dtype=dtype, device=fed.device).masked_fill_(hidden, float("-inf"))
        mask = mask[:, None, None]  # (n, 1, 1, W)
        routes = []
        for index, layer in enumerate(inner.layers):
            attention = layer.attn
            h = layer.input_norm(x)
            projection = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight])
            qkv = F.linear(h, projection).view(n, heads + 2 * kv_heads, dim)
            qk = qkv[:, : heads + kv_heads]
            qk = qk * cos + (qk @ rotation) * sin  # RoPE of the queries and keys at once
            write(index, qk[:, heads:], qkv[:, heads + kv_heads :])
            keys = cache.keys[index, :n, :, window]  # (n, kv_heads, W, D)
            values = cache.values[index, :n, :, window]
            scores = torch.matmul(qk[:, :heads].view(n, kv_heads, heads // kv_heads, dim), keys.transpose(-1, -2))
            weights = torch.softmax(scores.mul_(self.scale).add_(mask), dim=-1, dtype=torch.float32).to(dtype)
            out = torch.matmul(weights, values).view(n, heads * dim)  # (n, kv_heads, groups, D)
            x = x + F.linear(out, attention.o_proj.weight)
            h = layer.post_attn_norm(x)
            if layer.is_moe:
                moe, chosen = _moe(layer.mlp, h, self.all_experts)
                x = x + moe
                routes.append(chosen)
            else:
                x = x + layer.mlp(h)
        logits = F.linear(inner.norm(x), model.lm_head.weight)[:, None]  # (n, 1, V)
        return StepOutput(logits=logits, routes=torch.stack(routes) if routes else None)
