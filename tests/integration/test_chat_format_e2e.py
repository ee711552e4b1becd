"""End to end in real containers in a model family's chat format: the shipped CP smoke environment with a Qwen
tokenizer directory (the real Qwen2.5 chat template; chat_format auto picks qwen), the scripted policy emitting
Qwen's <tool_call> JSON as token ids, the real tools in a real workspace, grading in a fresh container; the
trajectory is token-exact with no drift and its bundle replays identically (the template read again)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gym.bundle import bundle_of, write_bundle
from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.episode import run_episode
from gym.overrides import parse_override
from gym.replay import replay_files
from gym.scripted import load_scripted
from gym.trajectory import assert_token_exact, retokenization_drift
from sandbox.pool import WorkspacePool
from tasks.family import CodeFamily
from tasks.grader import Grader
from tests.chat_format_support import family_dir

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TASK = "codecontests/9100_A. Average"  # a stdin task with a public example: the script runs it


def test_a_qwen_episode_in_real_containers_is_token_exact_and_replays(tmp_path):
    override = parse_override(f"tokenizer=hf:{family_dir('qwen')}")
    env = Environment(EnvironmentConfig.from_file(ROOT / "configs" / "cp_smoke.yaml", overrides=[override]))
    assert env.chat_format.name == "qwen"
    sandbox = env.config.sandbox.model_copy(update={"pool": env.config.sandbox.pool.model_copy(update={"size": 1})})

    async def main():
        async with WorkspacePool(sandbox) as pool:
            family = CodeFamily(pool, Grader(pool, env.config.grader))
            return await run_episode(env, load_scripted("reference", env), family, env.tasks[TASK], seed=1)

    solved = trio.run(main)
    t = solved.trajectory
    assert t.reward == 1.0 and t.end_reason == "submit" and t.failures == () and t.chat_format == "qwen"
    assert [r.recipient for r in solved.tool_calls] == ["functions.write_file", "functions.bash", "functions.submit"]
    ran = solved.tool_calls[1].outcome.output
    assert ran.startswith("[exit code 0]\nstdout:\n")  # the program ran on the example input in the sandbox
    assert ran in env.tokenizer.decode(t.ids)  # inside its <tool_response>
    assert_token_exact(t, t.messages, env.tokenizer, env.format_for(env.tasks[TASK]))
    assert not retokenization_drift(t, env.tokenizer).drifted
    path = tmp_path / "bundle.json"
    write_bundle(path, bundle_of(env, solved, "sampled", ""))
    [report] = replay_files([path], concurrency=1)
    assert report.identical and report.tool_calls == 3 and report.reward_replayed == 1.0, report.differences
