"""Math tasks in the real sandbox, as the README runs them: `gym rollout configs/math_smoke.yaml` with the
scripted reference scores 1.0 on every episode and scripted:wrong 0.0 (math-verify on the host, workspaces
from the real warm pool), every bundle replays identically, and a mixture of code and math sources runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_support import gym

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def rollout(out: Path, *args: str) -> dict:
    done = gym("rollout", *args, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def test_reference_answers_score_one_and_replay(tmp_path):
    summary = rollout(tmp_path / "ref", "configs/math_smoke.yaml", "--episodes", "8", "--policy", "scripted:reference")
    assert (summary["episodes"], summary["masked"], summary["reward_1"], summary["min_reward"]) == (8, 0, 8, 1.0)
    assert summary["end_reasons"] == {"final": 8} and summary["bundles"] == 8
    trajectories = [json.loads(line) for line in (tmp_path / "ref" / "trajectories.jsonl").read_text().splitlines()]
    assert {t["task_id"].split("/")[0] for t in trajectories} == {"gsm8k", "competition", "plain"}
    done = gym("replay", str(tmp_path / "ref" / "bundles"))
    assert done.returncode == 0 and "8/8 bundles replayed identically" in done.stdout + done.stderr, done.stderr
    shown = gym("show", str(sorted((tmp_path / "ref" / "bundles").iterdir())[0]))
    assert shown.returncode == 0 and "(math, " in shown.stdout and "=== answer (final) ===" in shown.stdout, (
        shown.stderr
    )


def test_wrong_answers_score_zero(tmp_path):
    summary = rollout(tmp_path / "wrong", "configs/math_smoke.yaml", "--episodes", "8", "--policy", "scripted:wrong")
    assert (summary["episodes"], summary["masked"], summary["mean_reward"], summary["reward_1"]) == (8, 0, 0.0, 0)


def test_a_mixture_of_code_and_math_sources(tmp_path):
    summary = rollout(tmp_path / "mixed", "configs/mixed_code_math.yaml", "--episodes", "12")
    assert (summary["episodes"], summary["masked"], summary["min_reward"]) == (12, 0, 1.0)
    trajectories = [json.loads(line) for line in (tmp_path / "mixed" / "trajectories.jsonl").read_text().splitlines()]
    ends = {t["end_reason"] for t in trajectories}
    assert ends == {"final", "submit"}  # math answers on the final channel, code submits a program
