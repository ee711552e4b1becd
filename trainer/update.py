"""One GRPO policy update: forward every micro-batch, the loss terms, backward, one optimizer step.

`score` computes the trainer's token logprobs and entropies straight from the hidden states with
the fused `token_logprob_entropy` kernel (no (B, T, V) logits), replaying the rollout's expert
routes (R3) when asked. `micro_batch_loss` assembles the loss of one micro-batch with the batch's
global denominators, so gradient accumulation over micro-batches and ranks gives exactly the
gradient of the whole batch's loss. `PolicyUpdate.run` is the step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from kernels import token_logprob_entropy
from trainer.batch import TrainBatch, collate, micro_batches
from trainer.config import AlgorithmConfig
from trainer.loss import aggregate, importance_weights, kl_penalty, policy_loss
from trainer.selection import Scored


@dataclass(frozen=True)
class Scores:
    logprobs: torch.Tensor  # (B, T-1) fp32
    entropy: torch.Tensor  # (B, T-1) fp32
    aux_loss: torch.Tensor | None  # scalar MoE balance loss (only when its coefficient is > 0)


SCORE_FORWARD = "trainer_token_scores"
"""The attribute under which a sharded model carries `sampled_token_scores` as an FSDP forward method
(`trainer.fsdp`); `score` calls it when present."""


def score(model: nn.Module, batch: TrainBatch, temperature: float = 1.0, replay: bool = True) -> Scores:
    """Token logprobs and entropies of batch.input_ids[:, 1:] under `model` (differentiable)."""
    routes = batch.routes if replay else None
    # The LM head runs only where a loss is taken (sampled targets): prompts and tool observations,
    # most of a trajectory, need their hidden states as context but no vocabulary projection.
    where = batch.loss_mask.reshape(-1).nonzero().squeeze(1)  # (N,)
    forward = getattr(model, SCORE_FORWARD, None) or partial(sampled_token_scores, model)
    logprob, entropy, aux_loss = forward(batch.input_ids, batch.attention_mask, routes, where, temperature)
    size, length = batch.loss_mask.shape
    full_logprob = logprob.new_zeros(size * length, dtype=torch.float32).index_put((where,), logprob)
    full_entropy = logprob.new_zeros(size * length, dtype=torch.float32).index_put((where,), entropy)
    return Scores(full_logprob.view(size, length), full_entropy.view(size, length), aux_loss)


def sampled_token_scores(
    model: nn.Module,
    input_ids: torch.Tensor,  # (B, T)
    attention_mask: torch.Tensor,  # (B, T)
    routes: torch.Tensor | None,  # (L_moe, B, T, K) replayed expert routes (R3), or None
    where: torch.Tensor,  # (N,) flat positions of input_ids[:, 1:] to score
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Logprob and entropy (N,) fp32 of the targets at ``where``, and the MoE balance loss: the part of
    `score` that reads the weights."""
    kwargs = {} if routes is None else {"routed_experts": routes}
    # no KV cache: a Hugging Face model makes one by default, and a block recomputed under activation
    # checkpointing would append its keys and values to it a second time
    out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    hidden = out.last_hidden_state[:, :-1]  # (B, T-1, H)
    head = model.get_output_embeddings().weight  # (V, H)
    logprob, entropy = token_logprob_entropy(
        hidden.reshape(-1, hidden.shape[-1])[where], head, input_ids[:, 1:].reshape(-1)[where], temperature=temperature
    )
    return logprob, entropy, getattr(out, "aux_loss", None)


def empty_batch(pad_id: int = 0) -> TrainBatch:
    """A one-sequence batch with nothing to learn: ranks with no data still join RDEP exchanges."""
    zeros = torch.zeros((1, 1), dtype=torch.float32)
    return TrainBatch(
        input_ids=torch.full((1, 2), pad_id, dtype=torch.int64),
        attention_mask=torch.ones((1, 2), dtype=torch.int64),
        loss_mask=zeros.clone(),
        behaviour_logprobs=zeros.clone(),
        advantages=zeros.clone(),
        weights=zeros.clone(),
        routes=None,
    )


@dataclass(frozen=True)
class Denominators:
    """Counts of the whole batch (every micro-batch on every rank) the aggregations divide by."""

    tokens: float
    sequences: float
    norm_length: int


def micro_batch_loss(
    scores: Scores,
    batch: TrainBatch,
    algorithm: AlgorithmConfig,
    denominators: Denominators,
    proximal: torch.Tensor | None = None,  # (B, T-1) logprobs the ratio is taken against; default scores.detach()
    ref_logprobs: torch.Tensor | None = None,  # (B, T-1) reference policy, when KL is in the loss
    tokens_share: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's part of the batch loss, and its summed statistics."""
    mask = batch.loss_mask
    old = scores.logprobs.detach() if proximal is None else proximal

    def reduce(values: torch.Tensor) -> torch.Tensor:
        return aggregate(
            values, mask, algorithm.aggregation, denominators.tokens, denominators.sequences, denominators.norm_length
        )

    terms = policy_loss(
        scores.logprobs, old, batch.advantages, algorithm.clip_low, algorithm.clip_high, algorithm.dual_clip
    )
    per_token = terms.loss * batch.weights
    stats: dict[str, float] = {}
    if algorithm.importance_sampling.enabled:
        tis = algorithm.importance_sampling
        weights = importance_weights(old, batch.behaviour_logprobs, mask, tis.level, tis.mode, tis.threshold)
        per_token = per_token * weights.weights
        stats["is_weight_sum"] = float((weights.weights * mask).sum())
    pg_loss = reduce(per_token)
    loss = pg_loss
    stats["pg_loss"] = float(pg_loss.detach())
    if ref_logprobs is not None and algorithm.kl.placement == "loss" and algorithm.kl.coef > 0:
        kl = reduce(kl_penalty(scores.logprobs, ref_logprobs, algorithm.kl.estimator))
        loss = loss + algorithm.kl.coef * kl
        stats["kl"] = float(kl.detach())
    entropy = reduce(scores.entropy)
    stats["entropy"] = float(entropy.detach())
    if algorithm.entropy_coef > 0:
        loss = loss - algorithm.entropy_coef * entropy
    if scores.aux_loss is not None:
        loss = loss + scores.aux_loss * tokens_share  # the balance loss of this forward, weighed by its token share
        stats["aux_loss"] = float(scores.aux_loss.detach()) * tokens_share
    valid = mask > 0
    stats["clipped_tokens"] = float(terms.clipped[valid].sum())
    stats["dual_clipped_tokens"] = float(terms.dual_clipped[valid].sum())
    stats["loss"] = float(loss.detach())
    return loss, stats


class GradientSync:
    """How gradients and figures are combined over ranks; this base class is the one-process identity."""

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum (or max) a tensor over ranks, in place, and return it."""
        return tensor

    def reduce_gradients(self, model: nn.Module) -> None:
        """Sum the gradients of replicated parameters over ranks."""

    def grad_norm(self, model: nn.Module) -> float:
        """Global L2 norm of every gradient (expert shards included)."""
        grads = [p.grad.detach().double().pow(2).sum() for p in model.parameters() if p.grad is not None]
        return math.sqrt(float(sum(grads))) if grads else 0.0


@dataclass
class PolicyUpdate:
    """Runs one step over a batch of scored samples on this rank."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    algorithm: AlgorithmConfig
    micro_batch_size: int
    norm_length: int
    temperature: float = 1.0
    grad_clip: float | None = 1.0
    pad_id: int = 0
    sync: GradientSync = GradientSync()
    reference: nn.Module | None = None
    updates_per_batch: int = 1
    on_step: Callable[[], dict[str, float]] | None = None
    """Called after every optimizer step (router bias update); its figures join the metrics."""

    def run(self, scored: Sequence[Scored]) -> dict[str, float]:
        """All of this rank's samples (the caller shards); returns step metrics (summed over ranks).

        With updates_per_batch > 1 the batch is split into that many mini-batches, each its own
        optimizer step, and the ratio of every mini-batch is taken against the logprobs of the
        weights before the first one (PPO's old policy), computed once up front.
        """
        chunks = [list(scored[i :: self.updates_per_batch]) for i in range(self.updates_per_batch)]
        micro = [self._micro_batches(chunk) for chunk in chunks]
        proximal = [self._proximal(m) if self.updates_per_batch > 1 else [None] * len(m) for m in micro]
        metrics: dict[str, float] = {}
        for batches, old in zip(micro, proximal):
            metrics = self._one_update(batches, old)
        return metrics

    def _micro_batches(self, scored: Sequence[Scored]) -> list[TrainBatch]:
        device = next(self.model.parameters()).device
        micro = [collate(c, self.pad_id).to(device) for c in micro_batches(scored, self.micro_batch_size)]
        # Every rank runs as many forward passes as the busiest one: RDEP exchanges are collective.
        rounds = int(self.sync.all_reduce(torch.tensor([float(len(micro))]), op="max")[0])
        if rounds == 0:
            return []
        return micro + [empty_batch(self.pad_id).to(device) for _ in range(rounds - len(micro))]

    def _denominators(self, micro: list[TrainBatch]) -> Denominators:
        counts = torch.tensor(
            [sum(b.num_tokens for b in micro), sum(b.num_sequences for b in micro)], dtype=torch.float64
        )
        counts = self.sync.all_reduce(counts)
        return Denominators(tokens=float(counts[0]), sequences=float(counts[1]), norm_length=self.norm_length)

    def _one_update(self, micro: list[TrainBatch], proximal: list[torch.Tensor | None]) -> dict[str, float]:
        if not micro:  # dynamic sampling kept nothing within its draw budget: no update this step
            self.optimizer.zero_grad(set_to_none=True)
            self.optimizer.step()  # no gradients: changes nothing, keeps the scheduler's step count aligned
            self.scheduler.step()
            return {
                "loss": 0.0,
                "tokens": 0.0,
                "sequences": 0.0,
                "skipped_empty": 1.0,
                "lr": self.optimizer.param_groups[0]["lr"],
            }
        denominators = self._denominators(micro)
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        diffs: list[torch.Tensor] = []
        total_tokens = max(denominators.tokens, 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        for batch, prox in zip(micro, proximal):
            scores = score(self.model, batch, self.temperature, self.algorithm.routing_replay)
            ref = self._reference_logprobs(batch)
            loss, stats = micro_batch_loss(
                scores, batch, self.algorithm, denominators, prox, ref, tokens_share=batch.num_tokens / total_tokens
            )
            loss.backward()
            for key, value in stats.items():
                sums[key] += value
            old = scores.logprobs.detach() if prox is None else prox
            diffs.append((batch.behaviour_logprobs - old)[batch.loss_mask > 0].double().cpu())
        self.sync.reduce_gradients(self.model)
        grad_norm = self.sync.grad_norm(self.model)
        if self.grad_clip is not None and math.isfinite(grad_norm) and grad_norm > self.grad_clip:
            scale = self.grad_clip / (grad_norm + 1e-6)
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(scale)
        lr = self.optimizer.param_groups[0]["lr"]
        if math.isfinite(grad_norm):  # a non-finite gradient skips the update (counted), never corrupts weights
            self.optimizer.step()
        self.scheduler.step()
        metrics = self._metrics(sums, torch.cat(diffs), denominators)
        metrics.update({"grad_norm": grad_norm, "lr": lr, "skipped_nonfinite": float(not math.isfinite(grad_norm))})
        if self.on_step is not None:
            metrics.update(self.on_step())
        return metrics

    @torch.no_grad()
    def _proximal(self, micro: list[TrainBatch]) -> list[torch.Tensor]:
        self.model.eval()  # no router load counting for this extra pass
        try:
            return [score(self.model, b, self.temperature, self.algorithm.routing_replay).logprobs for b in micro]
        finally:
            self.model.train()

    @torch.no_grad()
    def _reference_logprobs(self, batch: TrainBatch) -> torch.Tensor | None:
        if self.reference is None or self.algorithm.kl.coef == 0 or self.algorithm.kl.placement != "loss":
            return None
        return score(self.reference, batch, self.temperature, self.algorithm.routing_replay).logprobs

    def _metrics(self, sums: dict[str, float], diff: torch.Tensor, denominators: Denominators) -> dict[str, float]:
        """Step figures summed over ranks; ``diff`` = behaviour - trainer logprob of this rank's tokens."""
        names = sorted(sums)
        totals = self.sync.all_reduce(torch.tensor([sums[k] for k in names], dtype=torch.float64))
        summed = dict(zip(names, totals.tolist()))
        tokens = max(denominators.tokens, 1.0)
        metrics = {k: v for k, v in summed.items() if k not in _PER_TOKEN}
        for key, name in _PER_TOKEN.items():
            if key in summed:
                metrics[name] = summed[key] / tokens
        moments = self.sync.all_reduce(
            torch.stack(
                [diff.abs().sum(), diff.sum(), (torch.exp(-diff) - 1 + diff).sum(), torch.tensor(float(diff.numel()))]
            )
        )
        peak = self.sync.all_reduce(
            diff.abs().max().reshape(1) if diff.numel() else torch.zeros(1, dtype=torch.float64), op="max"
        )
        count = max(float(moments[3]), 1.0)
        metrics.update(
            {
                "mismatch/abs_diff_mean": float(moments[0]) / count,
                "mismatch/abs_diff_max": float(peak[0]),
                "mismatch/kl_k1": float(moments[1]) / count,
                "mismatch/kl_k3": float(moments[2]) / count,
                "tokens": denominators.tokens,
                "sequences": denominators.sequences,
            }
        )
        return metrics


# summed statistic -> metric name once divided by the batch's token count
_PER_TOKEN = {
    "clipped_tokens": "clip_fraction",
    "dual_clipped_tokens": "dual_clip_fraction",
    "is_weight_sum": "is_weight_mean",
}
