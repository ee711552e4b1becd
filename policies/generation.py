"""The generation engine: batched sampling with a KV cache, token ids and logprobs out.

Three modes, one contract (each row has its own sampling settings and seeded generator, its own
stop tokens and token budget; every sampled token reports the weights version that sampled it,
`Completion.token_versions`):

* ``continuous`` (the default for our MoE policy): `policies.continuous` — a worker thread runs
  one decode step at a time over a static KV cache; sequences of every caller join and leave the
  running batch per step, identical prompts are prefilled once. Weight updates wait for the running
  rows to finish (``partial_rollouts``: they land at the next step boundary).
* ``kv_cache`` (the default for other `transformers` models, whose attention takes a
  `DynamicCache`): each call's prompts are left-padded into one batch, prefilled once, then every
  step feeds only the newly sampled token; the batch runs until its longest row stops.
* ``recompute``: as ``kv_cache`` but re-runs the whole sequence every step (the benchmark and the
  equality tests use it as the reference).

In the batch modes weight updates and generation take the same lock: an update waits for the batch.

Partial rollouts (``partial_rollouts=True``, `trainer.config.LoopConfig.partial_rollouts`): a weight update never
waits for the completions in flight. It lands between two decode steps (continuous: on the worker; batch modes:
the generating thread applies updates queued by `schedule_load` after each step), the rows go on under the new
weights, and every token after the swap reports the new version. The keys and values the rows cached under the
old weights are kept, as in AReaL's and slime's partial rollouts: recomputing them would cost a prefill of
everything sampled so far at each update, and the trainer corrects the difference with each token's own
behaviour logprob (truncated importance sampling). In ``recompute`` mode nothing is cached, so the tokens after
a swap are exactly what the new weights give for the whole sequence.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file

from policies.continuous import ContinuousBatcher, Watch, append_sample, completion_routes, left_padded
from policies.hf_adapter import CausalLMPolicy
from policies.sampler import RowSampling, sample
from policies.sampling import Completion, SamplingParams, check_request, per_prompt

log = logging.getLogger(__name__)

Mode = Literal["continuous", "kv_cache", "recompute"]


@dataclass
class _Row:
    """Book-keeping of one sequence while its batch decodes."""

    params: SamplingParams
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)
    routes: list[torch.Tensor] = field(default_factory=list)  # (L, n, K) pieces
    versions: list[int] = field(default_factory=list)  # weights version of each sampled token
    finish_reason: Literal["stop", "length"] | None = None
    stops: frozenset[int] = frozenset()  # params.stop_token_ids, as a set (`append_sample`)

    def __post_init__(self) -> None:
        self.stops = frozenset(self.params.stop_token_ids)


def checkpoint_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, or of every *.safetensors file in a directory."""
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no safetensors checkpoint at {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


class GenerationEngine:
    """A `RolloutEngine` and `ServingEngine` over a `CausalLMPolicy`."""

    def __init__(
        self,
        policy: CausalLMPolicy,
        max_batch_size: int = 64,
        mode: Mode | None = None,
        pad_token_id: int = 0,
        weights_version: int = 0,
        prefill_chunk: int | None = None,
        cuda_graphs: bool | None = None,
        traced_decode: bool = False,
        partial_rollouts: bool = False,
    ) -> None:
        self.policy = policy
        self.max_batch_size = max_batch_size
        if mode == "continuous" and not policy.is_moe:
            raise ValueError("continuous batching needs the RDEP MoE policy (its attention takes the slot cache)")
        self.mode: Mode = mode or ("continuous" if policy.is_moe else "kv_cache")
        self.pad_token_id = pad_token_id
        self.weights_version = weights_version
        self.partial_rollouts = partial_rollouts
        self._lock = threading.Lock()
        # batch modes with partial rollouts: updates the generating thread applies between two steps
        self._pending: deque[tuple[dict[str, torch.Tensor], int | None, Future]] = deque()
        self._pending_lock = threading.Lock()
        self._batcher: ContinuousBatcher | None = None
        if self.mode == "continuous":
            self._batcher = ContinuousBatcher(
                policy,
                max_batch_size,
                pad_token_id,
                lambda: self.weights_version,
                prefill_chunk,
                cuda_graphs=cuda_graphs,
                traced=traced_decode,
                partial_rollouts=partial_rollouts,
            )

    @property
    def model_name(self) -> str:
        return self.policy.name

    @property
    def context_length(self) -> int:
        return self.policy.context_length

    @property
    def vocab_size(self) -> int:
        return self.policy.vocab_size

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return await asyncio.to_thread(self.generate_batch, prompts, per_prompt(params, len(prompts)))

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        check_request(prompt, params, self.vocab_size, self.context_length)

    @property
    def continuous(self) -> bool:
        """Whether `submit` admits rows into a running batch (else each call is its own batch)."""
        return self._batcher is not None

    @staticmethod
    def _seeds(params: list[SamplingParams]) -> list[int]:
        """Each row's own seed (`SamplingParams.seed`), or a fresh one."""
        return [p.seed if p.seed is not None else int.from_bytes(os.urandom(7), "little") for p in params]

    def _check(self, prompts: list[list[int]], params: list[SamplingParams]) -> None:
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        for prompt, p in zip(prompts, params):
            self.check_request(prompt, p)

    @property
    def watches_tokens(self) -> bool:
        """Whether `submit` takes a watch per row (`policies.continuous.Watch`): continuous mode."""
        return self._batcher is not None

    def submit(
        self, prompts: list[list[int]], params: list[SamplingParams], watches: list[Watch | None] | None = None
    ) -> Future:
        """Continuous mode: queue the rows and return the future of their completions (any thread); each row's
        ``watches`` entry sees its tokens as they are sampled and may end it."""
        if self._batcher is None:
            raise RuntimeError(f"submit needs the continuous mode, this engine runs {self.mode}")
        self._check(prompts, params)
        return self._batcher.submit(prompts, params, self._seeds(params), watches)

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        if self._batcher is not None:
            return self.submit(prompts, params).result()
        self._check(prompts, params)
        seeds = self._seeds(params)
        out: list[Completion] = []
        with self._lock:
            self._apply_pending()  # updates queued before this call: its rows start on them
            for start in range(0, len(prompts), self.max_batch_size):
                stop = start + self.max_batch_size
                out.extend(self._generate_chunk(prompts[start:stop], params[start:stop], seeds[start:stop]))
        return out

    def _generate_chunk(
        self, prompts: list[list[int]], params: list[SamplingParams], seeds: list[int]
    ) -> list[Completion]:
        device = self.policy.device
        rows = [_Row(params=p) for p in params]
        sampling = RowSampling.build(params, seeds, device)
        ids, mask, positions = left_padded(prompts, self.pad_token_id, device)
        budget = max(p.max_tokens for p in params)
        prompt_routes = None
        for step, (logits, routes) in enumerate(self._decode(ids, mask, positions, rows, sampling, budget)):
            if step == 0:
                prompt_routes = routes
            elif routes is not None:  # routes of the token each row fed this step
                for b, row in enumerate(rows):
                    if row.finish_reason is None:  # it fed its last token (finished rows fed a pad)
                        row.routes.append(routes[:, b])
            drawn = sample(logits, sampling).per_row()
            for row, one in zip(rows, drawn):
                if row.finish_reason is None:
                    append_sample(row, one)
                    row.versions.append(self.weights_version)  # changes only between steps (`_apply_pending`)
            self._apply_pending()  # partial rollouts: the next step runs on the weights queued meanwhile
        return [self._completion(row, prompt_routes, b, len(prompts[b])) for b, row in enumerate(rows)]

    def _decode(
        self, ids, mask, positions, rows, sampling, budget
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        """Yield (next-token logits (B, V), routes of the positions just fed (L, B, n, K) | None) per step.

        The caller appends each row's sample to `rows` between yields; this feeds it back.
        """
        cache = self.policy.new_cache() if self.mode == "kv_cache" else None
        seq, seq_mask, seq_pos = ids, mask, positions
        out = self.policy.step(seq, seq_mask, seq_pos, cache)
        yield out.logits[:, -1], out.routes
        for _ in range(budget - 1):
            if all(row.finish_reason is not None for row in rows):
                return
            fed = torch.tensor(
                [row.tokens[-1] if row.finish_reason is None else self.pad_token_id for row in rows],
                dtype=torch.int64,
                device=ids.device,
            )[:, None]
            next_pos = seq_pos[:, -1:] + 1
            seq_mask = torch.cat([seq_mask, torch.ones_like(fed)], dim=1)
            if cache is not None:
                seq_pos = next_pos
                out = self.policy.step(fed, seq_mask, seq_pos, cache)
            else:
                seq, seq_pos = torch.cat([seq, fed], dim=1), torch.cat([seq_pos, next_pos], dim=1)
                out = self.policy.step(seq, seq_mask, seq_pos, None)
            yield out.logits[:, -1], None if out.routes is None else out.routes[:, :, -1]

    def _completion(self, row: _Row, prompt_routes: torch.Tensor | None, b: int, prompt_len: int) -> Completion:
        routes = None
        if row.params.return_routed_experts and prompt_routes is not None:
            prompt_part = prompt_routes[:, b, prompt_routes.shape[2] - prompt_len :]  # (L, P, K)
            routes = completion_routes(prompt_part, row.routes, len(row.tokens))
        return Completion(
            token_ids=row.tokens,
            logprobs=row.logprobs,
            raw_logprobs=row.raw_logprobs,
            routed_experts=routes,
            finish_reason=row.finish_reason or "length",
            weights_version=row.versions[0],
            token_versions=row.versions,
        )

    def stats(self) -> dict:
        """Continuous mode: what the worker did so far: ``prefills`` (distinct prompts prefilled), ``admitted``
        (rows), ``cancelled`` (rows dropped because their caller cancelled its future), ``timings`` ((submitted, first token, done, tokens) of the latest finished rows, perf_counter
        seconds, a clock every process of this machine shares)."""
        if self._batcher is None:
            raise RuntimeError(f"stats needs the continuous mode, this engine runs {self.mode}")
        batcher = self._batcher
        return {
            "prefills": batcher.prefills,
            "admitted": batcher.admitted,
            "cancelled": batcher.cancelled,
            "timings": list(batcher.timings),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor], version: int | None = None) -> int:
        """Swap in new weights between batches (continuous: once the running rows finished), or between two
        decode steps with ``partial_rollouts``; returns the new weights version."""
        if self._batcher is not None:
            return int(self.schedule_load(state, version).result())
        self.policy.check_state_dict(state)
        if not self.partial_rollouts:
            with self._lock:
                return self._load(state, version)
        future = self.schedule_load(state, version, checked=True)
        while not future.done():  # a generating thread applies it after its current step; else we do
            if self._lock.acquire(timeout=0.05):
                try:
                    self._apply_pending()
                finally:
                    self._lock.release()
        return int(future.result())

    def schedule_load(
        self, state: dict[str, torch.Tensor], version: int | None = None, checked: bool = False
    ) -> Future:
        """`load_state_dict` without waiting (the future of the new version); rows submitted after this call
        start on the new weights. Continuous mode, and the batch modes with ``partial_rollouts`` (the update
        lands after the running batch's current decode step, or when the next call starts). The names and
        shapes are checked first (KeyError, ValueError; not again when the caller ``checked`` them), so a bad
        state dict raises here and changes nothing."""
        if self._batcher is None and not self.partial_rollouts:
            raise RuntimeError(
                f"schedule_load needs the continuous mode or partial rollouts, this engine runs {self.mode}"
            )
        if not checked:
            self.policy.check_state_dict(state)
        if self._batcher is not None:
            return self._batcher.schedule_exclusive(lambda: self._load(state, version))
        future: Future = Future()
        with self._pending_lock:
            self._pending.append((state, version, future))
        return future

    def _apply_pending(self) -> None:
        """Batch modes: load the updates `schedule_load` queued, in order (under ``_lock``, between two steps)."""
        if not self._pending:  # the common case, read without the lock: an update queued meanwhile waits a step
            return
        while True:
            with self._pending_lock:
                if not self._pending:
                    return
                state, version, future = self._pending.popleft()
            try:
                future.set_result(self._load(state, version))
            except Exception as exc:  # the caller of `load_state_dict` sees it, not the generation in flight
                future.set_exception(exc)

    def close(self) -> None:
        """Stop the continuous worker (its running rows finish first); nothing to do in the batch modes."""
        if self._batcher is not None:
            self._batcher.close()

    def _load(self, state: dict[str, torch.Tensor], version: int | None) -> int:
        count = self.policy.load_state_dict(state, checked=True)  # by `load_state_dict` or `schedule_load`
        self.weights_version = self.weights_version + 1 if version is None else version
        log.info("loaded %d tensors; weights version %d", count, self.weights_version)
        return self.weights_version

    def load_checkpoint(self, path: Path, version: int | None = None) -> int:
        return self.load_state_dict(checkpoint_tensors(Path(path)), version)

    def load_safetensors(self, data: bytes, version: int | None = None) -> int:
        return self.load_state_dict(load_safetensors_bytes(data), version)
