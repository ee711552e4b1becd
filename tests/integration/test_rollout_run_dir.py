"""`rollout` through the real CLI keeps its data and tells the truth in its exit code: an earlier run in
--out is set aside whole (never overwritten or mixed in), every trajectory is on disk as soon as its
episode ends so SIGINT/SIGTERM leave a parseable trajectories.jsonl and a summary.json marked
interrupted, a rollout whose every episode was masked exits 3 with the cause in one line, and one with
some masked episodes exits 0 saying how many."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gym.environment import Environment
from gym.trajectory import read_jsonl
from tests.policy_server_support import ServedReference, serving

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ALL_MASKED = 3
TACO = (
    "[{weight: 1, pool: {type: jsonl, path: tasks/samples/taco.jsonl, format: taco, "
    'solutions: tasks/samples/taco.solutions.jsonl, id_prefix: "taco/"}}]'
)
ONE_SOURCE = ("--set", f"task_pool.sources={TACO}", "--set", "task_pool.sources.0.pool.limit=2")


def rollout(out: Path, *extra: str, episodes: int = 1, policy: str = "scripted:reference") -> list[str]:
    return [
        sys.executable,
        "-m",
        "gym",
        "rollout",
        "configs/cp_smoke.yaml",
        "--episodes",
        str(episodes),
        "--policy",
        policy,
        "--out",
        str(out),
        *extra,
    ]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=150)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("rollout: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def test_an_earlier_run_is_set_aside_whole(tmp_path):
    out = tmp_path / "run"
    (out / "bundles").mkdir(parents=True)
    (out / "trajectories.jsonl").write_text("old trajectory\n")
    (out / "bundles" / "000000-old.json").write_text("{}")
    done = run(rollout(out, *ONE_SOURCE, "--set", "replay.rate=1"))
    assert done.returncode == 0, done.stderr[-3000:]
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("run.")]
    assert (aside / "trajectories.jsonl").read_text() == "old trajectory\n"  # untouched
    assert [p.name for p in (aside / "bundles").iterdir()] == ["000000-old.json"]
    assert len(list(read_jsonl(out / "trajectories.jsonl"))) == 1  # the new run only
    assert [p.name for p in (out / "bundles").iterdir()] == ["000000-taco_0.json"]
    assert json.loads((out / "summary.json").read_text())["interrupted"] is False
    assert f"moved to {aside}" in done.stderr


def test_every_episode_masked_exits_non_zero_with_the_cause(tmp_path):
    out = tmp_path / "run"
    done = run(rollout(out, *ONE_SOURCE, episodes=2, policy="http://127.0.0.1:9/v1"))
    assert done.returncode == ALL_MASKED
    line = one_line(done)
    assert (
        line.startswith("rollout: every episode was masked (2/2): engine: http://127.0.0.1:9/v1") and "refused" in line
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes"], summary["masked"], summary["interrupted"]) == (2, 2, False)
    assert [t.masked for t in read_jsonl(out / "trajectories.jsonl")] == [True, True]


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """The reference policy served over HTTP, refusing every request of task taco/1 (those episodes are masked)."""
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    refused = env.harmony.render_prompt(env.prompt(env.tasks["taco/1"]))
    with serving(ServedReference(env, refused=[refused])) as url:
        yield url


def test_some_episodes_masked_exits_zero_and_says_how_many(tmp_path, refusing_server):
    out = tmp_path / "run"
    done = run(rollout(out, *ONE_SOURCE, episodes=2, policy=refusing_server))
    assert done.returncode == 0, done.stderr[-3000:]
    assert one_line(done).startswith("rollout: 1 of 2 episodes masked")
    rewards = {t.task_id: t.reward for t in read_jsonl(out / "trajectories.jsonl")}
    assert rewards == {"taco/0": 1.0, "taco/1": None}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_rollout_keeps_what_it_finished(tmp_path, signum):
    out = tmp_path / "run"
    episodes = 32
    proc = subprocess.Popen(
        rollout(out, episodes=episodes), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 90
        lines = out / "trajectories.jsonl"
        while not (lines.exists() and lines.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no trajectory within 90 s"
            time.sleep(0.2)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, stderr[-3000:]
    kept = list(read_jsonl(lines))  # every line parses
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["episodes_requested"] == episodes
    assert 1 <= summary["episodes"] == len(kept) < episodes
    assert json.loads(stdout) == summary
    assert f"rollout: interrupted by {signum.name} after {len(kept)}/{episodes} episodes" in stderr
    client = docker.from_env()
    try:  # only looks: containers this rollout created carry its pid in their names
        left = client.containers.list(all=True, filters={"name": f"gym-[a-z]+-{proc.pid}-"})
    finally:
        client.close()
    assert not left, [c.name for c in left]
