"""The generation engine: KV cache vs recompute, stops, logprobs, routes for replay, weight versions."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest
import torch
from safetensors.torch import save

from policies.fake_engine import ScriptedEngine
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import Completion, EngineError, RolloutEngine, SamplingParams, per_prompt
from tests.policy_support import PROMPTS, full_logprobs, same_completion, small_model


@pytest.fixture(scope="module")
def policy() -> CausalLMPolicy:
    return CausalLMPolicy(small_model())


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=12, temperature=0.0),
        SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, top_k=20, seed=4),
    ],
)
def test_kv_cache_equals_full_recompute(policy, params) -> None:
    kv = GenerationEngine(policy).generate_batch(PROMPTS, [params] * 3)
    full = GenerationEngine(policy, mode="recompute").generate_batch(PROMPTS, [params] * 3)
    for a, b in zip(kv, full):
        assert a.token_ids == b.token_ids
        # measured max |diff| ~5e-7; margin 20x
        assert max(abs(x - y) for x, y in zip(a.raw_logprobs, b.raw_logprobs)) < 1e-5
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5


def test_raw_and_sampling_logprobs(policy) -> None:
    params = SamplingParams(max_tokens=10, temperature=0.7, seed=1)
    for prompt, c in zip(PROMPTS, GenerationEngine(policy).generate_batch(PROMPTS, [params] * 3)):
        raw = full_logprobs(policy, prompt, c.token_ids)
        # measured max |diff| 4.8e-7 over default/avx2/avx512 kernels (here and below): margin 20x
        assert torch.allclose(torch.tensor(c.raw_logprobs), raw, atol=1e-5)
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logits = policy.model(ids).logits[0, len(prompt) - 1 : -1] / 0.7
        scaled = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(c.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(c.logprobs), scaled, atol=1e-5)
        assert not torch.allclose(torch.tensor(c.logprobs), raw, atol=1e-3)  # the two fields differ


def test_routes_replay_reproduces_the_rollout_logprobs(policy) -> None:
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=2, return_routed_experts=True)
    for prompt, c in zip(PROMPTS, GenerationEngine(policy).generate_batch(PROMPTS, [params] * 3)):
        routes = torch.tensor(c.routed_experts.array)
        assert routes.shape == (2, len(prompt) + len(c.token_ids), 2)  # (moe layers, P + N, K)
        assert (routes[:, -1] == -1).all() and (routes[:, :-1] >= 0).all()
        with torch.no_grad():
            free = policy.model(torch.tensor([prompt + c.token_ids])).routed_experts[:, 0]
        assert torch.equal(routes[:, :-1], free[:, :-1])  # the routes the rollout actually used
        replayed = full_logprobs(policy, prompt, c.token_ids, routes=c.routed_experts)
        # measured max |diff| 4.8e-7 over default/avx2/avx512 kernels: margin 20x
        assert torch.allclose(torch.tensor(c.raw_logprobs), replayed, atol=1e-5)
    plain = GenerationEngine(policy).generate_batch(PROMPTS[:1], [SamplingParams(max_tokens=3)])
    assert plain[0].routed_experts is None  # only when asked


def test_stop_tokens_and_max_tokens(policy) -> None:
    engine = GenerationEngine(policy)
    greedy = engine.generate_batch(PROMPTS, [SamplingParams(max_tokens=6, temperature=0.0)] * 3)
    assert all(c.finish_reason == "length" and len(c.token_ids) == 6 for c in greedy)
    stop = greedy[0].token_ids[2]
    first = greedy[0].token_ids.index(stop)
    stopped = engine.generate_batch(PROMPTS, [SamplingParams(max_tokens=6, temperature=0.0, stop_token_ids=[stop])] * 3)
    assert stopped[0].finish_reason == "stop"
    assert stopped[0].token_ids == greedy[0].token_ids[: first + 1]  # the stop token is kept
    for long, short in zip(greedy[1:], stopped[1:]):  # other rows go on unaffected unless they hit it
        expected = long.token_ids[: long.token_ids.index(stop) + 1] if stop in long.token_ids else long.token_ids
        assert short.token_ids == expected


def test_a_rows_watch_sees_each_token_as_sampled_and_may_end_the_row(policy) -> None:
    """The continuous engine hands each sampled token to its row's watch on the worker (a server's stop strings and
    streams): a watch that says stop at the third token ends that row there, its neighbours go on."""
    engine = GenerationEngine(policy)
    params = [SamplingParams(max_tokens=8, temperature=0.0)] * 3
    greedy = engine.generate_batch(PROMPTS, params)
    seen: list[tuple[int, float]] = []

    def watch(token: int, logprob: float) -> bool:
        seen.append((token, logprob))
        return len(seen) == 3

    def broken(token: int, logprob: float) -> bool:
        raise RuntimeError("a watch that fails")

    out = engine.submit(PROMPTS, params, [watch, None, broken]).result(timeout=60)
    assert out[0].token_ids == greedy[0].token_ids[:3] and out[0].finish_reason == "stop"
    assert seen == list(zip(greedy[0].token_ids[:3], greedy[0].logprobs[:3]))
    assert [c.token_ids for c in out[1:]] == [c.token_ids for c in greedy[1:]]  # a failing watch fails nothing
    assert engine.watches_tokens and not GenerationEngine(policy, mode="kv_cache").watches_tokens
    engine.close()


def test_per_row_budgets_in_one_batch(policy) -> None:
    params = [SamplingParams(max_tokens=n, temperature=0.0) for n in (1, 4, 9)]
    out = GenerationEngine(policy).generate_batch(PROMPTS, params)
    assert [len(c.token_ids) for c in out] == [1, 4, 9]


def test_seeded_sampling_is_reproducible_and_batch_independent(policy) -> None:
    engine = GenerationEngine(policy)
    params = SamplingParams(max_tokens=8, seed=11)
    batch = engine.generate_batch(PROMPTS, [params] * 3)
    assert [c.token_ids for c in engine.generate_batch(PROMPTS, [params] * 3)] == [c.token_ids for c in batch]
    alone = engine.generate_batch(PROMPTS[:1], [params])
    assert alone[0].token_ids == batch[0].token_ids
    other_seed = engine.generate_batch(PROMPTS, [params.model_copy(update={"seed": 12})] * 3)
    assert [c.token_ids for c in other_seed] != [c.token_ids for c in batch]


@pytest.mark.parametrize("mode", ["continuous", "kv_cache"])
def test_a_row_samples_with_its_own_seed_wherever_it_sits_in_a_call(policy, mode) -> None:
    """generate_batch seeds each row with its params' seed, not with seed + its index: a row sampled alone, or
    behind other rows (a server merging requests, a batching trainer), samples the same; `generate` gives the
    prompts of one params object seed, seed + 1, ... (`per_prompt`)."""
    engine = GenerationEngine(policy, mode=mode)
    params = SamplingParams(max_tokens=8, seed=21)
    alone = engine.generate_batch(PROMPTS[2:], [params])[0]
    behind = engine.generate_batch(PROMPTS, [params.model_copy(update={"seed": s}) for s in (3, 4, 21)])[2]
    # logprobs: measured max |diff| 4.8e-7 over default/avx2/avx512 kernels: margin 20x
    assert behind.token_ids == alone.token_ids and behind.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    seeded = asyncio.run(engine.generate(PROMPTS, params))
    for i, completion in enumerate(seeded):
        own = engine.generate_batch(PROMPTS[i : i + 1], [params.model_copy(update={"seed": 21 + i})])[0]
        assert completion.token_ids == own.token_ids
    assert per_prompt(params.model_copy(update={"seed": None}), 2) == [params.model_copy(update={"seed": None})] * 2
    engine.close()


def test_bad_requests_name_the_problem(policy) -> None:
    engine = GenerationEngine(policy)
    with pytest.raises(EngineError, match="exceeds the context of 128"):
        engine.generate_batch([[1] * 120], [SamplingParams(max_tokens=16)])
    with pytest.raises(EngineError, match="outside the vocabulary"):
        engine.generate_batch([[1, 64]], [SamplingParams(max_tokens=4)])
    with pytest.raises(EngineError, match="empty"):
        engine.generate_batch([[]], [SamplingParams(max_tokens=4)])


@pytest.mark.parametrize("mode", ["continuous", "kv_cache"])
def test_non_finite_weights_are_refused_and_change_nothing(mode) -> None:
    engine = GenerationEngine(CausalLMPolicy(small_model()), mode=mode)
    greedy = [SamplingParams(max_tokens=5, temperature=0.0)]
    before = engine.generate_batch(PROMPTS[:1], greedy)[0]
    state = {k: v.clone() for k, v in engine.policy.model.state_dict().items()}
    state["lm_head.weight"][0, 0] = float("nan")
    with pytest.raises(ValueError, match="lm_head.weight: 1 NaN or infinite value"):
        engine.load_state_dict(state, version=7)
    after = engine.generate_batch(PROMPTS[:1], greedy)[0]
    assert after.token_ids == before.token_ids and after.weights_version == 0
    assert all(torch.isfinite(t).all() for t in engine.policy.model.state_dict().values())
    engine.close()


def test_weight_updates_bump_the_reported_version(policy) -> None:
    engine = GenerationEngine(CausalLMPolicy(small_model()))
    params = SamplingParams(max_tokens=5, temperature=0.0)
    before = engine.generate_batch(PROMPTS[:1], [params])[0]
    assert before.weights_version == 0
    other = small_model(seed=3).state_dict()
    assert engine.load_safetensors(save({k: v.contiguous() for k, v in other.items()})) == 1
    after = engine.generate_batch(PROMPTS[:1], [params])[0]
    assert after.weights_version == 1 and after.token_ids != before.token_ids
    assert engine.load_state_dict({"lm_head.weight": other["lm_head.weight"]}, version=7) == 7  # partial update
    with pytest.raises(KeyError, match="does not have"):
        engine.load_state_dict({"nope.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        engine.load_state_dict({"lm_head.weight": torch.zeros(3, 3)})


def test_async_generate_is_a_rollout_engine(policy) -> None:
    for engine in (GenerationEngine(policy), ScriptedEngine(vocab_size=64)):
        assert isinstance(engine, RolloutEngine)
        out = asyncio.run(engine.generate(PROMPTS, SamplingParams(max_tokens=3, seed=0)))
        assert [len(c.token_ids) for c in out] == [3, 3, 3]


def test_scripted_engine_is_deterministic() -> None:
    engine = ScriptedEngine(script=[5, 6, 7], vocab_size=64)
    out = engine.generate_batch([[1, 2]], [SamplingParams(max_tokens=5, stop_token_ids=[5])])
    assert out[0].token_ids == [7, 5] and out[0].finish_reason == "stop"
    assert (
        engine.load_safetensors(b"") == 1
        and engine.generate_batch([[1]], [SamplingParams(max_tokens=1)])[0].weights_version == 1
    )


def test_continuous_batching_equals_the_batch_path_routes_included(policy) -> None:
    params = [SamplingParams(max_tokens=n, seed=5, return_routed_experts=True, stop_token_ids=[3]) for n in (9, 2, 6)]
    continuous = GenerationEngine(policy)
    assert continuous.mode == "continuous" and continuous.continuous
    for a, b in zip(
        continuous.generate_batch(PROMPTS, params),
        GenerationEngine(policy, mode="kv_cache").generate_batch(PROMPTS, params),
    ):
        same_completion(a, b)
        assert a.routed_experts == b.routed_experts
        # built without a second validation: what the engine hands out validates as it is
        assert Completion.model_validate(a.model_dump()) == a
        assert all(type(x) is int for x in a.token_ids) and all(type(x) is float for x in a.logprobs)
        # routes stay one array (not ~100,000 nested lists a GRPO step); the wire carries lists
        assert a.routed_experts.array.dtype == np.int16 and not a.routed_experts.array.flags.writeable
        assert a.model_dump()["routed_experts"] == a.routed_experts.array.tolist()


def test_rows_join_a_running_batch_and_leave_it_when_they_stop(policy) -> None:
    engine = GenerationEngine(policy, max_batch_size=4)
    order: list[str] = []
    long = engine.submit([PROMPTS[0]], [SamplingParams(max_tokens=60, seed=1)])
    long.add_done_callback(lambda _: order.append("long"))
    short = engine.submit(PROMPTS[1:], [SamplingParams(max_tokens=3, seed=2)] * 2)
    short.add_done_callback(lambda _: order.append("short"))
    # more rows than slots: they wait for a free slot, then run
    many = engine.submit([PROMPTS[2]] * 6, [SamplingParams(max_tokens=4, seed=3)] * 6)
    results = long.result(), short.result(), many.result()
    assert order[0] == "short"  # a 3-token row did not wait for the 60-token one
    alone = GenerationEngine(policy, mode="kv_cache")
    expected = (
        alone.generate_batch([PROMPTS[0]], [SamplingParams(max_tokens=60, seed=1)]),
        alone.generate_batch(PROMPTS[1:], [SamplingParams(max_tokens=3, seed=2)] * 2),
        alone.generate_batch([PROMPTS[2]] * 6, [SamplingParams(max_tokens=4, seed=3)] * 6),
    )
    for got, want in zip(results, expected):
        for a, b in zip(got, want, strict=True):
            same_completion(a, b)


def test_identical_prompts_are_prefilled_once(policy) -> None:
    engine = GenerationEngine(policy)
    group = engine.generate_batch([PROMPTS[0]] * 8, per_prompt(SamplingParams(max_tokens=5, seed=9), 8))
    assert engine._batcher.prefills == 1 and engine._batcher.admitted == 8
    assert len({tuple(c.token_ids) for c in group}) > 1  # 8 seeds, one prefill, different samples


def test_the_live_window_moves_for_long_prompts_and_at_the_capacity(policy) -> None:
    """A 100-token prompt joins a row that has 5 (the window moves right), and rows keep running past the
    128-column capacity (it moves back left); every row still samples what it samples alone."""
    engine = GenerationEngine(policy, max_batch_size=4)
    prompts = [[1] * 5, list(range(1, 61)) + list(range(1, 41)), [2] * 20]
    params = [SamplingParams(max_tokens=n, seed=4) for n in (120, 25, 100)]
    futures = [engine.submit([p], [q]) for p, q in zip(prompts, params)]
    got = [f.result()[0] for f in futures]
    assert engine._batcher.cache.moves >= 2
    alone = GenerationEngine(policy, mode="kv_cache")
    for p, q, a in zip(prompts, params, got):
        same_completion(a, alone.generate_batch([p], [q])[0])


def test_a_weight_update_waits_for_running_rows(policy) -> None:
    engine = GenerationEngine(CausalLMPolicy(small_model()))
    running = engine.submit([PROMPTS[0]], [SamplingParams(max_tokens=40, temperature=0.0)])
    while not engine._batcher.admitted:  # the row runs before the update is asked for
        time.sleep(0.001)
    with ThreadPoolExecutor(1) as pool:
        update = pool.submit(engine.load_state_dict, small_model(seed=3).state_dict())
        assert update.result() == 1
    after = engine.generate_batch([PROMPTS[0]], [SamplingParams(max_tokens=40, temperature=0.0)])[0]
    before = running.result()[0]
    assert before.weights_version == 0 and after.weights_version == 1 and before.token_ids != after.token_ids
    # the row that ran across the update call used the old weights only
    old = GenerationEngine(CausalLMPolicy(small_model()), mode="kv_cache")
    same_completion(before, old.generate_batch([PROMPTS[0]], [SamplingParams(max_tokens=40, temperature=0.0)])[0])


def test_continuous_needs_our_policy() -> None:
    class Other:
        is_moe = False

    with pytest.raises(ValueError, match="RDEP MoE"):
        GenerationEngine(Other(), mode="continuous")


def test_a_dropped_or_closed_engine_stops_its_worker(policy) -> None:
    import gc

    engine = GenerationEngine(policy)
    thread = engine._batcher.thread
    engine.generate_batch(PROMPTS[:1], [SamplingParams(max_tokens=2, seed=0)])
    del engine
    for _ in range(50):  # the worker drops its reference within a second of idling; then a collection frees it
        gc.collect()
        thread.join(timeout=0.2)
        if not thread.is_alive():
            break
    assert not thread.is_alive()
    closed = GenerationEngine(policy)
    closed._batcher.close()
    assert not closed._batcher.thread.is_alive()
    with pytest.raises(EngineError, match="closed"):
        closed.generate_batch(PROMPTS[:1], [SamplingParams(max_tokens=2, seed=0)])


def test_a_cancelled_future_stops_its_rows_and_frees_their_slots(policy) -> None:
    """A caller that cancels its future (a client that went away) stops its running rows at the next step and
    its waiting rows never start; the rows behind them run at once, and sample what they would have."""
    engine = GenerationEngine(policy, max_batch_size=1)
    batcher = engine._batcher
    long = engine.submit(PROMPTS[:1], [SamplingParams(max_tokens=120, seed=1)])
    queued = engine.submit(PROMPTS[1:2], [SamplingParams(max_tokens=5, seed=2)])
    never = engine.submit(PROMPTS[2:3], [SamplingParams(max_tokens=5, seed=3)])
    deadline = time.monotonic() + 60
    while not (batcher.running and batcher.running[0].tokens) and time.monotonic() < deadline:
        time.sleep(0.001)
    with batcher.condition:  # the worker waits here before its next step: at most one more token
        row = batcher.running[0]
        at_cancel = len(row.tokens)
        assert long.cancel() and never.cancel()
    assert queued.result(timeout=60)[0].token_ids
    assert len(row.tokens) <= at_cancel + 1 < 120 and batcher.running == []
    assert engine.stats()["cancelled"] == 2 and engine.stats()["admitted"] == 2  # `never` was not admitted
    alone = GenerationEngine(policy).generate_batch(PROMPTS[1:2], [SamplingParams(max_tokens=5, seed=2)])[0]
    same_completion(queued.result()[0], alone)
    engine.close()


def test_a_cancelled_chunked_prefill_stops_at_its_next_chunk(policy) -> None:
    engine = GenerationEngine(policy, prefill_chunk=1)
    batcher = engine._batcher
    long = engine.submit([[1 + i % 60 for i in range(80)]], [SamplingParams(max_tokens=4, seed=1)])  # 80 chunks
    deadline = time.monotonic() + 60
    while not (batcher.prefilling and batcher.prefilling.done) and time.monotonic() < deadline:
        time.sleep(0.001)
    with batcher.condition:  # the worker waits here before its next step
        prefill = batcher.prefilling
        assert long.cancel()
    after = engine.generate_batch(PROMPTS[:1], [SamplingParams(max_tokens=2, seed=2)])
    assert after[0].token_ids and prefill.done < 80 and engine.stats()["cancelled"] == 1
    engine.close()


def test_a_cancel_racing_the_answer_fails_no_other_row(policy, monkeypatch) -> None:
    """A caller's cancel can land between the worker's check and its `set_result` (the caller's thread): the
    answer is dropped and the other rows of the step go on (it raised InvalidStateError, which failed every
    running row as the model's fault; an outside review)."""
    from policies import continuous

    engine = GenerationEngine(policy, max_batch_size=2)
    first = engine.submit(PROMPTS[:1], [SamplingParams(max_tokens=3, seed=1)])
    second = engine.submit(PROMPTS[1:2], [SamplingParams(max_tokens=12, seed=2)])
    completion = continuous.ContinuousBatcher._completion

    def cancelled_meanwhile(row):
        if row.job.future is first:
            first.cancel()  # the race, made certain: the caller cancels as the worker answers
        return completion(row)

    monkeypatch.setattr(continuous.ContinuousBatcher, "_completion", staticmethod(cancelled_meanwhile))
    assert len(second.result(timeout=60)[0].token_ids) == 12 and first.cancelled()
    assert engine.generate_batch(PROMPTS[:1], [SamplingParams(max_tokens=2, seed=3)])[0].token_ids
    engine.close()
    for settle in (continuous.resolve, continuous.reject):  # on a cancelled future: nothing, no raise
        future = Future()
        future.cancel()
        settle(future, ValueError("late"))
        assert future.cancelled()


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_a_chunked_prefill_samples_what_the_whole_prefill_samples_routes_included(policy, chunk) -> None:
    prompts = [list(range(1, 41)), [7, 8], [9, 10, 11, 12], list(range(1, 41))]  # a shared prompt, mixed lengths
    params = [SamplingParams(max_tokens=n, seed=5 + n, return_routed_experts=True) for n in (9, 20, 6, 9)]
    chunked = GenerationEngine(policy, prefill_chunk=chunk)
    got = chunked.generate_batch(prompts, params)
    assert chunked._batcher.prefills == 3  # the shared prompt still prefilled once
    assert max(columns for columns, _ in chunked._batcher.steps) == min(chunk, 40)
    for a, b in zip(got, GenerationEngine(policy, mode="kv_cache").generate_batch(prompts, params), strict=True):
        same_completion(a, b)
        assert a.routed_experts == b.routed_experts


def test_a_long_prompt_prefilled_in_chunks_does_not_stall_the_running_rows(policy) -> None:
    """While a 100-token prompt is prefilled 8 columns a step, the running row decodes a token every step; without
    chunks the same prompt is prefilled in one step (what the chunks are for)."""
    for chunk, most in ((8, 8), (None, 100)):
        engine = GenerationEngine(policy, max_batch_size=4, prefill_chunk=chunk)
        running = engine.submit([PROMPTS[0]], [SamplingParams(max_tokens=80, seed=1)])
        while not engine._batcher.steps:  # the short row runs before the long prompt arrives
            time.sleep(0.001)
        prompt = [1 + i % 60 for i in range(100)]
        long = engine.submit([prompt], [SamplingParams(max_tokens=4, seed=2)])
        alone = GenerationEngine(policy, mode="kv_cache")
        same_completion(long.result()[0], alone.generate_batch([prompt], [SamplingParams(max_tokens=4, seed=2)])[0])
        same_completion(
            running.result()[0], alone.generate_batch([PROMPTS[0]], [SamplingParams(max_tokens=80, seed=1)])[0]
        )
        steps = list(engine._batcher.steps)
        prefilling = [decoded for columns, decoded in steps if columns and decoded]
        assert max(columns for columns, _ in steps[1:]) == most, steps
        if chunk:  # 100 columns in 13 steps, each one a decode step of the running row beside it
            assert sum(1 for columns, _ in steps[1:] if columns) == 13 and len(prefilling) >= 13, steps
