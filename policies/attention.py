"""Grouped-query self-attention with rotary position embeddings and a KV cache.

The cache is any object with the `transformers` `Cache.update(k, v, layer_idx)` contract
(`DynamicCache` in practice), so Hugging Face `generate()` and our engine share one code path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from policies.hf_config import RdepMoeConfig


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (B, T, head_dim) in float32 for integer positions (B, T).

    Computed on the fly (head_dim/2 frequencies): no buffer, so nothing to re-initialise when
    transformers builds the model on the meta device.
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim)
    freqs = position_ids.to(torch.float32)[..., None] * inv_freq  # (B, T, head_dim/2)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, heads, T, D) by position; cos/sin are (B, T, D)."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


def attention_mask_4d(
    attention_mask: torch.Tensor | None, batch: int, q_len: int, past_len: int, device: torch.device
) -> torch.Tensor:
    """Boolean (B, 1, T, S) mask: causal over S = past + T keys and padding from a (B, S) 0/1 mask.

    Every query may also attend to itself. Left-padding queries have no valid key at all, and a
    fully masked row makes SDPA return NaN, which would then leak into real tokens through
    0 * NaN in later layers; letting pads see themselves keeps their (ignored) outputs finite.
    """
    total = past_len + q_len
    q_pos = past_len + torch.arange(q_len, device=device)
    k_pos = torch.arange(total, device=device)
    causal = k_pos[None, :] <= q_pos[:, None]  # (T, S)
    mask = causal[None, None].expand(batch, 1, q_len, total)
    if attention_mask is not None:
        if attention_mask.shape != (batch, total):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected (batch, past + new) = {(batch, total)}"
            )
        mask = mask & attention_mask.bool()[:, None, None, :]
    diagonal = k_pos[None, :] == q_pos[:, None]
    return mask | diagonal[None, None]


def causal_suffices(attention_mask: torch.Tensor | None, batch: int, q_len: int, past_len: int) -> bool:
    """Whether the plain causal mask gives every real token the keys `attention_mask_4d` would: no cache, and
    every row's padding (if any) on the right, after its last real token. A mask of another shape than
    (batch, q_len) is left to `attention_mask_4d`, which refuses it by name.

    A real token then never sees a pad (pads come after it), and a pad sees the causal prefix, never an empty
    row. SDPA's causal kernel (``is_causal``) skips the masked half instead of reading a (B, 1, T, T) mask:
    about half the time of the masked call on the CPU for the trainer's 600-token sequences.
    """
    if past_len:
        return False
    if attention_mask is None:
        return True
    if attention_mask.shape != (batch, q_len):
        return False
    real = attention_mask.to(torch.int8)
    return bool((real[:, 1:] <= real[:, :-1]).all())


class Attention(nn.Module):
    """Multi-head attention with fewer key/value heads than query heads (GQA), no biases."""

    def __init__(self, config: RdepMoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, H)
        cos: torch.Tensor,  # (B, T, D)
        sin: torch.Tensor,
        mask: torch.Tensor | None,  # (B, 1, T, S) bool, or None: causal (`causal_suffices`)
        cache: object | None = None,
    ) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # (B, kv_heads, S, D)
        groups = self.num_heads // self.num_kv_heads
        if groups > 1 and length == 1:
            # One query per row (a decode step): the `groups` query heads of each key/value head become that
            # head's queries, so the keys and values are read in place instead of copied `groups` times.
            # Query head h reads key/value head h // groups either way; the mask (B, 1, 1, S) is the same
            # for every query of a row.
            grouped = q.reshape(batch, self.num_kv_heads, groups, self.head_dim)
            out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask)  # (B, kv_heads, groups, D)
            return self.o_proj(out.reshape(batch, 1, -1))
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, heads, T, D)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
