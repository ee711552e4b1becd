"""Held-out evaluation before and after training, and summary.json's pass-rate and pass@1 figures, on real
runs of the loop (real engine, learner, episodes; the gym tests' in-memory workspaces and grader).

With `optimizer.lr: 0` the weights never move (the last checkpoint equals the seeded initial model), so
the evaluation before the first step and the one after the last (same tasks, same seeds) agree exactly;
with a learning rate the checkpoint differs, or the test could not tell a frozen policy from a trained one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from gym.environment import Environment
from policies.serve_config import MoEPolicySource
from tests.trainer_support import FAKE_ENVIRONMENT, TINY, train_with_fakes
from trainer.config import TrainConfig
from trainer.policy import build_model
from trainer.warmup import demo_tasks

# 256-token turns: an untrained policy stops early (a Harmony stop token, 3 of 8192 ids) in about 9% of its
# samples, so groups differ in length reward and lr > 0 has something to learn from; with the fake
# environment's 16 tokens every sample ran to the budget in most runs, every group was dropped and no weight moved.
ENVIRONMENT = {
    **FAKE_ENVIRONMENT,
    "name": "eval_summary",
    "episode": {**FAKE_ENVIRONMENT["episode"], "max_tokens_per_turn": 256},
}


def run(tmp_path: Path, lr: float, steps: int = 3) -> tuple[dict, list[dict]]:
    eval_env = tmp_path / "heldout.yaml"
    eval_env.write_text(yaml.safe_dump({**ENVIRONMENT, "name": "heldout"}))
    data = {
        "run_dir": str(tmp_path / "run"),
        "environment": ENVIRONMENT,
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        "rollout": {"group_size": 4, "groups_per_step": 2, "seed": 0},
        "optimizer": {"lr": lr},
        "loop": {"steps": steps, "max_staleness": 0, "micro_batch_size": 8},
        "checkpoint": {"every": 100},
        "eval": {"every": steps, "before": True, "environment": str(eval_env), "samples": 2, "k": [1, 2]},
        "metrics": {"progress": False, "tensorboard": False},
    }
    summary = train_with_fakes(TrainConfig.parse(data, source="test"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return summary, rows


@pytest.mark.slow
@pytest.mark.parametrize("lr", [0.0, 0.05])
def test_eval_before_and_after_and_the_summary_figures(tmp_path, lr):
    summary, rows = run(tmp_path, lr)
    evals = [r for r in rows if r["kind"] == "eval"]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in evals] == [0, 3] and len(train) == 3
    assert summary["heldout_pass1_before"] == round(evals[0]["pass@1"], 4)
    assert summary["heldout_pass1_after"] == round(evals[1]["pass@1"], 4)
    rates = [r["reward/pass_rate"] for r in train]
    window = summary["window_steps"]  # one window for rewards and pass rates: a quarter of the steps, at least 1
    assert window == max(1, len(rates) // 4)
    assert summary["pass_rates"] == [round(x, 4) for x in rates]
    assert summary["pass_rate_first"] == round(sum(rates[:window]) / window, 4)
    assert summary["pass_rate_last"] == round(sum(rates[-window:]) / window, 4)
    assert all(0.0 <= r["reward/pass_rate"] <= r["reward/correct_share"] <= 1.0 for r in train)
    initial = build_model(MoEPolicySource.model_validate({"type": "rdep_moe", "seed": 0, "model": TINY})).state_dict()
    final = load_file(str(tmp_path / "run" / "checkpoints" / "step_000003" / "model.safetensors"))
    moved = [k for k, v in final.items() if not torch.equal(v, initial[k])]
    if lr == 0.0:  # frozen weights, same tasks, same seeds: the very same episodes
        assert moved == []
        assert all(evals[0][k] == evals[1][k] for k in ("pass@1", "pass@2", "reward_mean")), (evals[0], evals[1])
    else:
        assert len(moved) > len(final) // 2
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


@pytest.mark.slow
def test_rl_draws_on_after_the_warm_start_demos(tmp_path):
    """The warm start learns the stream's first 4 tasks; RL's groups are the next ones, not those again."""
    environment = {
        **ENVIRONMENT,
        "task_pool": {"type": "generated", "count": 12, "levels": [1], "shuffle": True, "params_in": "input"},
        "episode": {"max_turns": 1, "max_tokens_per_turn": 160, "max_total_tokens": 1024, "on_parse_error": "end"},
    }
    data = {
        "run_dir": str(tmp_path / "run"),
        "environment": environment,
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        "warm_start": {"steps": 1, "demos": "final_answers", "tasks": 4},
        "rollout": {"group_size": 2, "groups_per_step": 2, "seed": 0},
        "loop": {"steps": 2, "max_staleness": 0, "micro_batch_size": 8},
        "checkpoint": {"every": 100},
        "metrics": {"progress": False, "tensorboard": False},
    }
    config = TrainConfig.parse(data, source="test")
    demos = {task.task_id for task in demo_tasks(Environment(config.env), 4)}
    train_with_fakes(config)
    rows = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    drawn = {row["seeds"]["position"]: row["task_id"] for row in rows}  # stream position -> task
    first_epoch = {task for position, task in drawn.items() if position < 12}
    assert min(drawn) == 4 and len(demos) == 4 and first_epoch and not first_epoch & demos, (drawn, sorted(demos))
