"""The whole training loop without Docker, and exact resume: N steps == N/2 + resume + N/2.

The loop runs for real (rollout workers, episodes, the in-process engine, the learner, checkpoints)
on the shipped CP tasks with an in-memory workspace pool and a grader that passes a program when it
is the task's reference (the fakes the gym's own tests use). On-policy (max_staleness 0) and with
one sequence per engine batch, every step's samples are fixed by the seeds, so a run stopped after
N/2 steps and resumed must end with exactly the weights of the uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gym.environment import Environment
from tests.fakes import SAMPLES, FakeGrader, FakePool
from tests.trainer_support import FAKE_ENVIRONMENT, TINY
from trainer.config import ConfigError, TrainConfig
from trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]


def config(run_dir: Path, steps: int, **overrides) -> TrainConfig:
    data = {
        "run_dir": str(run_dir),
        # rewards differ by length (the rubric): never a zero gradient
        "environment": {
            **FAKE_ENVIRONMENT,
            "name": "resume",
            "episode": {**FAKE_ENVIRONMENT["episode"], "max_tokens_per_turn": 96},
        },
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        # One torch thread: with two, a run beside two CPU hogs ended with weights that differed from the
        # uninterrupted run in their last bits (fresh-clone CI, 2026-11-24); one thread is reproducible.
        "threads": 1,
        "engine": {"max_batch_size": 1},
        "warm_start": {"steps": 4, "lr": 0.01, "batch_size": 2, "demos": "final_answers"},
        "rollout": {"group_size": 2, "groups_per_step": 2, "seed": 0},
        "algorithm": {"dynamic_sampling": {"enabled": False}},
        "optimizer": {"lr": 0.001},
        "loop": {"steps": steps, "max_staleness": 0, "micro_batch_size": 2},
        "checkpoint": {"every": 2, "keep": 5},
        "metrics": {"progress": False, "tensorboard": False},
        **overrides,
    }
    return TrainConfig.parse(data, source="test")


def run(cfg: TrainConfig, resume: bool = False) -> dict:
    env = Environment(cfg.env)
    pool = FakePool()
    return train(cfg, resume=resume, workspaces=pool, grader=FakeGrader(env, pool))


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


@pytest.mark.slow
def test_resume_equals_uninterrupted(tmp_path):
    whole = tmp_path / "whole"
    summary = run(config(whole, 4))
    assert summary["steps"] == 4 and summary["weights_version"] == 4
    for name in ("metrics.jsonl", "trajectories.jsonl", "config.json", "summary.json", "curves.png"):
        assert (whole / name).is_file(), name
    written = json.loads((whole / "summary.json").read_text())
    assert {"wall_s", "peak_rss_mb", "steps", "reward_first", "reward_last", "masked"} <= set(written)

    split = tmp_path / "split"
    run(config(split, 2))
    assert (split / "checkpoints" / "latest").read_text().strip() == "step_000002"
    resumed = run(config(split, 4), resume=True)
    assert resumed["resumed"] and resumed["steps"] == 4

    a = load_file(str(whole / "checkpoints" / "step_000004" / "model.safetensors"))
    b = load_file(str(split / "checkpoints" / "step_000004" / "model.safetensors"))
    initial = load_file(str(whole / "checkpoints" / "step_000002" / "model.safetensors"))
    assert any(not torch.equal(a[k], initial[k]) for k in a), "steps 3-4 changed the weights"
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert losses(whole)[3] == losses(split)[3] and losses(whole)[4] == losses(split)[4]
    state = json.loads((split / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["data_cursor"] == 8 and state["weights_version"] == 4  # 4 steps x 2 groups drawn, in order


def trajectories(run_dir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    return sorted((r["seeds"]["position"], r["seeds"]["member"], r["task_id"], r["seeds"]["episode"]) for r in rows)


def test_a_baseline_run_samples_the_same_stream_under_its_starting_weights(tmp_path):
    """loop.updates_per_batch 0: no optimizer step, no push; the stream, the samples' seeds and the checkpoints
    are the learning run's, the weights the warm start's throughout (control: the learning run moves them)."""
    learn, baseline = tmp_path / "learn", tmp_path / "baseline"
    # evaluated before the first step and after each: with the weights unchanged, every evaluation repeats the first
    # (the same sampling seeds in every pass), so a learning run's rise between two is the weights' doing
    held_out = tmp_path / "heldout.yaml"
    env = config(tmp_path, 1).env.model_dump(mode="json")
    env["task_pool"] = {"type": "jsonl", "path": str(SAMPLES / "mbpp.jsonl"), "format": "mbpp"}
    held_out.write_text(json.dumps(env))  # JSON is YAML
    evaluated = {"every": 1, "before": True, "environment": str(held_out), "samples": 3, "k": [1]}
    learned = run(config(learn, 2, checkpoint={"every": 1, "keep": 5}))
    held = run(
        config(
            baseline,
            2,
            checkpoint={"every": 1, "keep": 5},
            loop={"steps": 2, "max_staleness": 0, "micro_batch_size": 2, "updates_per_batch": 0},
            eval=evaluated,
        )
    )
    assert learned["weights_version"] == 2 and held["weights_version"] == 0 and held["steps"] == 2
    assert trajectories(baseline) == trajectories(learn)  # the same tasks, members and episode seeds
    first, second = (baseline / "checkpoints" / name / "model.safetensors" for name in ("step_000001", "step_000002"))
    moved = load_file(str(learn / "checkpoints" / "step_000002" / "model.safetensors"))
    start, end = load_file(str(first)), load_file(str(second))
    assert all(torch.equal(start[k], end[k]) for k in start)  # nothing moved between its steps
    assert any(not torch.equal(start[k], moved[k]) for k in start)  # the learning run's did
    rows = [json.loads(line) for line in (baseline / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train_rows] == [1, 2] and all("loss" not in r and "reward/mean" in r for r in train_rows)
    evals = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 1, 2] and evals[0]["tasks"] == 3
    assert all({**r, "step": 0} == evals[0] for r in evals)  # reward_mean too: every sampled length repeats
    per_task = [json.loads(line)["per_task"] for line in (baseline / "evals.jsonl").read_text().splitlines()]
    assert per_task == [per_task[0]] * 3
    with pytest.raises(ConfigError, match=r"loop\.updates_per_batch"):
        config(tmp_path, 2, loop={"updates_per_batch": -1})


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm\.clip_high"):
        config(tmp_path, 2, algorithm={"clip_high": -1})
    with pytest.raises(ConfigError, match=r"loop\.max_staleness"):
        config(tmp_path, 2, loop={"max_staleness": -1})
    with pytest.raises(ConfigError, match=r"environment.*task_pool"):
        config(tmp_path, 2, environment={"name": "x"})
    with pytest.raises(ConfigError, match=r"optimizer\.lr_typo"):
        config(tmp_path, 2, optimizer={"lr_typo": 1.0})
    missing = tmp_path / "env.yaml"
    with pytest.raises(ConfigError, match=r"environment.*env.yaml"):
        config(tmp_path, 2, environment=str(missing))
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing started


def test_eval_reports_pass_at_k_on_held_out_tasks(tmp_path):
    held_out = tmp_path / "heldout.yaml"
    env = config(tmp_path, 1).env.model_dump(mode="json")
    env["task_pool"] = {
        "type": "jsonl",
        "path": str(SAMPLES / "mbpp.jsonl"),
        "format": "mbpp",
        "solutions": str(SAMPLES / "mbpp.solutions.jsonl"),
    }
    held_out.write_text(json.dumps(env))  # JSON is YAML
    cfg = config(tmp_path / "run", 2, eval={"every": 2, "environment": str(held_out), "samples": 3, "k": [1, 3]})
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(evals) == 1 and evals[0]["step"] == 2
    assert evals[0]["tasks"] == 3 and {"pass@1", "pass@3"} <= set(evals[0])
    assert 0.0 <= evals[0]["pass@1"] <= evals[0]["pass@3"] <= 1.0


KILLED_RUN = """
import sys
from pathlib import Path
from tests.integration.test_trainer_resume import config, run
run(config(Path(sys.argv[1]), int(sys.argv[2])))
"""


@pytest.mark.slow
def test_sigkill_loses_at_most_the_steps_since_the_last_checkpoint(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(run_dir), "6"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pointer = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 600
    try:
        while not (pointer.is_file() and pointer.read_text().strip() == "step_000002"):
            assert proc.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    summary = run(config(run_dir, 6), resume=True)
    assert summary["resumed"] and summary["steps"] == 6
    state = json.loads((run_dir / "checkpoints" / "step_000006" / "state.json").read_text())
    assert state["step"] == 6 and state["weights_version"] == 6 and state["data_cursor"] == 12
    steps = [
        json.loads(line)["step"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    assert steps[-4:] == [3, 4, 5, 6]  # resumed right after the checkpoint (steps past it, if any, were redone)
