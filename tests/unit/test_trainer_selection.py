"""Dynamic sampling, staleness, masked samples and overlong handling on hand-made trajectories."""

from __future__ import annotations

import pytest

from gym.trajectory import Trajectory
from trainer.config import AlgorithmConfig, LoopConfig
from trainer.sample import Group, Sample
from trainer.selection import BatchFiller, select_group, staleness_weight


def trajectory(
    reward: float | None, version: int = 0, masked: bool = False, sampled: int = 2, task: str = "t"
) -> Trajectory:
    prompt = (1, 2)
    ids = prompt + tuple(range(10, 10 + sampled))
    return Trajectory(
        task_id=task,
        tokenizer="test",
        policy_version=version,
        prompt_ids=prompt,
        ids=ids,
        sampled=(False, False) + (True,) * sampled,
        logprobs=(None, None) + (-0.5,) * sampled,
        reward=reward,
        masked=masked,
    )


def group(*rewards: float | None, versions=None, masked=(), truncated=(), task: str = "t") -> Group:
    versions = versions or [0] * len(rewards)
    samples = tuple(
        Sample(trajectory(r, versions[i], masked=i in masked, task=task), truncated=i in truncated)
        for i, r in enumerate(rewards)
    )
    return Group(task_id=task, samples=samples)


ALGO = AlgorithmConfig()
LOOP = LoopConfig()


def test_zero_variance_group_is_dropped_and_refilled():
    filler = BatchFiller(groups_per_step=2, max_draw_factor=4.0)
    stream = [group(1, 1, 1, 1), group(0, 0, 0, 0), group(1, 0, 0, 0), group(0.5, 0.5, 0.5, 0.5), group(0, 1, 1, 1)]
    for g in stream:
        if filler.done:
            break
        filler.add(g, select_group(g, 0, ALGO, LOOP))
    assert filler.full and filler.drawn == 5  # two zero-variance groups, one more, then the second kept
    assert filler.kept_groups == 2 and len(filler.scored) == 8
    assert filler.counts["groups_dropped"] == 3


def test_dynamic_sampling_off_keeps_zero_variance_groups():
    algo = ALGO.model_copy(update={"dynamic_sampling": ALGO.dynamic_sampling.model_copy(update={"enabled": False})})
    outcome = select_group(group(1, 1, 1), 0, algo, LOOP)
    assert outcome.kept and [s.advantage for s in outcome.scored] == [0.0, 0.0, 0.0]


def test_refill_gives_up_after_the_draw_budget():
    filler = BatchFiller(groups_per_step=2, max_draw_factor=2.0)
    while not filler.done:
        g = group(1, 1)
        filler.add(g, select_group(g, 0, ALGO, LOOP))
    assert filler.exhausted and not filler.full and filler.drawn == 4 and not filler.scored


def test_masked_samples_are_counted_and_excluded():
    outcome = select_group(group(1.0, None, 0.0, 0.0, masked={1}), 0, ALGO, LOOP)
    assert outcome.counts["masked"] == 1
    assert len(outcome.scored) == 3
    # the baseline ignores the masked sample: rewards (1, 0, 0) -> mean 1/3
    assert outcome.rewards == [1.0, 0.0, 0.0]
    assert all(not s.sample.masked for s in outcome.scored)


def test_staleness_drop_and_downweight():
    loop = LoopConfig(max_staleness=1)
    assert staleness_weight(0, loop) == 1.0 and staleness_weight(1, loop) == 1.0
    assert staleness_weight(2, loop) is None
    down = LoopConfig(max_staleness=1, stale_policy="downweight", stale_weight=0.5)
    assert staleness_weight(3, down) == 0.25
    on_policy = LoopConfig(max_staleness=0)
    assert staleness_weight(1, on_policy) is None
    with pytest.raises(ValueError, match="ahead"):
        staleness_weight(-1, loop)


def test_stale_samples_leave_the_group():
    # trainer at version 5, max_staleness 1: versions 3 (gap 2) are dropped
    outcome = select_group(group(1, 0, 1, 0, versions=[5, 4, 3, 3]), 5, ALGO, LoopConfig(max_staleness=1))
    assert outcome.counts["stale_dropped"] == 2 and len(outcome.scored) == 2
    weighted = select_group(
        group(1, 0, 1, 0, versions=[5, 4, 3, 3]), 5, ALGO, LoopConfig(max_staleness=1, stale_policy="downweight")
    )
    assert sorted(s.weight for s in weighted.scored) == [0.5, 0.5, 1.0, 1.0]


def test_overlong_filter_keeps_baseline_but_not_loss():
    outcome = select_group(group(1, 0, 0, 1, truncated={3}), 0, ALGO, LOOP)
    assert outcome.counts["overlong_filtered"] == 1 and len(outcome.scored) == 3
    assert outcome.rewards == [1, 0, 0, 1]  # the truncated sample still counts in the baseline


def test_overlong_penalty_changes_rewards():
    algo = ALGO.model_copy(
        update={"overlong": ALGO.overlong.model_copy(update={"mode": "penalty", "max_tokens": 4, "buffer_tokens": 2})}
    )
    g = Group(task_id="t", samples=(Sample(trajectory(1.0, sampled=2)), Sample(trajectory(1.0, sampled=3))))
    outcome = select_group(g, 0, algo, LOOP)
    assert outcome.rewards == [1.0, 0.5]  # 3 sampled tokens: half-way down the 2-token ramp
    assert outcome.kept  # the penalty created reward variance


def test_kl_reward_offsets_enter_the_rewards():
    outcome = select_group(group(1, 1), 0, ALGO, LOOP, reward_offsets=[0.0, -0.3])
    assert outcome.rewards == [1.0, 0.7] and outcome.kept


def test_evaluate_pass_at_k_over_groups():
    from trainer.evaluation import evaluate

    def graded(correct: bool, masked: bool = False) -> Sample:
        t = trajectory(None if masked else float(correct), masked=masked)
        return Sample(t.model_copy(update={"reward_breakdown": {} if masked else {"correctness": float(correct)}}))

    groups = [
        Group(
            task_id="a", samples=(graded(True), graded(False), graded(False), graded(False))
        ),  # pass@1 1/4, pass@2 1/2
        Group(task_id="b", samples=(graded(False), graded(False), graded(True, masked=True), graded(False))),  # 0, 0
    ]
    figures = evaluate(groups, [1, 2])
    assert figures["pass@1"] == pytest.approx((0.25 + 0.0) / 2)
    assert figures["pass@2"] == pytest.approx((0.5 + 0.0) / 2)
    assert figures["masked"] == 1 and figures["tasks"] == 2
    # each task's own counts, masked samples left out; a task's groups add up
    from trainer.evaluation import per_task

    again = Group(task_id="a", samples=(graded(True), graded(True, masked=True)))
    assert per_task([*groups, again]) == {"a": (2, 5), "b": (0, 3)}
