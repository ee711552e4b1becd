"""CUDA graphs of the continuous engine's decode step, at a few bucketed shapes.

A decode step of the RDEP policy is hundreds of small kernels (a few per layer for attention, the router,
the grouped experts' permute / SwiGLU / unpermute Triton kernels); on a GPU their launches, not their
arithmetic, bound a step. A CUDA graph records the step's kernels once and replays them with one launch.
A graph fixes every shape and address, so `GraphDecoder` runs `LeanDecoder.step_static`:

- **rows** are padded to a bucket (1, 2, 4, ... up to the slots): the running rows are slots 0..n-1 and
  slots n..m-1 are free, so padding rows (token 0 at position 0) write their own column and nobody reads it;
- **the window** is columns ``[0, width)`` of the static cache, ``width`` the bucket (64, 128, 256, ... up
  to the capacity) above ``end``; the write column ``end`` and the rows' positions are tensors the graph
  reads. The cache keeps ``end`` small: with ``SlotCache.compact`` the live window moves back to column 0
  once the dead columns before it outnumber the live ones (one copy of the window);
- **inputs** live in static buffers the step copies into; **outputs** (logits, routes, samples) in the
  graph's own memory, which the next replay overwrites: the engine reads them before the next step and
  clones the routes;
- **sampling** is recorded too: every graph also samples each row from softmax(logits) at a uniform the
  engine draws from the row's generator beforehand (`policies.sampler.plain_sample`, the GRPO case: no
  temperature, top-k, top-p or greedy row); a step with any such row samples the logits eagerly instead.

Graphs are captured lazily, one per (rows, width) bucket met, after one eager run of that shape on a side
stream (Triton compiles, cuBLAS picks its kernels), and share one memory pool (their replays never
overlap: the engine runs one step at a time and consumes each step's outputs before the next). The weights
are read in place at every replay, so an in-place update (`load_state_dict`) is seen by every graph.

Without capture (the CPU, or ``capture=False``) the same static step runs eagerly: the tests check it
against the dynamic step on the CPU and the captured graphs against it on a GPU.
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

from policies.decode import LeanDecoder
from policies.hf_adapter import StepOutput
from policies.sampler import plain_sample
from policies.slot_cache import SlotCache

log = logging.getLogger(__name__)

MIN_WIDTH = 64  # the smallest window bucket (columns)
ROW_STEP = 8  # the CPU's traces: rows padded to a multiple of this, columns to a multiple of `MIN_WIDTH`
MAX_TRACES = 128  # traces kept (least recently used dropped): ~3 MB and ~0.1 s to make each (tiny policy, CPU)


def row_bucket(rows: int, slots: int) -> int:
    """The padded row count of a step of ``rows`` running rows: the next power of two, at most ``slots``."""
    return min(slots, 1 << max(0, rows - 1).bit_length())


def width_bucket(end: int, capacity: int) -> int:
    """The attended columns of a step writing column ``end``: the next power of two above it (at least
    `MIN_WIDTH`), at most ``capacity``."""
    return min(capacity, max(MIN_WIDTH, 1 << end.bit_length()))


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    out: StepOutput
    sampled: tuple[torch.Tensor, torch.Tensor]  # tokens, logprobs (`plain_sample`)


# TorchScript warns that tracing is deprecated in favour of torch.compile / torch.export; both compile for minutes
# on the CPU and recompile as shapes change (docs/engine.md), so the traces stay until one of them does not.
_SHAPE_TEST = "Converting a tensor to a Python boolean"  # the tracer's words for `if pad:` on a traced shape


class GraphDecoder:
    """`step`: a `LeanDecoder` step through static shapes, replayed from CUDA graphs when ``capture``."""

    def __init__(self, lean: LeanDecoder, cache: SlotCache, capture: bool) -> None:
        slots, device = cache.keys.shape[1], cache.keys.device
        self.lean, self.capture = lean, capture
        self.slots, self.capacity = slots, cache.capacity
        self.fed = torch.zeros(slots, dtype=torch.int64, device=device)
        self.positions = torch.zeros(slots, dtype=torch.int64, device=device)
        self.end = torch.zeros(1, dtype=torch.int64, device=device)
        self.u = torch.full((slots,), 0.5, dtype=torch.float64, device=device)
        self.graphs: dict[tuple[int, int], _Graph] = {}
        # the CPU's, by (rows, width, sampled), the least recently used first; at most `max_traces`: 64 slots of
        # 2,048 columns make (64 / 8) x (2,048 / 64) x 2 = 512 buckets, ~1.5 GB of traces of the tiny policy
        self.traces: OrderedDict[tuple[int, int, bool], torch.jit.ScriptFunction] = OrderedDict()
        self.max_traces = MAX_TRACES
        self.traces_dropped = 0
        self.trace = capture and device.type == "cpu"
        self.untraceable: set[int] = set()  # row buckets whose step depends on the data (`_traceable`): eager
        self.pool = torch.cuda.graph_pool_handle() if capture and not self.trace else None
        self.replays = 0
        self.sampled = 0  # steps whose rows were sampled by the recorded `plain_sample`
        self.failed: str | None = None  # why capture was given up (the engine then decodes with the lean step)

    @torch.no_grad()
    def step(
        self, fed: torch.Tensor, positions: torch.Tensor, cache: SlotCache, u: torch.Tensor | None = None
    ) -> tuple[StepOutput, tuple[torch.Tensor, torch.Tensor] | None]:
        """As `LeanDecoder.step` (fed, positions (n,) of slots 0..n-1, writes column ``cache.end``), and with
        ``u`` (n,) float64 each row's sample from softmax(logits) at it (`plain_sample`: tokens, logprobs (n,)).
        Logits (n, 1, V) and samples are valid until the next step; routes (L_moe, n, 1, K) are the caller's."""
        n = cache.n
        if self.trace:  # a trace costs ~0.1 s to make, not a capture's memory: finer buckets pad less
            rows, width = (
                min(self.slots, -(-n // ROW_STEP) * ROW_STEP),
                min(self.capacity, (cache.end // MIN_WIDTH + 1) * MIN_WIDTH),
            )
        else:
            rows, width = row_bucket(n, self.slots), width_bucket(cache.end, self.capacity)
        self.fed[:n].copy_(fed)
        self.fed[n:rows].zero_()
        self.positions[:n].copy_(positions)
        self.positions[n:rows].zero_()
        self.end.fill_(cache.end)
        if u is not None:
            self.u[:n].copy_(u)
            self.sampled += 1
        graph = traced = None
        if self.trace and self.failed is None and rows not in self.untraceable:
            key = (rows, width, u is not None)
            traced = self.traces.get(key)
            if traced is None:
                traced = self._trace(key, cache)
            else:
                self.traces.move_to_end(key)
        elif self.capture and not self.trace and self.failed is None:
            graph = self.graphs.get((rows, width)) or self._record(rows, width, cache)
        if traced is not None:
            with torch.jit.optimized_execution(False):  # see `_trace`
                logits, routes, *drawn = traced(self.fed[:rows], self.positions[:rows], self.end, self.u[:rows])
            out = StepOutput(logits=logits, routes=routes)  # drawn: tokens, logprobs when the trace samples
        elif graph is not None:
            graph.graph.replay()
            out, drawn = graph.out, graph.sampled
        else:
            out, drawn = self._run(rows, width, cache)
        if traced is not None or graph is not None:
            self.replays += 1
        routes = None if out.routes is None else out.routes[:, :n]
        if graph is not None and routes is not None:
            routes = routes.clone()  # the next replay overwrites the graph's own
        sampled = None if u is None else (drawn[0][:n], drawn[1][:n])
        return StepOutput(logits=out.logits[:n], routes=routes), sampled

    def _run(self, rows: int, width: int, cache: SlotCache) -> tuple[StepOutput, tuple[torch.Tensor, torch.Tensor]]:
        """The recorded work: the static step of slots 0..rows-1, then every row's sample at ``self.u`` (padding
        rows and rows that sample eagerly read a stale or the initial 0.5: harmless, never used)."""
        out = self.lean.step_static(self.fed[:rows], self.positions[:rows], self.end, width, cache)
        return out, plain_sample(out.logits[:, -1], self.u[:rows])

    def _record(self, rows: int, width: int, cache: SlotCache) -> _Graph | None:
        """Capture the (rows, width) step; on failure log why, give up capturing and return None. The eager
        warm-up and the capture compute the very step about to run (same inputs), so their cache writes are
        the step's own."""
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._run(rows, width, cache)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: CUDA calls of other threads (callers seeding generators, a trainer) may go on meanwhile
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out, sampled = self._run(rows, width, cache)
        except Exception as exc:  # a kernel that cannot be captured: the engine decodes eagerly from now on
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("CUDA graph capture of a decode step failed; decoding without graphs: %s", self.failed)
            return None
        self.graphs[(rows, width)] = captured = _Graph(graph, out, sampled)
        log.info("captured the decode step of %d rows over %d columns (%d graphs)", rows, width, len(self.graphs))
        return captured

    def _trace(self, key: tuple[int, int, bool], cache: SlotCache) -> torch.jit.ScriptFunction | None:
        """The CPU's recording: a TorchScript trace of the (rows, width) static step, sampling when ``key[2]``,
        which runs the step's ops without the Python between them; None (after logging why, once) when it
        cannot be traced (weights that require grad, a model without MoE layers: no routes to return). Tracing
        runs the step once with the inputs about to run, so its cache write is the step's own. Traces run without
        the graph executor's optimizations: they would fold ops on the weights (the fused projection's `cat`)
        into constants, which a weight update then no longer reaches; and they cost ~60 ms more at the first
        calls of each trace for no faster step (measured on the 2-core VM)."""
        rows, width, sampled = key
        if not self._traceable(rows):
            self.untraceable.add(rows)
            log.info("the decode step of %d rows groups rows by expert (data-dependent): not traced", rows)
            return None

        def step(fed: torch.Tensor, positions: torch.Tensor, end: torch.Tensor, u: torch.Tensor) -> tuple:
            out = self.lean.step_static(fed, positions, end, width, cache)
            if out.routes is None:
                raise ValueError("the model has no MoE layer: its step returns no routes to trace")
            return (
                (out.logits, out.routes, *plain_sample(out.logits[:, -1], u)) if sampled else (out.logits, out.routes)
            )

        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", torch.jit.TracerWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                example = (self.fed[:rows], self.positions[:rows], self.end, self.u[:rows])
                self.lean.all_experts = True  # decided above for this bucket, not read from the traced row count
                try:
                    with torch.jit.optimized_execution(False):
                        traced = torch.jit.trace(step, example, check_trace=False)
                finally:
                    self.lean.all_experts = None
            # a tensor read on the host is baked into the trace as a constant: refused, but for the comparisons of
            # shapes fixed per bucket (the sampler's vocabulary padding); the grouped experts' counts, a list read,
            # are kept out of traces above (`_traceable`) and refused here too
            unsafe = [
                str(w.message)
                for w in caught
                if issubclass(w.category, torch.jit.TracerWarning) and not str(w.message).startswith(_SHAPE_TEST)
            ]
            if unsafe:
                raise RuntimeError(f"the step reads a tensor on the host: {unsafe[0][:200]}")
        except Exception as exc:  # the engine decodes with the dynamic lean step from now on
            self.failed = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("tracing the decode step failed; decoding without traces: %s", self.failed)
            return None
        self.traces[key] = traced
        while len(self.traces) > self.max_traces:
            self.traces.popitem(last=False)
            self.traces_dropped += 1
        log.debug("traced the decode step of %d rows over %d columns (%d traces)", rows, width, len(self.traces))
        return traced

    def _traceable(self, rows: int) -> bool:
        """Whether a step of ``rows`` rows computes the same ops whatever its data: every MoE block runs every
        expert on every row (`MoEBlock.runs_all_experts`). The grouped path splits rows by the experts they chose,
        counts a trace would freeze."""
        inner = self.lean.model.model
        probe = torch.empty(rows, inner.embed_tokens.weight.shape[1], device=self.fed.device)
        return all(layer.mlp.runs_all_experts(probe) for layer in inner.layers if layer.is_moe)
