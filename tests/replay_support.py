"""The honest bundle of a real episode and `gym` as a subprocess, for the modules that replay bundles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from gym.bundle import bundle_of, write_bundle
from gym.environment import Environment
from gym.episode import run_episode
from gym.scripted import load_scripted
from sandbox.pool import WorkspacePool
from tasks.family import CodeFamily
from tasks.grader import Grader

ROOT = Path(__file__).resolve().parents[1]
TASK = "codecontests/9100_A. Average"


def gym(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> dict:
    """The bundle of a real episode: the scripted reference solves a shipped task in three tool calls."""
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    sandbox = env.config.sandbox.model_copy(update={"pool": env.config.sandbox.pool.model_copy(update={"size": 1})})

    async def main():
        async with WorkspacePool(sandbox) as pool:
            family = CodeFamily(pool, Grader(pool, env.config.grader))
            return await run_episode(
                env, load_scripted("reference", env), family, env.tasks[TASK], seed=1, group_id="a"
            )

    solved = trio.run(main)
    assert solved.trajectory.reward == 1.0
    path = write_bundle(tmp_path_factory.mktemp("honest") / "honest.json", bundle_of(env, solved, "sampled", ""))
    return json.loads(path.read_text())
