"""The CPU's traced decode step (`policies.cuda_graphs.GraphDecoder` with ``capture`` on the CPU): TorchScript
traces of the static step compute what it computes eagerly, and the engine with them samples what it samples
without."""

from __future__ import annotations

import pytest
import torch

from policies import decode
from policies.cuda_graphs import ROW_STEP, GraphDecoder
from policies.decode import LeanDecoder
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampler import plain_sample
from policies.sampling import SamplingParams
from policies.serve_config import ServeConfig, build_engine
from tests.policy_support import PROMPTS, copy_of, filled_cache, same_completion, small_model
from tests.serve_support import MODEL

NINE_PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12], [13, 14], [15], [16, 17], [18, 19, 20]]


def _inference(model):
    return model.requires_grad_(False)


def _as_without_traces(policy, prompts, params, got, slots: int, routes: bool = True) -> None:
    """``got`` is what an engine without traces samples for these requests (routes too when ``routes``)."""
    plain = GenerationEngine(policy, max_batch_size=slots)
    for a, b in zip(got, plain.generate_batch(prompts, params), strict=True):
        same_completion(a, b)
        assert not routes or a.routed_experts == b.routed_experts
    plain.close()


@pytest.mark.parametrize("n", [1, 5, 8, 11])
def test_a_traced_step_computes_what_the_eager_static_step_computes(n) -> None:
    """Logits, routes, the written keys/values and the samples equal the eager static step's bit for bit."""
    model = _inference(small_model())
    lean = LeanDecoder(model, model.config.max_position_embeddings)
    cache = filled_cache(model, n, start=3, end=40)
    reference = copy_of(cache)
    decoder = GraphDecoder(lean, cache, capture=True)
    assert decoder.trace and decoder.pool is None
    fed = torch.arange(1, n + 1) % 60
    positions = torch.arange(n) + 20
    u = torch.linspace(0.05, 0.95, n, dtype=torch.float64)
    out, sampled = decoder.step(fed, positions, cache, u)
    rows = min(cache.keys.shape[1], -(-n // ROW_STEP) * ROW_STEP)
    padded_fed, padded_positions = torch.zeros(rows, dtype=torch.int64), torch.zeros(rows, dtype=torch.int64)
    padded_fed[:n], padded_positions[:n] = fed, positions
    eager = lean.step_static(padded_fed, padded_positions, torch.tensor([40]), 64, reference)
    assert torch.equal(out.logits, eager.logits[:n]) and torch.equal(out.routes, eager.routes[:, :n])
    assert torch.equal(cache.keys[:, :n], reference.keys[:, :n])
    assert torch.equal(cache.values[:, :n], reference.values[:, :n])
    tokens, logprobs = plain_sample(eager.logits[:n, -1], u)
    assert torch.equal(sampled[0], tokens) and torch.equal(sampled[1], logprobs)
    assert decoder.replays == 1 and list(decoder.traces) == [(rows, 64, True)] and decoder.failed is None
    # the same bucket again is replayed from the same trace, without sampling from another one
    decoder.step(fed, positions, cache, None)
    assert sorted(decoder.traces) == [(rows, 64, False), (rows, 64, True)] and decoder.replays == 2


@pytest.mark.parametrize("processed", [False, True])
def test_the_traced_engine_samples_what_the_engine_without_traces_samples(processed) -> None:
    """Rows join and leave (buckets change), a long prompt moves the window; with a top-k row the traces do not
    sample and the logits are sampled after the step."""
    policy = CausalLMPolicy(_inference(small_model()))
    prompts = [[1] * 5, list(range(1, 61)) + list(range(1, 31)), [2] * 20, PROMPTS[0], PROMPTS[1]]
    params = [
        SamplingParams(max_tokens=n, seed=4 + n, return_routed_experts=True, stop_token_ids=[3])
        for n in (30, 25, 35, 9, 20)
    ]
    if processed:
        params[2] = params[2].model_copy(update={"top_k": 5, "temperature": 0.8})
    results = {}
    for traced in (False, True):
        engine = GenerationEngine(policy, max_batch_size=4, traced_decode=traced)
        futures = [engine.submit([p], [q]) for p, q in zip(prompts, params)]
        results[traced] = [f.result()[0] for f in futures]
        decoder = engine._batcher.graphs
        if traced:
            assert decoder.trace and decoder.failed is None and decoder.replays > 10
            assert any(sampled for _, _, sampled in decoder.traces)  # some steps had plain rows only
            assert not all(sampled for _, _, sampled in decoder.traces) if processed else decoder.sampled > 10
        else:
            assert decoder is None
        engine.close()
    for a, b in zip(results[True], results[False], strict=True):
        same_completion(a, b)
        assert a.routed_experts == b.routed_experts


def test_the_traces_kept_are_bounded_the_least_recently_used_dropped() -> None:
    """With room for two traces, steps over three buckets keep the two used last (one reused is kept over one
    made after it) and still sample what an engine without traces samples."""
    policy = CausalLMPolicy(_inference(small_model()))
    engine = GenerationEngine(policy, max_batch_size=4, traced_decode=True)
    decoder = engine._batcher.graphs
    decoder.max_traces = 2
    short, long = [1 + i % 50 for i in range(10)], [1 + i % 50 for i in range(70)]  # windows of 64, 128 columns
    plain, processed = SamplingParams(max_tokens=4, seed=1), SamplingParams(max_tokens=4, seed=2, top_k=5)
    calls = [(short, plain), (long, plain), (short, processed), (long, plain)]
    got = [engine.generate_batch([prompt], [params])[0] for prompt, params in calls]
    # (4, 64, True) dropped when (4, 64, False) was made; (4, 128, True) reused last: the most recent (4 slots)
    assert list(decoder.traces) == [(4, 64, False), (4, 128, True)] and decoder.traces_dropped == 1
    engine.close()
    for (prompt, params), completion in zip(calls, got):  # one call each: a prompt's seed is seed + its index
        _as_without_traces(policy, [prompt], [params], [completion], slots=4)


def test_traces_read_the_weights_in_place() -> None:
    """A weight update after the traces were made is seen by them (they hold the parameters, not copies)."""
    policy = CausalLMPolicy(_inference(small_model()))
    params = [SamplingParams(max_tokens=n, seed=n) for n in (12, 7, 16)]
    engine = GenerationEngine(policy, max_batch_size=4, traced_decode=True)
    before = engine.generate_batch(PROMPTS, params)
    traces = len(engine._batcher.graphs.traces)
    new = _inference(small_model(seed=5)).state_dict()
    engine.load_state_dict(new, version=3)
    after = engine.generate_batch(PROMPTS, params)
    assert len(engine._batcher.graphs.traces) == traces  # the same buckets, the same traces
    engine.close()
    fresh = GenerationEngine(CausalLMPolicy(_inference(small_model(seed=5))), max_batch_size=4)
    for a, b in zip(after, fresh.generate_batch(PROMPTS, params), strict=True):
        same_completion(a, b)
        assert a.weights_version == 3
    assert any(a.token_ids != b.token_ids for a, b in zip(after, before))
    fresh.close()


def test_a_step_that_cannot_be_traced_falls_back_to_the_lean_step(caplog) -> None:
    """Weights that require grad cannot be held by a trace: logged once, then the dynamic lean step decodes."""
    policy = CausalLMPolicy(small_model())  # parameters require grad
    params = [SamplingParams(max_tokens=n, seed=n, return_routed_experts=True) for n in (12, 7, 16)]
    engine = GenerationEngine(policy, max_batch_size=4, traced_decode=True)
    with caplog.at_level("WARNING", logger="policies.cuda_graphs"):
        got = engine.generate_batch(PROMPTS, params)
    decoder = engine._batcher.graphs
    assert decoder.failed and "requires grad" in decoder.failed and decoder.replays == 0 and not decoder.traces
    assert caplog.text.count("tracing the decode step failed") == 1
    engine.close()
    _as_without_traces(policy, PROMPTS, params, got, slots=4)


def test_serve_configs_trace_on_the_cpu_unless_told_not_to() -> None:
    def engine(**options):
        config = ServeConfig.model_validate({"policy": {"type": "rdep_moe", "model": MODEL}, "engine": options})
        return build_engine(config)

    default, off = engine(), engine(traced_decode=False)
    assert default._batcher.graphs.trace and off._batcher.graphs is None
    assert not any(p.requires_grad for p in default.policy.model.parameters())  # served weights hold no grad
    out = default.generate_batch([[1, 2, 3]], [SamplingParams(max_tokens=5, seed=1)])
    same_completion(out[0], off.generate_batch([[1, 2, 3]], [SamplingParams(max_tokens=5, seed=1)])[0])
    assert default._batcher.graphs.replays == 4 and default._batcher.graphs.failed is None
    default.close()
    off.close()


def test_a_step_that_groups_rows_by_expert_is_not_traced() -> None:
    """With 256 experts a step of 8 rows groups rows by the experts they chose (counts read on the host): such a
    bucket is never traced (a trace would replay the first step's counts) and runs eagerly; the engine samples
    what it samples without traces."""
    policy = CausalLMPolicy(_inference(small_model(num_experts=256)))
    prompts = NINE_PROMPTS
    params = [SamplingParams(max_tokens=12 + i, seed=i, return_routed_experts=True) for i in range(len(prompts))]
    engine = GenerationEngine(policy, max_batch_size=16, traced_decode=True)
    got = engine.generate_batch(prompts, params)
    decoder = engine._batcher.graphs
    assert decoder.failed is None and 16 in decoder.untraceable and all(rows < 8 for rows, _, _ in decoder.traces)
    engine.close()
    _as_without_traces(policy, prompts, params, got, slots=16)


def test_a_trace_that_would_read_tensor_values_on_the_host_is_refused(monkeypatch, caplog) -> None:
    """Were the grouped path traced (`_traceable` and the decoder's override defeated), its host read of the expert
    counts would be baked in: the tracer's warning refuses the trace and the engine decodes without traces,
    sampling what it samples without them."""
    monkeypatch.setattr(GraphDecoder, "_traceable", lambda self, rows: True)
    moe = decode._moe
    monkeypatch.setattr(decode, "_moe", lambda block, x, all_experts=None: moe(block, x, None))
    policy = CausalLMPolicy(_inference(small_model(num_experts=256)))
    prompts = NINE_PROMPTS
    params = [SamplingParams(max_tokens=10, seed=i) for i in range(len(prompts))]
    engine = GenerationEngine(policy, max_batch_size=16, traced_decode=True)
    with caplog.at_level("WARNING", logger="policies.cuda_graphs"):
        got = engine.generate_batch(prompts, params)
    decoder = engine._batcher.graphs
    assert decoder.failed and "reads a tensor on the host" in decoder.failed and "list" in decoder.failed
    engine.close()
    _as_without_traces(policy, prompts, params, got, slots=16, routes=False)
