"""Partial rollouts end to end on the CPU: a weight update lands mid-episode, between two decode steps of a turn,
and the trainer measures staleness and weighs the loss per token, each with its own behaviour logprob.

The episode is the real episode loop (tests/fakes.py's environment, in-memory workspace and fake grader) over the
trainer's in-process engine (`BatchingEngine` over a continuous `GenerationEngine`, ``partial_rollouts`` on) and a
small random RDEP MoE of the environment's vocabulary; its turns do not parse (a random policy), which the
episode records and goes on from. The trainer side is `select_group`, `collate` and `update.micro_batch_loss`
over that trajectory."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import trio

from gym.episode import run_episode
from gym.trajectory import Trajectory
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from tasks.family import CodeFamily
from tests.fakes import FakeGrader, FakePool, make_env
from tests.policy_support import small_model, wait_for_tokens
from trainer.batch import collate
from trainer.config import AlgorithmConfig, LoopConfig
from trainer.generation_engine import BatchingEngine
from trainer.masking import masked_reason
from trainer.sample import Group, Sample
from trainer.selection import select_group
from trainer.staleness import mask_ahead, token_staleness, token_weights
from trainer.update import Denominators, micro_batch_loss, score

TURN = 200  # tokens a turn may sample: the update lands within its first few


@pytest.fixture(scope="module")
def swapped() -> tuple[Trajectory, dict]:
    """An episode of two turns during whose first turn version 1 was pushed (between two decode steps)."""
    env = make_env(episode={"max_turns": 2, "max_tokens_per_turn": TURN, "max_total_tokens": 2048})
    arch = dict(vocab_size=env.tokenizer.vocab_size, max_position_embeddings=2048)
    generation = GenerationEngine(CausalLMPolicy(small_model(seed=0, **arch)), partial_rollouts=True)
    new = small_model(seed=3, **arch).state_dict()
    task = next(iter(env.tasks.values()))
    pool = FakePool()

    async def main():
        async with trio.open_nursery() as nursery:
            result = {}

            async def play():
                family = CodeFamily(pool, FakeGrader(env, pool))
                result["episode"] = await run_episode(env, BatchingEngine(generation), family, task, seed=5)

            nursery.start_soon(play)
            await trio.to_thread.run_sync(wait_for_tokens, generation, 4)  # the first turn is decoding
            loaded = generation.schedule_load(new, version=1)
        return result["episode"], loaded.result()

    episode, version = trio.run(main)
    generation.close()
    assert version == 1 and episode.turns == 2 and not episode.trajectory.masked
    return episode.trajectory, new


def turns(trajectory: Trajectory) -> list[list[int]]:
    """The versions of each turn (a run of sampled tokens)."""
    runs, run = [], []
    for version in (*trajectory.token_versions, None):
        if version is None:
            if run:
                runs.append(run)
            run = []
        else:
            run.append(version)
    return runs


def test_the_trajectory_shows_both_versions_and_the_tokens_after_the_swap_carry_the_new_one(swapped) -> None:
    trajectory, _ = swapped
    first, second = turns(trajectory)
    k = first.index(1)
    assert 4 <= k < len(first) and first == [0] * k + [1] * (len(first) - k), first
    assert set(second) == {1} and trajectory.policy_version == 0
    again = Trajectory.model_validate_json(trajectory.model_dump_json())  # what a reader gets back
    assert again.token_versions == trajectory.token_versions
    figures = token_staleness([trajectory], current=1, max_staleness=0)
    stale = k / (len(first) + len(second))
    assert figures["staleness/token_max"] == 1.0 and figures["staleness/multi_version_share"] == 1.0
    assert math.isclose(figures["staleness/token_stale_share"], stale) and math.isclose(
        figures["staleness/token_mean"], stale
    )


def group_of(trajectory: Trajectory) -> Group:
    """The trajectory and a copy with another reward: a group with a signal."""
    other = trajectory.model_copy(update={"reward": (trajectory.reward or 0.0) + 1.0})
    return Group(task_id=trajectory.task_id, samples=(Sample(trajectory), Sample(other)))


def test_stale_tokens_are_dropped_one_by_one_with_partial_rollouts_and_the_whole_sample_without(swapped) -> None:
    trajectory, _ = swapped
    on = LoopConfig(max_staleness=0, partial_rollouts=True)
    outcome = select_group(group_of(trajectory), 1, AlgorithmConfig(), on)
    assert outcome.kept and len(outcome.scored) == 2
    batch = collate(outcome.scored[:1])
    versions = np.array([-1 if v is None else v for v in trajectory.token_versions[1:]])
    assert torch.equal(batch.loss_mask[0] > 0, torch.from_numpy(versions == 1))  # exactly the version-1 tokens
    stale_tokens = int((versions == 0).sum())
    assert outcome.counts["stale_tokens_dropped"] == 2 * stale_tokens and outcome.counts["stale_dropped"] == 0
    off = select_group(group_of(trajectory), 1, AlgorithmConfig(), LoopConfig(max_staleness=0))
    assert off.counts["stale_dropped"] == 2 and not off.kept  # by its oldest token: the whole sample
    down = LoopConfig(max_staleness=0, partial_rollouts=True, stale_policy="downweight", stale_weight=0.25)
    weighted = collate(select_group(group_of(trajectory), 1, AlgorithmConfig(), down).scored[:1])
    expected = torch.from_numpy(np.where(versions == 0, 0.25, 1.0) * (versions >= 0)).float()
    assert torch.equal(weighted.weights[0] * weighted.loss_mask[0], expected)


def test_the_loss_uses_each_tokens_own_behaviour_logprob(swapped) -> None:
    """Change the behaviour logprob of one token sampled after the swap: the loss moves by that token's
    importance-weight change alone (computed by hand), and the loss of every other token does not move."""
    trajectory, new = swapped
    model = small_model(seed=3, vocab_size=trajectory_vocab(new), max_position_embeddings=2048)
    model.load_state_dict(new)  # the trainer holds the weights of version 1
    algorithm = AlgorithmConfig()  # token-level truncated importance sampling, threshold 2
    j = max(i for i, v in enumerate(trajectory.token_versions) if v == 1) - 2  # a token of the new version
    logprobs = list(trajectory.logprobs)
    logprobs[j] -= 0.5
    changed = Trajectory.model_validate({**trajectory.model_dump(), "logprobs": tuple(logprobs)})
    batches = [
        collate(select_group(group_of(t), 1, algorithm, LoopConfig(partial_rollouts=True)).scored[:1])
        for t in (trajectory, changed)
    ]
    denominators = Denominators(tokens=float(batches[0].num_tokens), sequences=1.0, norm_length=1)

    def loss(batch, without_j: bool = False) -> float:
        if without_j:
            mask = batch.loss_mask.clone()
            mask[0, j - 1] = 0.0  # position t holds target ids[t + 1]
            batch = dataclasses.replace(batch, loss_mask=mask)
        with torch.no_grad():
            value, _ = micro_batch_loss(score(model, batch, replay=False), batch, algorithm, denominators)
        return float(value)

    before, after = loss(batches[0]), loss(batches[1])
    with torch.no_grad():
        trainer_lp = float(score(model, batches[0], replay=False).logprobs[0, j - 1])
    advantage = float(batches[0].advantages[0, 0])
    w_before = math.exp(min(trainer_lp - trajectory.logprobs[j], math.log(2.0)))
    w_after = math.exp(min(trainer_lp - logprobs[j], math.log(2.0)))
    expected = -advantage * (w_after - w_before) / denominators.tokens  # the ratio is 1: its proximal is itself
    assert abs(after - before) > 1e-4
    # measured |diff| ~1e-9 (float32 sums of ~300 terms); margin 100x
    assert abs((after - before) - expected) < 1e-7, (after - before, expected)
    assert loss(batches[0], without_j=True) == loss(batches[1], without_j=True)


def trajectory_vocab(state: dict) -> int:
    return int(state["lm_head.weight"].shape[0])


def test_token_weights_follow_each_tokens_gap() -> None:
    t = Trajectory(
        task_id="t",
        tokenizer="x",
        policy_version=2,
        prompt_ids=(1,),
        ids=(1, 5, 6, 7, 9, 5, 6),
        sampled=(False, True, True, True, False, True, True),
        logprobs=(None, -1.0, -1.0, -1.0, None, -1.0, -1.0),
        token_versions=(None, 2, 3, 5, None, 5, 5),
    )
    drop = LoopConfig(max_staleness=1)
    assert token_weights(t, 5, drop).tolist() == [0, 0, 0, 1, 0, 1, 1]
    down = LoopConfig(max_staleness=1, stale_policy="downweight", stale_weight=0.5)
    assert token_weights(t, 5, down).tolist() == [0, 0.25, 0.5, 1, 0, 1, 1]
    old = t.model_copy(update={"token_versions": None})  # a record from before the field: policy_version each
    assert token_weights(old, 3, drop).tolist() == [0, 1, 1, 1, 0, 1, 1]
    with pytest.raises(ValueError, match="ahead of the trainer"):
        token_weights(t, 4, drop)


def test_a_sample_the_engine_says_is_ahead_of_the_trainer_is_masked_not_a_crash() -> None:
    """Only the trainer makes versions: a version newer than its own is the engine's fault (a server that lost
    count or lies), so its episode is masked with an engine reason and the group goes on; an honest sample of the
    same group is untouched and the selection no longer sees the bad one."""
    honest = Trajectory(
        task_id="t",
        tokenizer="x",
        policy_version=2,
        prompt_ids=(1,),
        ids=(1, 5, 6),
        sampled=(False, True, True),
        logprobs=(None, -1.0, -1.0),
        token_versions=(None, 2, 3),
        reward=1.0,
    )
    lying = honest.model_copy(update={"token_versions": (None, 3, 9), "reward": 0.0})
    whole = honest.model_copy(update={"token_versions": None, "policy_version": 7, "reward": 0.0})
    group = mask_ahead(Group(task_id="t", samples=tuple(Sample(t) for t in (honest, lying, whole))), current=3)
    kept, bad, old = group.samples
    assert kept.trajectory is honest and not kept.masked
    assert bad.masked and bad.trajectory.reward is None and "version 9" in masked_reason(bad.trajectory)
    assert old.masked and masked_reason(old.trajectory).startswith("engine: weights version 7")
    outcome = select_group(group, 3, AlgorithmConfig(), LoopConfig(partial_rollouts=True, max_staleness=1))
    assert outcome.counts["masked"] == 2
