"""End to end in real containers: the scripted reference policy solves a shipped CP task in several
tool turns; the trajectory is token-exact; its bundle replays identically; corrupted bundles do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from gym.bundle import bundle_of, read_bundle, write_bundle
from gym.environment import Environment
from gym.episode import EpisodeResult, run_episode
from gym.replay import replay_files
from gym.scripted import load_scripted
from gym.trajectory import assert_token_exact, retokenization_drift
from sandbox.pool import WorkspacePool
from tasks.family import CodeFamily
from tasks.grader import Grader
from tasks.task import StdinTest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TASK = "codecontests/9100_A. Average"  # a stdin task with a public example: the script runs it


@pytest.fixture(scope="module")
def env() -> Environment:
    return Environment.load(ROOT / "configs" / "cp_smoke.yaml")


@pytest.fixture(scope="module")
def solved(env) -> EpisodeResult:
    sandbox = env.config.sandbox.model_copy(update={"pool": env.config.sandbox.pool.model_copy(update={"size": 1})})

    async def main():
        async with WorkspacePool(sandbox) as pool:
            return await run_episode(
                env,
                load_scripted("reference", env),
                CodeFamily(pool, Grader(pool, env.config.grader)),
                env.tasks[TASK],
                seed=1,
                group_id="e2e",
            )

    return trio.run(main)


def test_reference_solves_the_task_in_several_tool_turns(env, solved):
    t = solved.trajectory
    assert t.reward == 1.0 and t.end_reason == "submit" and not t.masked and t.failures == ()
    assert solved.grading.passed and len(solved.grading.tests) >= 2
    assert [r.recipient for r in solved.tool_calls] == ["functions.write_file", "functions.bash", "functions.submit"]
    assert all(r.outcome.failure == "ok" for r in solved.tool_calls)
    example = next(test for test in env.tasks[TASK].public_tests if isinstance(test, StdinTest))
    ran = solved.tool_calls[1].outcome.output
    printed = ran.split("stdout:\n", 1)[1].split()
    assert ran.startswith("[exit code 0]\nstdout:\n") and [float(x) for x in printed] == pytest.approx(
        [float(x) for x in example.output.split()]
    )  # it ran on the example input
    assert solved.answer == env.reference_programs()[TASK]


def test_trajectory_is_token_exact(env, solved):
    t = solved.trajectory
    assert_token_exact(t, t.messages, env.tokenizer)
    assert not retokenization_drift(t, env.tokenizer).drifted
    calls = [e for e in t.events if e.kind == "call"]
    results = [e for e in t.events if e.kind == "result"]
    assert len(calls) == 3 and len(results) == 2  # submit ends the episode: no observation after it
    for event in calls:
        assert all(t.sampled[event.start : event.end])
    for event in results:
        assert not any(t.sampled[event.start : event.end])


def write(env, solved, path: Path, edit=None) -> Path:
    bundle = bundle_of(env, solved, "sampled", "")
    write_bundle(path, bundle)
    if edit is not None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return path


def test_bundle_replays_identically_and_corruptions_are_reported(env, solved, tmp_path):
    def tool_output(data):  # what the sandbox said is changed
        data["tool_calls"][1]["outcome"]["output"] = "[exit code 0]\nstdout:\n42\n"

    def hidden_test(data):  # the task's expected output is changed: regrading disagrees
        data["task"]["tests"][0]["output"] = "-1\n"

    def program(data):  # the program handed in is changed, everywhere the bundle holds it
        data["answer"] = data["answer"].replace("print", "pass  #")
        data["tool_calls"][2]["outcome"]["submitted"] = data["answer"]

    paths = [
        write(env, solved, tmp_path / "clean.json"),
        write(env, solved, tmp_path / "output.json", tool_output),
        write(env, solved, tmp_path / "test.json", hidden_test),
        write(env, solved, tmp_path / "program.json", program),
    ]
    assert read_bundle(paths[0]).image_digest == ""  # unknown digest: noted, not compared
    clean, output, test, changed = replay_files(paths, concurrency=2)
    assert clean.identical and clean.tool_calls == 3 and clean.reward_replayed == 1.0, clean.differences
    assert any("image digest" in note for note in clean.notes)
    assert {d.what for d in output.differences} == {
        "tool call 1 result in the trajectory",
        "tool call 1 (functions.bash) output",
    }
    assert {d.what for d in test.differences} == {"grading (passed, fraction, infra_error, verdicts)", "reward"}
    assert test.reward_replayed == 0.0
    assert "answer" in {d.what for d in changed.differences}
    assert "tool call 2 (functions.submit) submitted program" in {d.what for d in changed.differences}
