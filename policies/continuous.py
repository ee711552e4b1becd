"""Continuous batching over a static KV cache: sequences join and leave the running batch per decode step.

One worker thread owns the model. Callers `submit` prompts (any thread) and get a future of their
completions; the worker, between two decode steps, admits waiting sequences into free slots
(prefilling them together, each distinct prompt once: the G samples of a GRPO group share one
prefill), runs one decode step for every running sequence, and frees the slot of a sequence the
moment it stops. No batch waits for its longest row. With ``prefill_chunk`` an admitted group's
prompts are prefilled that many columns a step, each chunk beside a decode step of the running rows.

The cache is preallocated once: keys and values of shape (layers, slots, kv_heads, capacity,
head_dim), capacity = the model's context. Running sequences occupy slots 0..n-1 and every one
of them ends at the same column ``end``: a step writes each row's new key/value at ``end`` and
attends over ``[start, end]``, where ``start`` is where the longest running row begins; shorter
rows mask the columns before their own start. A prompt is placed so that it ends at ``end``
(the live window moves right when a prompt is longer than ``end``, and left when ``end`` reaches
the capacity: one copy of the window, rarely). A finished row's slot is refilled by the last row
(one row's copy), so every step works on the contiguous slots 0..n-1 without gathering.

Weights: an update (`schedule_exclusive`) runs on the worker between two steps, so no step ever reads half-loaded
weights, and requests that arrive after it start on the new weights. By default it waits until no sequence is
running (nothing new is admitted meanwhile), so every completion comes from one weights version. With
``partial_rollouts`` it runs at the next step boundary while sequences are running (AReaL's and slime's partial
rollouts): they go on under the new weights, and the keys and values they cached under the old weights stay in
the cache, not recomputed (a re-prefill would cost as much as the prompt again; the importance-sampling
correction sees the mismatch through each token's own behaviour logprob). Every sampled token records the
version that sampled it (`Completion.token_versions`).

Rotary positions are per row (a row's position is its own token count), so where a row sits in the
cache never changes what it computes; samples draw from each row's own seeded generator, so they do
not depend on batch mates either.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from transformers import DynamicCache

from policies.cuda_graphs import GraphDecoder
from policies.decode import LeanDecoder
from policies.hf_adapter import CausalLMPolicy
from policies.sampler import RowDraws, RowSampling, Sample, sample, uniforms
from policies.sampling import Completion, EngineError, Routes, SamplingParams
from policies.slot_cache import SlotCache

log = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[ContinuousBatcher] = weakref.WeakSet()


def resolve(future: Future, value: object) -> None:
    """Set ``future``'s result unless it is done already: a caller may cancel it at any moment from its own
    thread (a client gone), between a `done()` check and `set_result`, which would then raise."""
    try:
        future.set_result(value)
    except InvalidStateError:  # cancelled (or resolved) meanwhile: nobody waits for this value
        pass


def reject(future: Future, error: BaseException) -> None:
    """`resolve` for an exception."""
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


@atexit.register
def _stop_all() -> None:
    """Stop every worker before the interpreter tears torch down (a thread left inside it aborts the process)."""
    for batcher in list(_LIVE):
        batcher.close()


def left_padded(prompts, pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts as one left-padded batch: ids, attention mask (1 = token) and positions, each (B, longest)."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.int64, device=device)
    mask = torch.zeros_like(ids)
    for b, prompt in enumerate(prompts):
        ids[b, width - len(prompt) :] = torch.tensor(prompt, device=device)
        mask[b, width - len(prompt) :] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp_min(0)


Watch = Callable[[int, float], bool]
"""Sees each sampled token of a row and its logprob, on the engine's thread, in order; True ends the row with
finish_reason "stop" (the server's stop strings, `policies.stop_strings.TextWatch`, which also streams them)."""


def append_sample(row, drawn: tuple[int, float, float]) -> None:
    """Append one row of a `Sample` (`Sample.per_row`) to a sequence's tokens and logprobs; set why it stops, if
    it does."""
    token, logprob, raw_logprob = drawn
    row.tokens.append(token)
    row.logprobs.append(logprob)
    row.raw_logprobs.append(raw_logprob)
    if token in row.stops:  # a set: a long stop list costs nothing per token
        row.finish_reason = "stop"
    elif len(row.tokens) >= row.params.max_tokens:
        row.finish_reason = "length"
    watch = getattr(row, "watch", None)
    if watch is not None:
        try:
            stop = watch(token, logprob)
        except Exception:  # the caller's code: it must not fail the batch's step; the row goes on unwatched
            log.exception("a row's token watch failed; the row goes on without it")
            row.watch, stop = None, False
        if stop and row.finish_reason is None:
            row.finish_reason = "stop"


def completion_routes(prompt, fed: list, tokens: int) -> Routes:
    """Routes (L, P + tokens, K) of a completion: the prompt's (L, P, K), then each fed token's (L, K), then -1
    for the last sampled token, which is never fed forward. Tensors (on any device) or numpy arrays; assembled
    on the CPU in numpy (a completion's hundreds of pieces cost ~0.2 ms there against ~1 ms as torch tensors)."""
    prompt = prompt.cpu().numpy() if isinstance(prompt, torch.Tensor) else np.asarray(prompt)
    layers, _, k = prompt.shape
    steps = fed[: tokens - 1]
    if not steps:
        steps = np.empty((layers, 0, k), dtype=prompt.dtype)
    elif isinstance(steps[0], torch.Tensor):
        steps = torch.stack(steps, dim=1).cpu().numpy()
    else:
        steps = np.stack(steps, axis=1)
    last = np.full((layers, 1, k), -1, dtype=prompt.dtype)
    return Routes(np.concatenate([prompt, steps.astype(prompt.dtype, copy=False), last], axis=1))


@dataclass
class _Job:
    """One `submit` call: its sequences and the future of their completions."""

    future: Future
    completions: list[Completion | None]
    remaining: int


@dataclass
class _Sequence:
    """One prompt of a job while it waits or runs."""

    job: _Job
    index: int  # in the job
    prompt: list[int]
    params: SamplingParams
    draws: RowDraws
    length: int = 0  # tokens in the cache
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)
    prompt_routes: torch.Tensor | None = None  # (L, P, K)
    routes: list = field(default_factory=list)  # (L, K) numpy per fed token (a view of the step's routes)
    finish_reason: Literal["stop", "length"] | None = None
    versions: list[int] = field(default_factory=list)  # weights version of each sampled token
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float = 0.0
    stops: frozenset[int] = frozenset()  # params.stop_token_ids, as a set (`append_sample`)
    watch: Watch | None = None  # sees each sampled token; True ends the row there (a stop string)

    def __post_init__(self) -> None:
        self.stops = frozenset(self.params.stop_token_ids)


@dataclass
class _Prefill:
    """Admitted rows whose distinct prompts are being prefilled together, at most ``chunk`` columns a step."""

    rows: list[_Sequence]
    distinct: dict[tuple[int, ...], int]  # prompt -> its row in the batch below
    ids: torch.Tensor  # (P, width) left-padded distinct prompts
    mask: torch.Tensor  # (P, width)
    positions: torch.Tensor  # (P, width)
    cache: DynamicCache = field(default_factory=DynamicCache)
    done: int = 0  # columns prefilled so far
    routes: list[torch.Tensor] = field(default_factory=list)  # (L, P, chunk, K) per chunk


class ContinuousBatcher:
    """The worker thread and its scheduling (see the module docstring)."""

    def __init__(
        self,
        policy: CausalLMPolicy,
        slots: int,
        pad_token_id: int = 0,
        version: Callable[[], int] = lambda: 0,
        prefill_chunk: int | None = None,
        lean_decode: bool = True,
        cuda_graphs: bool | None = None,
        traced: bool = False,
        partial_rollouts: bool = False,
    ) -> None:
        config = policy.model.config
        self.policy = policy
        self.slots = slots
        self.prefill_chunk = prefill_chunk  # columns of admitted prompts prefilled a step (None: all at once)
        self.prefilling: _Prefill | None = None
        self.pad_token_id = pad_token_id
        self.version = version
        self.partial_rollouts = partial_rollouts  # updates run between steps, not once the running rows finish
        self.cache = SlotCache(
            config.num_hidden_layers,
            slots,
            config.num_key_value_heads,
            policy.context_length,
            config.head_dim,
            next(policy.model.parameters()).dtype,
            policy.device,
        )
        # our policy decodes through `LeanDecoder` (the same step in few ops); other models through their forward
        self.lean = (
            LeanDecoder(policy.model, self.cache.capacity)
            if lean_decode and LeanDecoder.supports(policy.model)
            else None
        )
        # CUDA graphs of the lean step (`policies.cuda_graphs`): by default on a GPU; True on the CPU runs their
        # static-shape step eagerly (what the tests compare); ``traced`` on the CPU replays TorchScript traces of it
        on_gpu = policy.device.type == "cuda"
        use_graphs = (on_gpu if cuda_graphs is None else cuda_graphs) or (traced and not on_gpu)
        self.graphs = (
            GraphDecoder(self.lean, self.cache, capture=on_gpu or traced)
            if use_graphs and self.lean is not None
            else None
        )
        self.cache.compact = self.graphs is not None  # a graph attends columns [0, width): keep `end` small
        self.running: list[_Sequence] = []
        self.waiting: deque[_Sequence] = deque()
        self.updates: deque[tuple[Callable[[], object], Future]] = deque()
        self.condition = threading.Condition()
        self.wakeup = threading.Event()  # set with every notify: the idle worker waits on it holding no reference
        self.prefills = 0  # distinct prompts prefilled (prefix sharing makes it < prompts admitted)
        self.admitted = 0
        self.max_end = 0  # the largest write column a decode step used
        self.steps: deque[tuple[int, int]] = deque(maxlen=100_000)  # (prompt columns prefilled, rows decoded) a step
        # (submitted, first token, done, tokens) of the latest finished rows, perf_counter seconds (bench generate)
        self.timings: deque[tuple[float, float, float, int]] = deque(maxlen=100_000)
        self.cancelling = False  # a caller cancelled its future: `_drop_cancelled` at the next step
        self.cancelled = 0  # rows dropped because their caller cancelled
        self.closed = False
        self.thread = threading.Thread(target=_work, args=(weakref.ref(self),), name="continuous-batcher", daemon=True)
        self.thread.start()
        _LIVE.add(self)
        weakref.finalize(self, self.wakeup.set)

    def close(self) -> None:
        """Stop the worker once its running rows are done (waiting ones fail); idempotent."""
        with self.condition:
            self.closed = True
            self.condition.notify_all()
            self.wakeup.set()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=30)

    # -- callers (any thread)
    def submit(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        seeds: list[int],
        watches: list[Watch | None] | None = None,
    ) -> Future:
        job = _Job(future=Future(), completions=[None] * len(prompts), remaining=len(prompts))
        watches = watches or [None] * len(prompts)
        with self.condition:
            if self.closed:
                raise EngineError("the generation engine was closed")
            for i, (prompt, p, seed, watch) in enumerate(zip(prompts, params, seeds, watches, strict=True)):
                row = _Sequence(job=job, index=i, prompt=list(prompt), params=p, draws=RowDraws(seed), watch=watch)
                self.waiting.append(row)
            if not prompts:
                resolve(job.future, [])
            self.condition.notify_all()
            self.wakeup.set()
        job.future.add_done_callback(functools.partial(_on_done, weakref.ref(self)))  # no hold on a dropped engine
        return job.future

    def _cancelled(self) -> None:
        """A caller cancelled its job's future (a client that went away): its rows stop at the next step instead
        of decoding to their budget for no one."""
        with self.condition:
            self.cancelling = True
            self.condition.notify_all()
            self.wakeup.set()

    def run_exclusive(self, action: Callable[[], object]) -> object:
        """Run ``action`` on the worker between two steps: once no sequence is running (nothing is admitted
        meanwhile), or at the next step boundary with ``partial_rollouts``."""
        return self.schedule_exclusive(action).result()

    def schedule_exclusive(self, action: Callable[[], object]) -> Future:
        """`run_exclusive` without waiting: the future of ``action``'s result. Rows submitted after this call
        are admitted after ``action`` ran."""
        future: Future = Future()
        with self.condition:
            if self.closed:
                raise EngineError("the generation engine was closed")
            self.updates.append((action, future))
            self.condition.notify_all()
            self.wakeup.set()
        return future

    # -- the worker
    def _next(self) -> tuple[str, object]:
        """The next piece of work, without waiting: ``("idle", None)``, ``("stop", None)``,
        ``("update", (action, future))`` or ``("step", admitted rows)``."""
        busy = bool(self.running) or self.prefilling is not None
        with self.condition:
            if not (self.waiting or busy or self.updates or self.closed):
                return "idle", None
            if self.closed and not busy:
                error = EngineError("the generation engine was closed")
                for row in self.waiting:
                    reject(row.job.future, error)
                self.waiting.clear()
                for _, future in self.updates:  # a weight update queued behind the running rows never runs
                    reject(future, error)
                self.updates.clear()
                return "stop", None
            if self.updates and (not busy or self.partial_rollouts):
                return "update", self.updates.popleft()
            free = self.slots - len(self.running)
            blocked = self.updates or self.closed or self.prefilling is not None  # one prefill at a time
            return "step", [] if blocked else [self.waiting.popleft() for _ in range(min(free, len(self.waiting)))]

    def _drop_cancelled(self) -> None:
        """Rows whose caller cancelled its future: waiting ones never start, running ones free their slots now."""
        with self.condition:
            if not self.cancelling:
                return
            self.cancelling = False
            self.waiting = deque(self._uncancelled(self.waiting))
        for row in [row for row in self.running if row.job.future.cancelled()]:
            self._release(row)
            self.cancelled += 1
        if self.prefilling is not None and all(row.job.future.cancelled() for row in self.prefilling.rows):
            self.cancelled += len(self.prefilling.rows)  # its remaining chunks would be prefilled for no one
            self.prefilling = None

    def _uncancelled(self, rows) -> list[_Sequence]:
        """``rows`` less those whose caller cancelled its future, counted in `cancelled`."""
        kept = [row for row in rows if not row.job.future.cancelled()]
        self.cancelled += len(rows) - len(kept)
        return kept

    def _step(self, admit: list[_Sequence]) -> None:
        self._drop_cancelled()
        admit = self._uncancelled(admit)  # some may have been cancelled since they were taken from the queue
        try:
            if admit:
                self.prefilling = self._start_prefill(admit)
            columns = self._prefill() if self.prefilling is not None else 0
            if self.running:
                self._decode()
            self.steps.append((columns, len(self.running)))
        except Exception as exc:  # a fault of the model step: every running and prefilling row fails
            log.exception("continuous batcher step failed")
            rows = (self.prefilling.rows if self.prefilling is not None else []) + self.running
            self.prefilling = None
            self._fail(rows, EngineError(f"generation failed: {type(exc).__name__}: {exc}"))

    def _fail(self, rows: list[_Sequence], error: EngineError) -> None:
        for row in rows:
            reject(row.job.future, error)
        self.running = []
        self.cache.n, self.cache.start, self.cache.end = 0, 0, 0

    def _start_prefill(self, admit: list[_Sequence]) -> _Prefill:
        """The prefill of ``admit``: each distinct prompt once, left-padded into one batch."""
        distinct: dict[tuple[int, ...], int] = {}
        for row in admit:
            distinct.setdefault(tuple(row.prompt), len(distinct))
        ids, mask, positions = left_padded(list(distinct), self.pad_token_id, self.policy.device)
        self.prefills += len(distinct)
        self.admitted += len(admit)
        return _Prefill(rows=admit, distinct=distinct, ids=ids, mask=mask, positions=positions)

    @torch.no_grad()
    def _prefill(self) -> int:
        """Prefill the next chunk of columns (all of them without ``prefill_chunk``), so a long prompt never stalls
        the running rows for more than one chunk a step; after the last, place the rows. Returns the columns."""
        p = self.prefilling
        width = p.ids.shape[1]
        stop = width if self.prefill_chunk is None else min(width, p.done + self.prefill_chunk)
        out = self.policy.step(p.ids[:, p.done : stop], p.mask[:, :stop], p.positions[:, p.done : stop], p.cache)
        columns, p.done = stop - p.done, stop
        if out.routes is not None and any(row.params.return_routed_experts for row in p.rows):
            p.routes.append(out.routes.cpu())  # completions' routes are assembled on the CPU
        if stop == width:
            self._place(p, out.logits[:, -1], torch.cat(p.routes, dim=2) if p.routes else None)
            self.prefilling = None  # after: a failed placement fails every admitted row (`_step`)
        return columns

    def _place(self, p: _Prefill, logits: torch.Tensor, routes: torch.Tensor | None) -> None:
        """Place every prefilled row in a slot, ending at ``end``, and sample its first token.

        ``logits``: (P, V) at each distinct prompt's last column; ``routes``: (L, P, width, K) or None."""
        admit, distinct, width, prefill = p.rows, p.distinct, p.ids.shape[1], p.cache
        admit = self._uncancelled(admit)  # some may have been cancelled while prefilling
        if not admit:
            return
        cache = self.cache
        cache.make_room(max(len(row.prompt) for row in admit))
        for row in admit:
            b, length = distinct[tuple(row.prompt)], len(row.prompt)
            slot = cache.n
            for layer, kv in enumerate(prefill.layers):
                cache.keys[layer, slot, :, cache.end - length : cache.end] = kv.keys[b, :, width - length :]
                cache.values[layer, slot, :, cache.end - length : cache.end] = kv.values[b, :, width - length :]
            cache.n += 1
            cache.start = min(cache.start, cache.end - length)
            row.length = length
            if routes is not None and row.params.return_routed_experts:
                row.prompt_routes = routes[:, b, width - length :]
            self.running.append(row)
        self._take(admit, logits[[distinct[tuple(row.prompt)] for row in admit]])

    @torch.no_grad()
    def _decode(self) -> None:
        """One step for every running row: feed its last token, sample the next."""
        device, cache, rows = self.policy.device, self.cache, self.running
        cache.make_room(0)  # a free column at `end`
        self.max_end = max(self.max_end, cache.end)
        fed = torch.tensor([row.tokens[-1] for row in rows], dtype=torch.int64, device=device)
        lengths = torch.tensor([row.length for row in rows], dtype=torch.int64, device=device)
        sampling = RowSampling.of([r.params for r in rows], [r.draws for r in rows], device)
        drawn = None
        graphs = self.graphs
        if graphs is not None and graphs.capture and graphs.failed is not None:
            graphs = None  # a capture failed: the dynamic lean step, which pads nothing, decodes from now on
        if graphs is not None:
            # rows that process nothing (the GRPO case) are sampled inside the graph, at this step's draw
            u = uniforms(sampling, device) if sampling.plain and not sampling.any_greedy else None
            out, sampled = graphs.step(fed, lengths, cache, u)
            if sampled is not None:
                drawn = Sample(tokens=sampled[0], logprobs=sampled[1], raw_logprobs=sampled[1])
        elif self.lean is not None:
            out = self.lean.step(fed, lengths, cache)
        else:
            columns = torch.arange(cache.start, cache.end + 1, device=device)
            mask = (columns[None, :] >= (cache.end - lengths)[:, None]).to(torch.int64)
            out = self.policy.step(fed[:, None], mask, lengths[:, None], cache)
        cache.end += 1
        for row in rows:
            row.length += 1
        if out.routes is not None and any(row.params.return_routed_experts for row in rows):
            # (n, L, K) on the CPU: one copy a step, then one view per row
            for row, fed_routes in zip(rows, out.routes[:, :, -1].transpose(0, 1).cpu().numpy()):
                if row.params.return_routed_experts:
                    row.routes.append(fed_routes)
        self._take(rows, out.logits[:, -1], sampling, drawn)

    def _take(
        self,
        rows: list[_Sequence],
        logits: torch.Tensor,
        sampling: RowSampling | None = None,
        drawn: Sample | None = None,
    ) -> None:
        """Append each row's sample (``drawn``, else sampled from ``logits`` with ``sampling``, else with the rows'
        own settings); free the slots of rows that stopped, resolve finished jobs."""
        if drawn is None:
            sampling = sampling or RowSampling.of([r.params for r in rows], [r.draws for r in rows], logits.device)
            drawn = sample(logits, sampling)
        finished = []
        now = time.perf_counter()
        version = self.version()  # of the weights this step ran on: updates run on this thread, between steps
        for row, one in zip(rows, drawn.per_row()):
            append_sample(row, one)
            row.versions.append(version)
            row.first_token = row.first_token or now
            if row.finish_reason is not None:
                finished.append(row)
                self.timings.append((row.submitted, row.first_token, now, len(row.tokens)))
        for row in finished:
            self._release(row)
            job = row.job
            job.completions[row.index] = self._completion(row)
            job.remaining -= 1
            if job.remaining == 0:
                resolve(job.future, job.completions)

    def _release(self, row: _Sequence) -> None:
        slot, last = self.running.index(row), len(self.running) - 1
        if slot != last:
            self.cache.move_row(last, slot)
            self.running[slot] = self.running[last]
        self.running.pop()
        self.cache.n -= 1
        if self.cache.n == 0:
            self.cache.start = self.cache.end = 0
        else:
            self.cache.start = self.cache.end - max(r.length for r in self.running)

    @staticmethod
    def _completion(row: _Sequence) -> Completion:
        routes = (
            None if row.prompt_routes is None else completion_routes(row.prompt_routes, row.routes, len(row.tokens))
        )
        # built as typed here (ints, floats, a finish reason, a version >= 0): not validated again, which cost
        # about as much as assembling the routes (each of hundreds of nested lists walked)
        return Completion.model_construct(
            token_ids=row.tokens,
            logprobs=row.logprobs,
            raw_logprobs=row.raw_logprobs,
            routed_experts=routes,
            finish_reason=row.finish_reason or "length",
            weights_version=row.versions[0],
            token_versions=row.versions,
        )


def _on_done(ref: weakref.ref[ContinuousBatcher], future: Future) -> None:
    batcher = ref()
    if batcher is not None and future.cancelled():
        batcher._cancelled()


def _work(ref: weakref.ref[ContinuousBatcher]) -> None:
    """The worker loop; it holds its batcher only while there is work, so a dropped engine is collected."""
    while True:
        batcher = ref()
        if batcher is None:
            return
        kind, work = batcher._next()
        if kind == "stop":
            return
        if kind == "idle":
            wakeup = batcher.wakeup
            del batcher
            wakeup.wait(timeout=1.0)
            wakeup.clear()  # `_next` looks again after this: a wake-up set meanwhile is not lost
            continue
        if kind == "update":
            action, future = work
            try:
                value = action()
            except BaseException as exc:  # the caller sees the error (a bad state dict)
                reject(future, exc)
            else:
                resolve(future, value)
        elif kind == "step":
            batcher._step(work)
        del batcher, work
