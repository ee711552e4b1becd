"""The learning check: GRPO raises the mean reward of a shipped, learnable task mix within a short CPU run.

configs/grpo_format_check.yaml: the shipped CP tasks, one final-channel answer per episode, reward =
fraction of hidden tests passed - 0.2 for a turn that is not valid Harmony (the tiny policy never
passes a test, so the reward is -0.2 x the parse-error share). After its warm start the policy writes
valid turns 5-20% of the time (step 1), after 16 on-policy GRPO steps of 4 groups x 16 samples 60-80%
(last 4 steps); the mean reward of the last 4 steps must exceed that of the first 4 by MARGIN. The
whole loop is real (episodes, rollout workers, engine, learner); workspaces and grading are the
in-memory fakes of the gym's own tests (a program passes when it is the task's reference), so the
check needs no Docker and isolates learning from sandbox timing. Batched sampling makes runs differ in their last bits (and machines
differ anyway), so MARGIN comes from repeated runs, and the second test proves the check can fail.

Measured on the 2-core VM (rise = mean of the last 4 steps - mean of the first 4; spread = standard
deviation of the per-step mean reward within those two windows, pooled):

| run | load | rise | spread |
| --- | --- | --- | --- |
| seed 0 (this test) | 2 CPU hogs + other workers (load average 3-5) | +0.095 | 0.010 |
| seed 0 (this test) | 1 CPU hog + other workers (load average about 2) | +0.111 | 0.015 |
| seed 0 | 2 other runs + 1 CPU hog | +0.101 | 0.014 |
| seeds 0 / 1 / 2 (policy init and episode sampling) | 3 runs at once + other workers | +0.096 / +0.110 / +0.105 | 0.015 / 0.007 / 0.009 |
| lr 1e-9, 8 steps, seed 0 (the second test) | 2 CPU hogs / 1 CPU hog | +0.010 / -0.000 | 0.004 / 0.005 |
| lr 1e-9, 8 steps, seeds 1 / 2 | 3 runs at once + 1 CPU hog | +0.008 / +0.006 | 0.010 / 0.004 |

MARGIN = 0.05: the smallest rise (+0.095) clears it by 0.045, 3x the largest spread; it is 3.3x the
largest spread and 5x the largest no-learning rise. Runtime: 382 s and 133 s (first / second test)
under 2 CPU hogs, 150 s and 90 s under 1.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gym.environment import Environment
from tests.fakes import FakeGrader, FakePool
from trainer.config import TrainConfig
from trainer.loop import train

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "grpo_format_check.yaml"
WINDOW = 4  # steps averaged at each end of the run
MARGIN = 0.05  # measured rises +0.095..+0.111, without learning -0.000..+0.010 (module docstring)


def run(tmp_path: Path, lr: float | None = None, steps: int | None = None) -> list[dict]:
    """The config's run (optionally another learning rate / step count); its train rows of metrics.jsonl."""
    config = TrainConfig.load(CONFIG)
    update: dict = {"run_dir": tmp_path}
    if lr is not None:
        update["optimizer"] = config.optimizer.model_copy(update={"lr": lr})
    if steps is not None:
        update["loop"] = config.loop.model_copy(update={"steps": steps})
    config = config.model_copy(update=update)
    pool = FakePool()
    summary = train(config, workspaces=pool, grader=FakeGrader(Environment(config.env), pool))
    assert summary["steps"] == config.loop.steps and summary["masked"] == 0
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def rise(rewards: list[float]) -> float:
    """Mean reward of the last WINDOW steps minus that of the first WINDOW steps."""
    return statistics.fmean(rewards[-WINDOW:]) - statistics.fmean(rewards[:WINDOW])


def describe(rows: list[dict]) -> str:
    """Per step: reward, parse-error share, entropy; and the warm start's loss (what to look at when it fails)."""
    train_rows = [r for r in rows if r["kind"] == "train"]
    rewards = [r["reward/mean"] for r in train_rows]
    warm = next(r for r in rows if r["kind"] == "warm_start")
    return (
        f"mean reward of steps 1-{WINDOW} {statistics.fmean(rewards[:WINDOW]):.3f} -> last {WINDOW} "
        f"{statistics.fmean(rewards[-WINDOW:]):.3f} (rise {rise(rewards):+.3f}, margin {MARGIN}); per step: "
        f"reward {[round(x, 3) for x in rewards]}, "
        f"parse-error share {[round(r.get('end/parse_error', 0.0) / r['samples/drawn'], 2) for r in train_rows]}, "
        f"entropy {[round(r['entropy'], 2) for r in train_rows if 'entropy' in r]}; "
        f"warm-start loss {warm['warm_start/loss_first']:.2f} -> {warm['warm_start/loss_last']:.2f}. "
        "A rising parse-error share with rising entropy: the update diverged; a flat one: no learning "
        "reached the engine (weights sync, advantages, loss sign)"
    )


def rewards_of(rows: list[dict]) -> list[float]:
    return [r["reward/mean"] for r in rows if r["kind"] == "train"]


@pytest.mark.slow
def test_mean_reward_rises(tmp_path):
    rows = run(tmp_path)
    assert rise(rewards_of(rows)) > MARGIN, describe(rows)
    warm = next(r for r in rows if r["kind"] == "warm_start")
    assert warm["warm_start/loss_last"] < warm["warm_start/loss_first"]


@pytest.mark.slow
def test_check_fails_when_the_policy_does_not_learn(tmp_path):
    """The same run with a learning rate of 1e-9 (the config allows no 0): the rise is noise, under MARGIN."""
    rows = run(tmp_path, lr=1e-9, steps=2 * WINDOW)
    assert rise(rewards_of(rows)) <= MARGIN, describe(rows)
