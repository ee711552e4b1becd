"""The continuous engine's static-shape decode step (what its CUDA graphs record), on the CPU.

`LeanDecoder.step_static` pads rows to a bucket and attends columns [0, width) with the write column a tensor;
it must compute what the dynamic step computes for the real rows. The engine with ``cuda_graphs=True`` runs
that step eagerly on the CPU (capture needs a GPU: tests/integration/test_cuda_graphs_gpu.py) and must sample
what the engine without it samples, while the cache compacts its window so ``end`` stays small.
"""

from __future__ import annotations

import pytest
import torch

import kernels.permute as permute
from policies.cuda_graphs import MIN_WIDTH, row_bucket, width_bucket
from policies.decode import LeanDecoder
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import SamplingParams
from tests.policy_support import PROMPTS, copy_of, filled_cache, same_completion, small_model


def test_buckets() -> None:
    assert [row_bucket(n, 64) for n in (1, 2, 3, 4, 5, 33, 64)] == [1, 2, 4, 4, 8, 64, 64]
    assert row_bucket(40, 48) == 48  # capped at the slots
    assert [width_bucket(e, 4096) for e in (0, 63, 64, 100, 127, 128, 1000)] == [64, 64, 128, 128, 128, 256, 1024]
    assert width_bucket(200, 128 + 100) == 228 and MIN_WIDTH == 64
    for end in range(300):  # the write column always lies inside the window
        assert end < width_bucket(end, 512)


@pytest.mark.parametrize("n, start, end, rows", [(3, 10, 30, 4), (5, 0, 63, 8), (2, 40, 100, 2), (1, 0, 0, 1)])
def test_the_static_step_computes_the_dynamic_step(n, start, end, rows) -> None:
    """Rows of different starts, padded to ``rows``, over a window from column 0: the real rows' logits, routes
    and written keys/values are those of the dynamic step, and padding rows come out finite."""
    model = small_model()
    cache = filled_cache(model, rows, start, end)  # rows + 2 slots
    cache.n = n
    g = torch.Generator().manual_seed(n)
    fed = torch.randint(0, model.config.vocab_size, (n,), generator=g)
    lengths = torch.tensor([end - start - 3 * b for b in range(n)]).clamp_min(1)
    lean = LeanDecoder(model, cache.capacity)
    dynamic_cache, static_cache = copy_of(cache), copy_of(cache)
    want = lean.step(fed, lengths, dynamic_cache)
    pad = torch.zeros(rows - n, dtype=torch.int64)
    width = width_bucket(end, cache.capacity)
    got = lean.step_static(torch.cat([fed, pad]), torch.cat([lengths, pad]), torch.tensor([end]), width, static_cache)
    assert got.logits.shape[0] == rows and torch.isfinite(got.logits).all()
    assert (got.logits[:n] - want.logits).abs().max() < 1e-5  # measured ~1e-7
    assert torch.equal(got.routes[:, :n], want.routes)
    # cache rows: measured max |diff| 1.1e-7 over default/avx2/avx512 kernels (0.05 of the tolerance): margin 20x
    for mine, theirs in ((static_cache.keys, dynamic_cache.keys), (static_cache.values, dynamic_cache.values)):
        assert torch.allclose(mine[:, :n, :, end], theirs[:, :n, :, end], atol=1e-6)
        assert torch.equal(mine[:, :n, :, :end], theirs[:, :n, :, :end])  # nothing else of a real row written


def test_the_engine_with_the_static_step_samples_what_it_samples_without() -> None:
    """Rows join and leave (buckets change), a long prompt moves the window right and compaction moves it
    back to column 0; completions, logprobs and routes equal the engine's without graphs."""
    policy = CausalLMPolicy(small_model())
    prompts = [[1] * 5, list(range(1, 61)) + list(range(1, 31)), [2] * 20, PROMPTS[0], PROMPTS[1]]
    params = [
        SamplingParams(max_tokens=n, seed=4 + n, return_routed_experts=True, stop_token_ids=[3])
        for n in (30, 25, 35, 9, 20)
    ]
    results, ends = {}, {}
    for graphs in (False, True):
        engine = GenerationEngine(policy, max_batch_size=4, cuda_graphs=graphs)
        futures = [engine.submit([p], [q]) for p, q in zip(prompts, params)]
        results[graphs] = [f.result()[0] for f in futures]
        batcher = engine._batcher
        assert (batcher.graphs is not None) == graphs and batcher.cache.compact == graphs
        if graphs:
            assert batcher.graphs.replays == 0 and batcher.graphs.failed is None  # the CPU never captures
        ends[graphs] = (batcher.max_end, batcher.cache.moves)
        batcher.close()
    (graph_end, graph_moves), (plain_end, plain_moves) = ends[True], ends[False]
    assert graph_moves > plain_moves and graph_end < plain_end  # measured (105, 1) against (123, 0)
    for a, b in zip(results[True], results[False], strict=True):
        same_completion(a, b)
        assert a.routed_experts == b.routed_experts


@pytest.mark.parametrize("processed", [False, True])
def test_rows_sampled_with_the_step_or_after_it_draw_what_the_eager_sampler_draws(processed) -> None:
    """Rows that process nothing are sampled with the step (what the graphs record) at a draw taken before it;
    a batch with a top-k row samples the logits after the step; both draw what the engine without graphs
    draws, one number per row and step from each row's generator."""
    policy = CausalLMPolicy(small_model())
    params = [SamplingParams(max_tokens=n, seed=n) for n in (12, 7, 16)]
    if processed:
        params[1] = SamplingParams(max_tokens=30, seed=1, top_k=5)  # runs longest: no step is plain
    results = {}
    for graphs in (False, True):
        engine = GenerationEngine(policy, max_batch_size=4, cuda_graphs=graphs)
        results[graphs] = engine.generate_batch(PROMPTS, params)
        if graphs:
            decoder = engine._batcher.graphs
            assert (decoder.sampled == 0) if processed else (decoder.sampled > 10)
        engine._batcher.close()
    for a, b in zip(results[True], results[False], strict=True):
        same_completion(a, b)


def test_a_failed_capture_falls_back_to_eager_decoding(caplog) -> None:
    """A capture that raises (here: no CUDA in this torch) is logged once, that step runs the static step
    eagerly, every later one the dynamic lean step; completions are those of the engine without graphs."""
    policy = CausalLMPolicy(small_model())
    params = [SamplingParams(max_tokens=n, seed=n, return_routed_experts=True) for n in (12, 7, 16)]
    engine = GenerationEngine(policy, max_batch_size=4, cuda_graphs=True)
    decoder = engine._batcher.graphs
    decoder.capture = True  # as on a GPU: the first step tries to record a graph
    with caplog.at_level("WARNING", logger="policies.cuda_graphs"):
        got = engine.generate_batch(PROMPTS, params)
    assert decoder.failed and decoder.replays == 0 and decoder.sampled == 1  # only the failed step's own sample
    assert caplog.text.count("CUDA graph capture of a decode step failed") == 1
    engine._batcher.close()
    for a, b in zip(got, GenerationEngine(policy, cuda_graphs=False).generate_batch(PROMPTS, params), strict=True):
        same_completion(a, b)
        assert a.routed_experts == b.routed_experts


def test_compaction_moves_the_window_back_to_column_0() -> None:
    model = small_model()
    cache = filled_cache(model, 2, 70, 80)
    cache.compact = True
    before = cache.keys[:, :2, :, 70:80].clone()
    cache.make_room(0)
    assert (cache.start, cache.end, cache.moves) == (0, 10, 1)
    assert torch.equal(cache.keys[:, :2, :, 0:10], before)
    cache.make_room(0)  # live columns outnumber the dead ones now: no move
    assert cache.moves == 1
    plain = filled_cache(model, 2, 70, 80)
    plain.make_room(0)
    assert (plain.start, plain.end, plain.moves) == (70, 80, 0)


def test_routing_counts_inside_a_capture_equal_bincount(monkeypatch) -> None:
    """Inside a CUDA graph capture `routing` counts with scatter_add (bincount syncs); same counts and order."""
    expert_idx = torch.randint(0, 8, (37, 3), generator=torch.Generator().manual_seed(1))
    want = permute.routing(expert_idx, 8)
    monkeypatch.setattr(permute, "capturing", lambda tensor: True)
    got = permute.routing(expert_idx, 8)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
