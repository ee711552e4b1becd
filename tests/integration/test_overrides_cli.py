"""`--set KEY=VALUE` through the real CLI: a rollout in real Docker workspaces runs the overridden
environment (and writes it as environment.json); a bad override exits 2 with one line, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym.trajectory import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
TACO = (
    "[{weight: 1, pool: {type: jsonl, path: tasks/samples/taco.jsonl, format: taco, "
    'solutions: tasks/samples/taco.solutions.jsonl, id_prefix: "taco/"}}]'
)


def gym(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.docker
@pytest.mark.slow
def test_rollout_runs_the_overridden_environment(tmp_path):
    out = tmp_path / "run"
    done = gym(
        "rollout",
        "configs/cp_smoke.yaml",
        "--episodes",
        "1",
        "--policy",
        "scripted:reference",
        "--out",
        str(out),
        "--set",
        f"task_pool.sources={TACO}",
        "--set",
        "task_pool.sources.0.pool.limit=1",
        "--set",
        "episode.max_turns=4",
        "--set",
        "replay.rate=0",
        "--set",
        "name=cp_override",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = json.loads((out / "environment.json").read_text())
    assert resolved["name"] == "cp_override" and resolved["episode"]["max_turns"] == 4
    assert [s["pool"]["limit"] for s in resolved["task_pool"]["sources"]] == [1]
    assert resolved["replay"]["rate"] == 0 and resolved["tools"]["timeout_s"] == 10  # untouched fields as in the file
    [trajectory] = read_jsonl(out / "trajectories.jsonl")
    assert trajectory.task_id == "taco/0" and trajectory.reward == 1.0  # the first task of the one source left
    summary = json.loads(done.stdout)
    assert summary["bundles"] == 0  # cp_smoke bundles every episode; replay.rate=0 keeps a success unbundled


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("episode.max_turns", "argument --set: 'episode.max_turns': expected KEY=VALUE (e.g. episode.max_turns=4)"),
        ("=4", "argument --set: '=4': empty key before '='"),
        (
            "episode.max_turns.x=1",
            "argument --set: 'episode.max_turns.x': episode.max_turns is 8, not a mapping or a list",
        ),
        (
            "task_pool.sources.7.weight=2",
            "argument --set: 'task_pool.sources.7.weight': index 7 out of range (task_pool.sources has 7 items)",
        ),
    ],
)
def test_rollout_bad_override_exits_2_with_one_line(tmp_path, override, message):
    done = gym("rollout", "configs/cp_smoke.yaml", "--episodes", "1", "--out", str(tmp_path / "o"), "--set", override)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"python -m gym rollout: error: {message}"
    assert "Traceback" not in done.stderr and not (tmp_path / "o").exists()


def test_rollout_override_that_fails_validation_names_the_field(tmp_path):
    done = gym(
        "rollout",
        "configs/cp_smoke.yaml",
        "--episodes",
        "1",
        "--out",
        str(tmp_path / "o"),
        "--set",
        "episode.max_turnz=4",
        "--set",
        "task_pool.sources.0.weight=-1",
    )
    assert (
        done.returncode == 2
        and done.stderr.startswith("gym: error: ")
        and "configs/cp_smoke.yaml (with overrides): episode.max_turnz" in done.stderr
    )
    assert "episode.max_turnz: Extra inputs are not permitted" in done.stderr
    assert "task_pool.sources.0.weight: Input should be greater than 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_train_bad_override_exits_2_before_anything_starts(tmp_path):
    done = gym(
        "train",
        "configs/cp_grpo_tiny.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        "environment.task_pool.templates.9=linear",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "python -m gym train: error: argument --set: 'environment.task_pool.templates.9': "
        "index 9 out of range (environment.task_pool.templates has 8 items)"
    )
    assert not (tmp_path / "run").exists()
