"""A small RDEP MoE model with a fixed seed, a tiny Hugging Face architecture, and the engine tests' shared helpers
(caches, prompts, comparison)."""

from __future__ import annotations

import time

import torch

from policies.hf_config import RdepMoeConfig
from policies.modeling import RdepMoeForCausalLM
from policies.slot_cache import SlotCache

SMALL = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=3,
    num_dense_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_experts=8,
    num_experts_per_tok=2,
    num_shared_experts=1,
    max_position_embeddings=128,
)


HF_TINY = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    bos_token_id=None,
    eos_token_id=None,
)
"""A tiny Qwen2 / Llama architecture (their config keyword arguments) for random-init Hugging Face policies."""


def small_model(seed: int = 0, **overrides) -> RdepMoeForCausalLM:
    torch.manual_seed(seed)
    return RdepMoeForCausalLM(RdepMoeConfig(**{**SMALL, **overrides})).eval()


def full_logprobs(policy, prompt: list[int], tokens: list[int], routes=None) -> torch.Tensor:
    """log softmax of a full forward of ``policy`` (a `CausalLMPolicy`) over prompt + tokens, at the sampled
    tokens."""
    ids = torch.tensor([prompt + tokens])
    replay = None if routes is None else torch.tensor(routes.array, dtype=torch.int64)[:, None]  # (L, 1, T, K)
    with torch.no_grad():
        logits = policy.model(ids, routed_experts=replay).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def wait_for_tokens(engine, count: int, timeout_s: float = 60.0) -> None:
    """Block until a row running in ``engine``'s continuous batcher has sampled ``count`` tokens (the length of a
    list the worker appends to, read from this thread), so a test can act while that row is mid-decode."""
    deadline = time.monotonic() + timeout_s
    while not any(len(row.tokens) >= count for row in list(engine._batcher.running)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no running row reached {count} tokens in {timeout_s:.0f} s")
        time.sleep(0.0005)


PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11, 12]]


def filled_cache(model, n: int, start: int, end: int, seed: int = 0) -> SlotCache:
    """A cache of n running rows whose live window is [start, end), filled with random keys and values."""
    config = model.config
    cache = SlotCache(
        config.num_hidden_layers,
        max(n, 1) + 2,
        config.num_key_value_heads,
        config.max_position_embeddings,
        config.head_dim,
        torch.float32,
        torch.device("cpu"),
    )
    g = torch.Generator().manual_seed(seed)
    cache.keys.normal_(generator=g)
    cache.values.normal_(generator=g)
    cache.n, cache.start, cache.end = n, start, end
    return cache


def copy_of(cache: SlotCache) -> SlotCache:
    other = SlotCache.__new__(SlotCache)
    other.__dict__.update(cache.__dict__)
    other.keys, other.values = cache.keys.clone(), cache.values.clone()
    return other


def same_completion(a, b) -> None:
    """Two completions of the same request: equal tokens and finish reason, logprobs within 1e-5."""
    assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
    # measured max |diff| ~5e-7 (kv vs recompute); margin 20x
    assert max(abs(x - y) for x, y in zip(a.raw_logprobs, b.raw_logprobs)) < 1e-5
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
