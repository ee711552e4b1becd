"""Partial rollouts in the generation engine: a weight update lands between two decode steps of a completion in
flight, which goes on under the new weights, and every token reports the version that sampled it.

Continuous mode: the update is scheduled while a long row decodes (``wait_for_tokens``). Batch modes: it is queued
from inside the 4th model step (a wrapped ``policy.step``), so the swap position is exact. Without partial rollouts
the same update waits for the row (the control)."""

from __future__ import annotations

import threading

import pytest

from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import SamplingParams
from tests.policy_support import full_logprobs, small_model, wait_for_tokens

PROMPT = [1, 2, 3, 4, 5]
LONG = SamplingParams(max_tokens=300, seed=11)  # no stop token: every row runs its whole budget


def engine_of(**options) -> GenerationEngine:
    return GenerationEngine(CausalLMPolicy(small_model(max_position_embeddings=512)), **options)


def other_weights() -> dict:
    return small_model(seed=3, max_position_embeddings=512).state_dict()


def test_continuous_update_lands_mid_completion_and_each_token_reports_its_version() -> None:
    engine = engine_of(partial_rollouts=True)
    assert engine.continuous
    alone = engine.generate_batch([PROMPT], [LONG])[0]  # the same row with no update
    assert alone.token_versions == [0] * 300
    future = engine.submit([PROMPT], [LONG])
    wait_for_tokens(engine, 5)
    loaded = engine.schedule_load(other_weights(), version=1)
    swapped = future.result()[0]
    engine.close()
    assert loaded.result() == 1
    k = swapped.token_versions.index(1)
    assert 5 <= k < 300 and swapped.token_versions == [0] * k + [1] * (300 - k), swapped.token_versions
    assert swapped.weights_version == 0  # the completion's first token
    assert swapped.token_ids[:k] == alone.token_ids[:k]  # the same seed and weights up to the swap
    assert swapped.token_ids[k:] != alone.token_ids[k:]  # the new weights sampled the rest


def test_without_partial_rollouts_the_update_waits_for_the_row() -> None:
    engine = engine_of()
    future = engine.submit([PROMPT], [LONG])
    wait_for_tokens(engine, 5)
    loaded = engine.schedule_load(other_weights(), version=1)
    whole = future.result()[0]
    assert whole.token_versions == [0] * 300 and loaded.result() == 1
    assert engine.generate_batch([PROMPT], [LONG])[0].token_versions == [1] * 300  # rows after it: new weights
    engine.close()


@pytest.mark.parametrize("mode", ["kv_cache", "recompute"])
def test_batch_modes_swap_after_the_step_the_update_arrived_in(mode: str) -> None:
    """The update is queued during the 4th model step: tokens 1-4 come from version 0, 5-10 from version 1. Tokens
    1-4 are what the old weights give; after the swap recompute gives exactly what the new weights give for the whole
    sequence, while kv_cache keeps the keys and values it cached under the old weights (the documented choice), so
    its later logprobs are neither model's full forward."""
    engine = engine_of(mode=mode, partial_rollouts=True)
    old = CausalLMPolicy(small_model(max_position_embeddings=512))
    new_state = other_weights()
    step, calls = engine.policy.step, []

    def counting(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            engine.schedule_load(new_state, version=1)
        return step(*args, **kwargs)

    engine.policy.step = counting
    out = engine.generate_batch([PROMPT], [SamplingParams(max_tokens=10, seed=11)])[0]
    assert out.token_versions == [0] * 4 + [1] * 6 and engine.weights_version == 1
    new = CausalLMPolicy(small_model(max_position_embeddings=512))
    new.model.load_state_dict(new_state)
    raw = out.raw_logprobs
    before = full_logprobs(old, PROMPT, out.token_ids)
    after = full_logprobs(new, PROMPT, out.token_ids)
    # measured max |diff| ~5e-7 between the engine's steps and a full forward (test_policy_engine); margin 20x
    assert max(abs(raw[i] - float(before[i])) for i in range(4)) < 1e-5
    gap_new = max(abs(raw[i] - float(after[i])) for i in range(4, 10))
    if mode == "recompute":
        assert gap_new < 1e-5
    else:
        assert gap_new > 1e-2 and max(abs(raw[i] - float(before[i])) for i in range(4, 10)) > 1e-2


def test_batch_mode_load_state_dict_returns_after_one_step_not_after_the_batch() -> None:
    engine = engine_of(mode="kv_cache", partial_rollouts=True)
    step, started, results = engine.policy.step, threading.Event(), []

    def signalling(*args, **kwargs):
        started.set()
        return step(*args, **kwargs)

    engine.policy.step = signalling
    worker = threading.Thread(target=lambda: results.append(engine.generate_batch([PROMPT], [LONG])[0]))
    worker.start()
    started.wait(30)
    assert engine.load_state_dict(other_weights(), version=1) == 1
    batch_running = worker.is_alive()
    worker.join(60)
    versions = results[0].token_versions
    assert batch_running and 0 < versions.count(0) < 300 and versions[-1] == 1
    assert engine.load_state_dict(small_model(max_position_embeddings=512).state_dict()) == 2  # idle: applied at once


def test_batch_mode_without_partial_rollouts_has_no_schedule_load() -> None:
    with pytest.raises(RuntimeError, match="continuous mode or partial rollouts"):
        engine_of(mode="kv_cache").schedule_load(other_weights())
