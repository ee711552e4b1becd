"""Turn next-token logits into sampled tokens and their logprobs, one row per sequence.

Rows carry their own temperature, top-k, top-p and seeded stream of uniforms (`RowDraws`), so a sequence's
samples depend on its seed, not on which other sequences share the batch. Sampling inverts the cumulative
distribution of softmax(processed) at one uniform draw per row (float64), which draws exactly from it:
one number from the row's generator a step instead of one per vocabulary entry. The inversion is blocked
(`_invert`): the mass of each block of `BLOCK` tokens, then the cumulative sum of one block per row, instead
of a float64 cumulative sum over the whole vocabulary (which cost more than the rest of a step's sampling).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F

from policies.sampling import SamplingParams

BLOCK = 64  # tokens per block of the inversion (`_invert`)


DRAWS_AHEAD = 64  # uniforms a row takes from its generator at once (`RowDraws`)


class RowDraws:
    """A row's stream of uniforms in [0, 1): float64 numbers from its own seeded generator, in order. The
    generator is on the CPU whatever device samples, so a row's uniforms are the same on every device and a GPU
    step draws them without one kernel launch per row. They are taken `DRAWS_AHEAD` at a time: the CPU
    generator draws float64 numbers one after another, so these are the numbers of one draw a step (tested),
    for one call instead of one per step (a call costs ~2.5 us: 64 rows spent ~0.18 ms a decode step on them)."""

    __slots__ = ("generator", "taken", "_ahead")

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self.taken = 0  # numbers handed out so far
        self._ahead: list[float] = []  # drawn, not yet handed out, the next one last

    def next(self) -> float:
        if not self._ahead:
            self._ahead = torch.rand(DRAWS_AHEAD, generator=self.generator, dtype=torch.float64).tolist()[::-1]
        self.taken += 1
        return self._ahead.pop()


def _plain(p: SamplingParams) -> bool:
    return p.temperature in (0.0, 1.0) and p.top_k == 0 and p.top_p == 1.0


@dataclass(frozen=True)
class RowSampling:
    """Per-row sampling settings, built once per batch (a continuous batch: once per step). The settings'
    tensors are built when a step first reads them: a step whose rows process nothing (`plain`, the GRPO
    configs) and sample inside a CUDA graph never does."""

    params: list[SamplingParams]
    draws: list[RowDraws]
    device: torch.device
    plain: bool = False  # no row processes its logits (temperature 1 or 0, no top-k, no top-p): `_unprocessed`
    any_greedy: bool = True  # some row has temperature 0

    @classmethod
    def build(cls, params: list[SamplingParams], seeds: list[int], device: torch.device) -> RowSampling:
        """Fresh streams seeded with ``seeds`` (`RowDraws`)."""
        return cls.of(params, [RowDraws(seed) for seed in seeds], device)

    @classmethod
    def of(cls, params: list[SamplingParams], draws: list[RowDraws], device: torch.device) -> RowSampling:
        """Rows that go on drawing from existing streams."""
        return cls(
            params=params,
            draws=draws,
            device=device,
            plain=all(map(_plain, params)),
            any_greedy=any(p.temperature == 0 for p in params),
        )

    @cached_property
    def temperature(self) -> torch.Tensor:
        """(B,) float32; 0 = greedy."""
        return torch.tensor([p.temperature for p in self.params], dtype=torch.float32, device=self.device)

    @cached_property
    def top_k(self) -> torch.Tensor:
        """(B,) int64; 0 = off."""
        return torch.tensor([p.top_k for p in self.params], dtype=torch.int64, device=self.device)

    @cached_property
    def top_p(self) -> torch.Tensor:
        """(B,) float32; 1 = off."""
        return torch.tensor([p.top_p for p in self.params], dtype=torch.float32, device=self.device)


@dataclass(frozen=True)
class Sample:
    tokens: torch.Tensor  # (B,) int64
    logprobs: torch.Tensor  # (B,) float32 under the distribution sampled from (0 for greedy rows)
    raw_logprobs: torch.Tensor  # (B,) float32 under softmax(logits)

    def per_row(self) -> list[tuple[int, float, float]]:
        """Each row's (token, logprob, raw logprob) as Python numbers, read in one copy (a token id is exact in
        float64): on a GPU one wait for the step instead of three."""
        table = torch.stack([self.tokens.double(), self.logprobs.double(), self.raw_logprobs.double()], dim=1)
        return [(int(token), logprob, raw) for token, logprob, raw in table.tolist()]


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
    """Draw one token per row of logits (B, V), at a fresh draw (`uniforms`).

    Inverse CDF (`_invert`): with ``p = softmax(processed)`` unnormalised, its cumulative sum ``c`` (float64)
    and ``u ~ U[0, 1)`` from the row's generator, the token is the first ``i`` with ``c[i] > u * c[-1]``; a
    token of probability 0 (top-k, top-p) never is, since ``c`` does not grow there. Greedy rows
    (temperature 0) take the argmax. When no row processes its logits (temperature 1 or greedy, no top-k, no
    top-p: the GRPO configs) the sampled distribution is softmax(logits) itself: ``p = exp(logits - max)`` and
    the log-probability of the token is ``logits[i] - max - log(c[-1])``, with no log-softmax over the
    vocabulary (`plain_sample`).
    """
    u = uniforms(rows, logits.device)
    if _unprocessed(rows):
        if not rows.any_greedy:  # the GRPO case: no argmax over (B, V)
            tokens, raw = plain_sample(logits, u)
            return Sample(tokens=tokens, logprobs=raw, raw_logprobs=raw)
        logits = logits.float()
        tokens, top, log_total = _softmax_draw(logits, u)
        greedy = rows.temperature == 0
        tokens = torch.where(greedy, torch.argmax(logits, dim=-1), tokens)
        raw = (logits.gather(1, tokens[:, None]) - top - log_total)[:, 0]
        return Sample(tokens=tokens, logprobs=torch.where(greedy, torch.zeros_like(raw), raw), raw_logprobs=raw)
    logits = logits.float()
    raw = torch.log_softmax(logits, dim=-1)
    logp = processed_logprobs(logits, rows)
    tokens, _ = _invert(logp.exp(), u)
    greedy = rows.temperature == 0
    tokens = torch.where(greedy, torch.argmax(raw, dim=-1), tokens)
    logprobs = torch.where(greedy, torch.zeros_like(rows.temperature), logp.gather(1, tokens[:, None])[:, 0])
    return Sample(tokens=tokens, logprobs=logprobs, raw_logprobs=raw.gather(1, tokens[:, None])[:, 0])


def uniforms(rows: RowSampling, device: torch.device) -> torch.Tensor:
    """A step's draw: the next number of each row's stream (`RowDraws`), as (B,) float64 on ``device``."""
    return torch.tensor([d.next() for d in rows.draws], dtype=torch.float64, device=device)  # one copy to a GPU


def plain_sample(logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B,), logprobs (B,) float32): rows sampled from softmax(logits) at u (B,) float64, the sample of
    rows that process nothing (`RowSampling.plain`, no greedy row). Every shape is fixed by (B, V) and nothing
    is read on the host, so the continuous engine's CUDA graphs record it with the decode step."""
    logits = logits.float()
    tokens, top, log_total = _softmax_draw(logits, u)
    return tokens, (logits.gather(1, tokens[:, None]) - top - log_total)[:, 0]


def _softmax_draw(logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens, max (B, 1), log of the mass of exp(logits - max) (B, 1) float32) of float32 logits at u."""
    top = logits.amax(dim=-1, keepdim=True)
    tokens, total = _invert((logits - top).exp_(), u)
    return tokens, top, total.log().float()


def _invert(weights: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B,), total (B, 1) float64): for each row of ``weights`` (B, V), probabilities up to a factor
    (>= 0, float32), the first index ``i`` with ``c[i] > u * total``, ``c`` the cumulative sum, u (B,) float64 in
    [0, 1); ``total`` is the row's mass.

    In two levels, so no cumulative sum runs over the whole vocabulary and only (B, V / BLOCK) numbers become
    float64 (a float64 copy of the weights cost more than all the rest): the masses of blocks of `BLOCK` tokens
    (summed in float32) and their cumulative sum ``edges`` (float64) find the block (the first whose end
    exceeds the target), then the cumulative sum of that block's weights (float64) finds the token, at the
    target less the mass before the block. The target is kept below ``total`` and the in-block target below the block's own cumulative sum, so
    the chosen index is one where the sum grows: a token of weight 0 never is (the block's sum and its
    cumulative sum may round apart). A row whose weights are not finite (NaN logits from a broken checkpoint)
    still gets a token id of the vocabulary, with a NaN log-probability; the other rows are unaffected."""
    rows, vocabulary = weights.shape
    pad = -vocabulary % BLOCK
    blocks = (F.pad(weights, (0, pad)) if pad else weights).view(rows, -1, BLOCK)
    edges = blocks.sum(dim=-1).double().cumsum_(dim=-1)  # (B, blocks): mass up to each block's end
    total = edges[:, -1:]
    zero = torch.zeros_like(total)
    target = torch.minimum(u[:, None] * total, torch.nextafter(total, zero))  # (B, 1)
    block = torch.searchsorted(edges, target, right=True).clamp_(max=edges.shape[1] - 1)  # (B, 1)
    before = torch.where(block > 0, edges.gather(1, (block - 1).clamp_(min=0)), zero)
    inside = blocks.gather(1, block[:, :, None].expand(rows, 1, BLOCK))[:, 0].cumsum(dim=-1, dtype=torch.float64)
    rest = torch.minimum(target - before, torch.nextafter(inside[:, -1:], zero))
    index = torch.searchsorted(inside, rest, right=True).clamp_(max=BLOCK - 1)
    return (block * BLOCK + index)[:, 0].clamp_(max=vocabulary - 1), total
