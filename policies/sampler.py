"""Turn next-token logits into sampled tokens and their logprobs, one row per sequence.

Rows carry their own temperature, top-k, top-p and `torch.Generator`, so a sequence's samples
depend on its seed, not on which other sequences share the batch. Sampling is Gumbel-max over
the processed logprobs with per-row uniform noise, which draws exactly from softmax(processed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from policies.sampling import SamplingParams


@dataclass(frozen=True)
class RowSampling:
    """Per-row sampling settings as tensors, built once per batch."""

    temperature: torch.Tensor  # (B,) float32; 0 = greedy
    top_k: torch.Tensor  # (B,) int64; 0 = off
    top_p: torch.Tensor  # (B,) float32; 1 = off
    generators: list[torch.Generator]

    @classmethod
    def build(cls, params: list[SamplingParams], seeds: list[int], device: torch.device) -> RowSampling:
        """Fresh generators seeded with ``seeds``."""
        generators = []
        for seed in seeds:
            gen = torch.Generator(device=device)
            gen.manual_seed(seed)
            generators.append(gen)
        return cls.of(params, generators, device)

    @classmethod
    def of(cls, params: list[SamplingParams], generators: list[torch.Generator], device: torch.device) -> RowSampling:
        """Rows that go on drawing from existing generators (a continuous batch rebuilds this every step)."""
        return cls(
            temperature=torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
            top_k=torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device),
            top_p=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            generators=generators,
        )


@dataclass(frozen=True)
class Sample:
    tokens: torch.Tensor  # (B,) int64
    logprobs: torch.Tensor  # (B,) float32 under the distribution sampled from (0 for greedy rows)
    raw_logprobs: torch.Tensor  # (B,) float32 under softmax(logits)

    def per_row(self) -> list[tuple[int, float, float]]:
        """Each row's (token, logprob, raw logprob) as Python numbers: three copies instead of 3 x B reads."""
        return list(zip(self.tokens.tolist(), self.logprobs.tolist(), self.raw_logprobs.tolist()))


def processed_logprobs(logits: torch.Tensor, rows: RowSampling) -> torch.Tensor:
    """Log-probabilities (B, V) of the sampling distribution: temperature, then top-k, then top-p.

    Greedy rows (temperature 0) are computed at temperature 1 here; `sample` handles them.
    """
    temperature = torch.where(rows.temperature > 0, rows.temperature, torch.ones_like(rows.temperature))
    scaled = logits.float() / temperature[:, None]
    if bool((rows.top_k > 0).any()) or bool((rows.top_p < 1).any()):
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        rank = torch.arange(scaled.shape[-1], device=scaled.device)[None, :]
        k = torch.where(rows.top_k > 0, rows.top_k, torch.full_like(rows.top_k, scaled.shape[-1]))
        drop = rank >= k[:, None]
        probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass strictly ahead of each token
        drop |= (before >= rows.top_p[:, None]) & (rank > 0)  # the most likely token always stays
        scaled = scaled.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.log_softmax(scaled, dim=-1)


def _unprocessed(rows: RowSampling) -> bool:
    """Every row samples softmax(logits) itself (temperature 1, or 0 = greedy; no top-k, no top-p): then the
    processed log-probabilities are the raw ones, bit for bit, and need not be computed twice."""
    unit = (rows.temperature == 1) | (rows.temperature == 0)
    return bool(unit.all()) and not bool((rows.top_k > 0).any()) and not bool((rows.top_p < 1).any())


def sample(logits: torch.Tensor, rows: RowSampling) -> Sample:
    """Draw one token per row of logits (B, V)."""
    raw = torch.log_softmax(logits.float(), dim=-1)
    logp = raw if _unprocessed(rows) else processed_logprobs(logits, rows)
    noise = torch.stack(
        [torch.rand(logits.shape[-1], generator=g, device=logits.device) for g in rows.generators]
    ).clamp_(min=1e-12, max=1 - 1e-7)
    sampled = torch.argmax(logp - noise.log_().neg_().log_(), dim=-1)  # Gumbel-max: logp - log(-log(u))
    greedy = rows.temperature == 0
    if not bool(greedy.any()):  # the GRPO case: no row is greedy, so no second argmax over (B, V)
        return Sample(
            tokens=sampled,
            logprobs=logp.gather(1, sampled[:, None])[:, 0],
            raw_logprobs=raw.gather(1, sampled[:, None])[:, 0],
        )
    tokens = torch.where(greedy, torch.argmax(raw, dim=-1), sampled)
    logprobs = torch.where(greedy, torch.zeros_like(rows.temperature), logp.gather(1, tokens[:, None])[:, 0])
    return Sample(tokens=tokens, logprobs=logprobs, raw_logprobs=raw.gather(1, tokens[:, None])[:, 0])
