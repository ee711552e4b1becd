"""Decode lanes (`ContinuousBatcher(lanes=L)`): the running rows split into L slot ranges stepped and sampled at
once on L threads give every row the tokens and routes one step of all of them gives (float32; logprobs to float
rounding, 1e-5), and a lane's failure is the step's failure, after which the engine serves on."""

from __future__ import annotations

import time

import pytest
import torch

from policies import decode
from policies.continuous import LANE_ROWS, ContinuousBatcher
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import EngineError, SamplingParams
from policies.serve_config import EngineOptions
from tests.policy_support import small_model


def stream() -> tuple[list[list[int]], list[SamplingParams]]:
    """24 prompts in groups of 3 sharing a prompt (lengths 3-24), budgets 6-40, a stop id, routes asked by half."""
    generator = torch.Generator().manual_seed(0)
    prompts, params = [], []
    for group in range(8):
        prompt = torch.randint(4, 60, (3 + 3 * group,), generator=generator).tolist()
        for member in range(3):
            prompts.append(prompt)
            params.append(
                SamplingParams(
                    max_tokens=6 + (5 * group + 7 * member) % 35,
                    seed=10 * group + member,
                    stop_token_ids=[3],
                    return_routed_experts=member != 1,
                )
            )
    return prompts, params


@pytest.mark.parametrize("lanes", [2, 3])
def test_lanes_sample_what_one_step_of_every_row_samples(lanes: int) -> None:
    policy = CausalLMPolicy(small_model())
    prompts, params = stream()
    one = GenerationEngine(policy, max_batch_size=24).generate_batch(prompts, params)
    engine = GenerationEngine(policy, max_batch_size=24, lanes=lanes)
    split = engine.generate_batch(prompts, params)
    assert engine._batcher.lane_steps > 5  # the stream's steps ran in lanes (>= LANE_ROWS rows per lane)
    for a, b in zip(one, split, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        # a matmul's rows round by how many rows it has: logprobs agree to float rounding, not bit for bit
        assert max(abs(x - y) for x, y in zip(a.logprobs + a.raw_logprobs, b.logprobs + b.raw_logprobs)) < 1e-5
        assert a.routed_experts == b.routed_experts


def test_a_failing_lane_fails_the_step_and_the_engine_serves_on(monkeypatch) -> None:
    policy = CausalLMPolicy(small_model())
    prompts, params = stream()
    engine = GenerationEngine(policy, max_batch_size=24, lanes=2)
    step = decode.LeanDecoder.step

    def second_lane_fails(self, fed, positions, cache, first=0):
        if first > 0:
            raise RuntimeError("lane fault")
        return step(self, fed, positions, cache, first)

    monkeypatch.setattr(decode.LeanDecoder, "step", second_lane_fails)
    with pytest.raises(EngineError, match="lane fault"):
        engine.generate_batch(prompts, params)
    assert engine._batcher.running == [] and engine._batcher.cache.n == 0
    monkeypatch.setattr(decode.LeanDecoder, "step", step)
    again = engine.generate_batch(prompts, params)
    alone = GenerationEngine(policy, max_batch_size=24).generate_batch(prompts, params)
    assert [c.token_ids for c in again] == [c.token_ids for c in alone]


def test_a_step_whose_first_lane_fails_ends_after_its_other_lanes(monkeypatch) -> None:
    """The engine resets the cache after a failed step: no other lane may still be writing into it then."""
    policy = CausalLMPolicy(small_model())
    prompts, params = stream()
    engine = GenerationEngine(policy, max_batch_size=24, lanes=2)
    step, ended = decode.LeanDecoder.step, []

    def first_lane_fails(self, fed, positions, cache, first=0):
        if first == 0:
            raise RuntimeError("lane fault")
        time.sleep(0.5)
        out = step(self, fed, positions, cache, first)
        ended.append(first)
        return out

    monkeypatch.setattr(decode.LeanDecoder, "step", first_lane_fails)
    with pytest.raises(EngineError, match="lane fault"):
        engine.generate_batch(prompts, params)
    assert ended  # the other lane finished before the step's failure was reported


def test_few_rows_step_without_lanes() -> None:
    policy = CausalLMPolicy(small_model())
    engine = GenerationEngine(policy, max_batch_size=8, lanes=2)
    prompts = [[5, 6, 7]] * (LANE_ROWS * 2 - 1)
    engine.generate_batch(prompts, [SamplingParams(max_tokens=5, seed=s) for s in range(len(prompts))])
    assert engine._batcher.lane_steps == 0


def test_lanes_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="lanes"):
        ContinuousBatcher(CausalLMPolicy(small_model()), slots=4, lanes=0)
    with pytest.raises(ValueError):
        EngineOptions(lanes=0)
