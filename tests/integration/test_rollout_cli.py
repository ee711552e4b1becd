"""The shipped smoke environment through the real CLI: every scripted:reference episode is rewarded 1.0,
every bundle replays identically, and `show` prints a transcript."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym.trajectory import read_jsonl

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def gym(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("smoke") / "run"
    done = gym(
        "rollout",
        "configs/cp_smoke.yaml",
        "--episodes",
        "16",
        "--group-size",
        "2",
        "--policy",
        "scripted:reference",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_smoke_rollout_rewards_one_and_replays_identically(smoke, tmp_path):
    out, done = smoke
    summary = json.loads(done.stdout)
    assert summary["episodes"] == 16 and summary["masked"] == 0 and summary["reward_1"] == 16
    trajectories = list(read_jsonl(out / "trajectories.jsonl"))
    assert len(trajectories) == 16 and {t.reward for t in trajectories} == {1.0}
    assert len({t.group_id for t in trajectories}) == 8
    assert json.loads((out / "environment.json").read_text())["name"] == "cp_smoke"
    bundles = sorted((out / "bundles").glob("*.json"))
    assert len(bundles) == 16 == summary["bundles"]  # cp_smoke bundles every episode

    replayed = gym("replay", str(out / "bundles"), "--json", str(tmp_path / "replay.json"))
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert "16/16 bundles replayed identically" in replayed.stdout
    reports = json.loads((tmp_path / "replay.json").read_text())
    assert all(not r["differences"] and r["reward_replayed"] == 1.0 for r in reports)

    shown = gym("show", str(bundles[0]))
    assert shown.returncode == 0 and "--- assistant -> functions.write_file (json) ---" in shown.stdout
    assert "tests passed ===" in shown.stdout and "reward 1.0" in shown.stdout


def test_a_corrupted_bundle_fails_replay(smoke, tmp_path):
    data = json.loads(next((smoke[0] / "bundles").glob("*.json")).read_text())
    bundle = tmp_path / "corrupted.json"
    data["tool_calls"][0]["arguments"] = data["tool_calls"][0]["arguments"].replace("solution.py", "other.py", 1)
    bundle.write_text(json.dumps(data))
    replayed = gym("replay", str(bundle))
    assert replayed.returncode == 1 and "0/1 bundles replayed identically" in replayed.stdout
    assert "tool call 0 in the trajectory" in replayed.stdout


def test_bad_inputs_are_named(tmp_path):
    bad = tmp_path / "env.yaml"
    bad.write_text("name: x\ntask_pool: {type: jsonl, path: nowhere.jsonl, shuffle: maybe}\n")
    done = gym("rollout", str(bad), "--episodes", "1", "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "task_pool.shuffle" in done.stderr and "Traceback" not in done.stderr
    odd = gym("rollout", "configs/cp_smoke.yaml", "--episodes", "3", "--group-size", "2", "--out", str(tmp_path / "o"))
    assert odd.returncode == 2 and "multiple of --group-size" in odd.stderr
    (tmp_path / "junk.json").write_text("{}")
    shown = gym("show", str(tmp_path / "junk.json"))
    assert shown.returncode == 5 and "not a replay bundle" in shown.stderr
