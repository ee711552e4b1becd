"""Disk per failed episode (issue 41 class 8), in real containers: a policy whose one short command writes a 1 MB
file and submits it leaves a bundle under its byte bound (the file's two copies cut to markers with size and sha256),
and `gym replay` reports that bundle as truncated, never as a difference; the honest reference episode's bundle
is uncut and replays identically. The run budget through `gym rollout` (real sandbox) and the trainer's loop
(in-memory workspaces): past `replay.run_bytes` nothing more is written and summary.json counts what was skipped
(the in-memory attacks: tests/unit/test_bundle_bounds.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from gym.bundle import read_bundle
from gym.environment import Environment
from gym.format.message import Message
from gym.rollout import collect_async
from gym.scripted import load_scripted
from sandbox.pool import WorkspacePool
from tasks.grader import Grader
from tests.fakes import TurnsEngine

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MAKE_BIG = "python3 -c \"open('big.py','w').write('#'+'x'*1000000+chr(10))\""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Bundles of two real episodes on the smoke config (every episode bundled): the attack and the reference."""
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    sandbox = env.config.sandbox.model_copy(update={"pool": env.config.sandbox.pool.model_copy(update={"size": 1})})
    attack = TurnsEngine(
        env,
        [[Message.tool_call("bash", {"command": MAKE_BIG})], [Message.tool_call("submit", {"path": "big.py"})]],
    )
    out = tmp_path_factory.mktemp("bundles")

    async def main():
        async with WorkspacePool(sandbox) as pool:
            grader = Grader(pool, env.config.grader)
            runs = {}
            for name, engine in (("attack", attack), ("honest", load_scripted("reference", env))):
                _, workers = await collect_async(env, engine, pool, 1, 1, 3, grader=grader, bundle_dir=out / name)
                runs[name] = workers
            return runs

    return {"env": env, **trio.run(main)}


@pytest.mark.docker
def test_a_one_megabyte_submit_stays_under_the_bound_and_replays_as_truncated(runs):
    env, workers = runs["env"], runs["attack"]
    (path,) = workers.bundles
    bundle = read_bundle(path)
    honest = runs["honest"].bundles[0].stat().st_size
    limit = (256 << 10) + 1024 * bundle.trajectory.num_sampled  # replay.bytes_floor + bytes_per_token x sampled
    assert path.stat().st_size <= limit + honest, path.stat().st_size
    assert env.config.replay.bytes_floor == 256 << 10 and env.config.replay.bytes_per_token == 1024
    assert {cut.field for cut in bundle.cuts} == {"answer", "tool_calls.1.outcome.submitted"}
    assert all(cut.bytes > 1_000_000 for cut in bundle.cuts)
    assert workers.bundle_budget.figures()["truncated"] == 1
    done = subprocess.run(
        [sys.executable, "-m", "gym", "replay", str(path), str(runs["honest"].bundles[0])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TRUNCATED (2 fields cut when written" in lines[0] and "DIFFERENCES" not in done.stdout, done.stdout
    assert any(line.strip().startswith("truncated: answer (") for line in lines)
    honest_line = next(line for line in lines if str(runs["honest"].bundles[0]) in line)
    assert honest_line.endswith(": identical"), done.stdout
    assert "1/2 bundles replayed identically" in done.stdout


@pytest.mark.docker
def test_the_honest_bundle_is_uncut(runs):
    (path,) = runs["honest"].bundles
    bundle = read_bundle(path)
    assert bundle.cuts == () and bundle.trajectory.reward == 1.0
    assert runs["honest"].bundle_budget.figures()["truncated"] == 0


@pytest.mark.docker
def test_gym_rollout_stops_writing_bundles_past_the_run_budget_and_says_so(tmp_path):
    """The run budget through the command: room for about one bundle, four failed episodes (scripted:empty); one
    is written, three are skipped and counted in summary.json and the log. Control: the default budget writes all."""
    runs = {}
    for name, extra in (("tight", ["--set", "replay.run_bytes=60000"]), ("default", [])):
        out = tmp_path / name
        done = subprocess.run(
            [sys.executable, "-m", "gym", "rollout", "configs/cp_smoke.yaml", "--episodes", "4"]
            + ["--policy", "scripted:empty", "--out", str(out), *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = (out, json.loads((out / "summary.json").read_text()), done.stderr)
    out, summary, stderr = runs["tight"]
    disk = summary["bundle_disk"]
    on_disk = list((out / "bundles").glob("*.json"))
    assert len(on_disk) == summary["bundles"] == disk["written"] == 1 and disk["skipped"] == 3
    assert disk["skipped_bytes"] > 3 * 20_000 and sum(p.stat().st_size for p in on_disk) <= 60000
    assert "bundle disk budget spent" in stderr and "3 skipped" in stderr
    out, summary, _ = runs["default"]
    assert summary["bundle_disk"]["written"] == summary["bundles"] == 4 and summary["bundle_disk"]["skipped"] == 0


@pytest.mark.parametrize("run_bytes,skips", [(30_000, True), (512 << 20, False)])
def test_gym_train_reports_the_bundle_disk_in_its_summary(tmp_path, run_bytes, skips):
    """The trainer's rollout workers keep the same budget: one step of the real loop (in-memory workspaces, every
    failure bundled); past a budget of ~one bundle the rest are skipped and counted in summary.json, under the
    default none is."""
    from tests.trainer_support import FAKE_ENVIRONMENT, config_data, train_with_fakes
    from trainer.config import TrainConfig

    data = config_data(tmp_path, bound=1.0, steps=1)
    data["environment"] = {**FAKE_ENVIRONMENT, "replay": {"rate": 0.0, "failures": True, "run_bytes": run_bytes}}
    summary = train_with_fakes(TrainConfig.parse(data, source="test"))
    disk = summary["bundle_disk"]
    on_disk = list((tmp_path / "bundles").glob("*.json"))
    assert disk["written"] == len(on_disk) >= 1 and disk["written"] + disk["skipped"] >= 8
    assert (disk["skipped"] > 0) == skips and sum(p.stat().st_size for p in on_disk) <= run_bytes
    assert json.loads((tmp_path / "summary.json").read_text())["bundle_disk"] == disk
