"""Turn next-token logits into sampled tokens and their logprobs, one row per sequence.

Rows carry their own temperature, top-k, top-p and `torch.Generator`, so a sequence's samples
depend on its seed, not on which other sequences share the batch. Sampling inverts the cumulative
distribution of softmax(processed) at one uniform draw per row (float64), which draws exactly from it:
one number from the row's generator a step instead of one per vocabulary entry.
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
    plain: bool = False  # no row processes its logits (temperature 1 or 0, no top-k, no top-p): `_unprocessed`
    any_greedy: bool = True  # some row has temperature 0

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
            plain=all(p.temperature in (0.0, 1.0) and p.top_k == 0 and p.top_p == 1.0 for p in params),
            any_greedy=any(p.temperature == 0 for p in params),
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
    processed log-probabilities are the raw ones and need not be computed. Read from the settings the rows
    were built from (`RowSampling.plain`), not from the tensors: no reduction and host sync a step."""
    return rows.plain


def sample(logits: torch.Tensor, rows: RowSampling) -> Sample:
    """Draw one token per row of logits (B, V).

    Inverse CDF: with ``c = cumsum(p)`` in float64 (p = softmax(processed), unnormalised) and ``u ~ U[0, 1)``
    from the row's generator, the token is the first ``i`` with ``c[i] > u * c[-1]``; a token of probability 0
    (top-k, top-p) never is, since ``c`` does not grow there. Greedy rows (temperature 0) take the argmax.
    When no row processes its logits (temperature 1 or greedy, no top-k, no top-p: the GRPO configs) the
    sampled distribution is softmax(logits) itself: ``p = exp(logits - max)`` and the log-probability of the
    token is ``logits[i] - max - log(c[-1])``, with no log-softmax over the vocabulary.
    """
    device = logits.device
    u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64, device=device) for g in rows.generators])
    logits = logits.float()
    if _unprocessed(rows):
        top = logits.amax(dim=-1, keepdim=True)
        cdf = torch.cumsum((logits - top).exp_(), dim=-1, dtype=torch.float64)  # (B, V)
        total = cdf[:, -1:]
        tokens = _invert(cdf, total, u)
        raw = (logits.gather(1, tokens[:, None]) - top - total.log().float())[:, 0]
        if not rows.any_greedy:  # the GRPO case: no argmax over (B, V)
            return Sample(tokens=tokens, logprobs=raw, raw_logprobs=raw)
        greedy = rows.temperature == 0
        tokens = torch.where(greedy, torch.argmax(logits, dim=-1), tokens)
        raw = (logits.gather(1, tokens[:, None]) - top - total.log().float())[:, 0]
        return Sample(tokens=tokens, logprobs=torch.where(greedy, torch.zeros_like(raw), raw), raw_logprobs=raw)
    raw = torch.log_softmax(logits, dim=-1)
    logp = processed_logprobs(logits, rows)
    cdf = torch.cumsum(logp.exp(), dim=-1, dtype=torch.float64)
    tokens = _invert(cdf, cdf[:, -1:], u)
    greedy = rows.temperature == 0
    tokens = torch.where(greedy, torch.argmax(raw, dim=-1), tokens)
    logprobs = torch.where(greedy, torch.zeros_like(rows.temperature), logp.gather(1, tokens[:, None])[:, 0])
    return Sample(tokens=tokens, logprobs=logprobs, raw_logprobs=raw.gather(1, tokens[:, None])[:, 0])


def _invert(cdf: torch.Tensor, total: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(B,) the first index ``i`` with ``cdf[i] > u * total`` (``u * total`` kept below ``total``).

    A row whose logits are not finite (NaN from a broken checkpoint) has no such index; it still gets a token
    id of the vocabulary (the last) with a NaN log-probability, and the other rows are unaffected."""
    target = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp_(max=cdf.shape[-1] - 1)
