"""The episode loop without Docker: an in-memory workspace, a fake grader, scripted engines.

Covers every way an episode ends (submit, final answer, turn budget, token
budget, parse error, infrastructure failure), that bad model output is data
and never an exception, that the reference policy's trajectory is token-exact,
and the rubric's terms on real episodes.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import trio

from gym.environment import Environment
from gym.episode import EpisodeResult, run_episode
from gym.format.message import Message
from gym.scripted import load_scripted
from gym.trajectory import Seeds, assert_token_exact
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import ExecResult
from tasks.family import CodeFamily
from tests.fakes import FailingEngine, FakeGrader, FakePool, GarbageEngine, TurnsEngine, make_env


@pytest.fixture(scope="module")
def env() -> Environment:
    return make_env()


def episode(
    env: Environment,
    engine,
    pool: FakePool | None = None,
    grader=None,
    task_id: str | None = None,
) -> tuple[EpisodeResult, FakePool, FakeGrader]:
    pool = pool or FakePool()
    grader = grader or FakeGrader(env, pool)
    task = env.tasks[task_id] if task_id else next(iter(env.tasks.values()))
    result = trio.run(lambda: run_episode(env, engine, CodeFamily(pool, grader), task, seed=7, group_id="g"))
    return result, pool, grader


def test_reference_policy_solves_in_three_tool_turns_token_exact(env):
    result, pool, grader = episode(env, load_scripted("reference", env))
    t = result.trajectory
    assert t.reward == 1.0 and t.end_reason == "submit" and not t.masked and t.failures == ()
    assert [r.recipient for r in result.tool_calls] == ["functions.write_file", "functions.bash", "functions.submit"]
    assert result.answer_source == "submit" and grader.graded == [result.answer]
    assert pool.acquired == pool.released == 1
    assert_token_exact(t, t.messages, env.tokenizer)
    sampled = [lp for lp, s in zip(t.logprobs, t.sampled) if s]
    assert sampled and set(sampled) == {0.0} and not any(t.sampled[: len(t.prompt_ids)])
    assert t.group_id == "g" and t.seeds == Seeds(episode=7)
    assert set(t.timings) == {"policy", "tools", "grading", "workspace", "total"}
    assert sum(t.reward_breakdown.values()) == t.reward
    example = env.tasks[t.task_id].public_tests[0]
    bash = result.tool_calls[1].call()
    assert bash.arguments == {"command": "python3 solution.py", "stdin": example.input}  # runs the sample input


def test_garbage_output_is_data_and_the_episode_continues_to_the_turn_budget():
    env = make_env(episode={"max_turns": 3, "max_tokens_per_turn": 32, "on_parse_error": "continue"})
    result, pool, grader = episode(env, GarbageEngine(env))
    t = result.trajectory
    assert result.turns == 3 and t.end_reason == "max_turns" and result.grading is None and grader.graded == []
    assert [e.kind for e in t.events] == ["parse_error"] * 3
    assert t.failures == (FailureKind.PARSE_ERROR,) * 3 and not t.masked
    assert t.reward == pytest.approx(-0.2) and t.reward_breakdown["format"] == pytest.approx(-0.2)
    # each parse error span lies inside a sampled run, and the next turn reopens with <|start|>assistant
    for event in t.events:
        assert all(t.sampled[event.start : event.end])
    assert pool.acquired == pool.released == 0  # no tool ran: no workspace was started


def test_parse_error_can_end_the_episode():
    env = make_env(episode={"on_parse_error": "end"})
    result, _, _ = episode(env, GarbageEngine(env))
    assert result.turns == 1 and result.trajectory.end_reason == "parse_error" and result.trajectory.reward == -0.2


def test_token_budget_ends_the_episode(env):
    prompt = len(env.harmony.render_prompt(env.prompt(next(iter(env.tasks.values())))))
    tight = make_env(episode={"max_total_tokens": prompt + 40, "max_tokens_per_turn": 40})
    result, _, _ = episode(tight, load_scripted("reference", tight))
    t = result.trajectory
    assert t.end_reason == "max_tokens" and len(t.ids) == prompt + 40 and result.turns == 1
    assert t.events[0].kind == "parse_error" and "truncated" in t.events[0].detail


def test_final_channel_answer_is_graded(env):
    task = next(iter(env.tasks.values()))
    reference = env.reference_programs()[task.task_id]
    turns = [
        [Message.assistant("analysis", "Easy."), Message.assistant("final", f"Here:\n```python\n{reference}```\n")]
    ]
    result, _, grader = episode(env, TurnsEngine(env, turns), task_id=task.task_id)
    assert result.trajectory.end_reason == "final" and result.answer == reference and grader.graded == [reference]
    assert result.trajectory.reward == 1.0 and result.tool_calls == ()
    assert_token_exact(result.trajectory, result.trajectory.messages, env.tokenizer)


def test_a_workspace_is_started_at_the_first_tool_call_and_only_then(env):
    task = next(iter(env.tasks.values()))
    reference = env.reference_programs()[task.task_id]
    final = [[Message.assistant("final", f"```python\n{reference}```")]]
    _, pool, _ = episode(env, TurnsEngine(env, final), task_id=task.task_id)
    assert pool.acquired == pool.released == 0
    inline = [[Message.tool_call("submit", {"code": reference})]]  # an inline submit reads no file
    result, pool, _ = episode(env, TurnsEngine(env, inline), task_id=task.task_id)
    assert result.trajectory.reward == 1.0 and pool.acquired == pool.released == 0
    two = [
        [Message.tool_call("list_dir", {})],
        [Message.tool_call("list_dir", {})],
        [Message.tool_call("submit", {"code": reference})],
    ]
    result, pool, _ = episode(env, TurnsEngine(env, two), task_id=task.task_id)
    assert len(result.tool_calls) == 3 and pool.acquired == pool.released == 1 and pool.max_held == 1


def test_tool_errors_become_observations_and_cost_hygiene(env):
    task = next(iter(env.tasks.values()))
    reference = env.reference_programs()[task.task_id]
    turns = [
        [Message.tool_call("rm_rf", {"path": "/"})],
        [Message.tool_call("write_file", {"path": "a.py"})],
        [Message.tool_call("submit", {"code": reference})],
    ]
    result, _, _ = episode(env, TurnsEngine(env, turns), task_id=task.task_id)
    t = result.trajectory
    results = [m for m in t.messages if m.role == "tool"]
    assert [m.name for m in results] == ["functions.rm_rf", "functions.write_file"]
    assert "unknown tool" in results[0].content and "content" in results[1].content
    assert t.failures == (FailureKind.TOOL_ERROR, FailureKind.TOOL_ERROR)
    assert t.reward_breakdown == {"correctness": 1.0, "format": 0.0, "tool_hygiene": -0.1, "length": 0.0}
    assert t.reward == pytest.approx(0.9)
    assert_token_exact(t, t.messages, env.tokenizer)


def test_engine_failure_masks_the_episode(env):
    result, pool, grader = episode(env, FailingEngine())
    t = result.trajectory
    assert t.masked and t.reward is None and t.end_reason == "infra_error" and t.failures == (FailureKind.INFRA_ERROR,)
    assert grader.graded == [] and pool.acquired == pool.released == 0


def test_grader_infra_error_masks_never_zero(env):
    pool = FakePool()
    result, _, _ = episode(env, load_scripted("reference", env), pool=pool, grader=FakeGrader(env, pool, infra=True))
    t = result.trajectory
    assert t.masked and t.reward is None and t.reward_breakdown == {} and FailureKind.INFRA_ERROR in t.failures


def test_lost_runner_during_a_tool_call_masks(env):
    lost = ExecResult(failure=FailureKind.INFRA_ERROR, detail="runner stream closed")
    pool = FakePool(
        {("bash", "-c", "python3 solution.py"): lost, ("bash", "-c", "python3 -m py_compile solution.py"): lost}
    )
    result, _, grader = episode(env, load_scripted("reference", env), pool=pool)
    t = result.trajectory
    assert t.masked and t.end_reason == "infra_error" and grader.graded == [] and len(result.tool_calls) == 2
    assert t.failures == (FailureKind.INFRA_ERROR,) and t.events[-1].failure == FailureKind.INFRA_ERROR


class DeadEnginePool(FakePool):
    """Every workspace start fails: the engine does not answer."""

    @asynccontextmanager
    async def acquire(self, owner: str = "", keys: frozenset[str] | None = None):
        self.acquired += 1
        raise InfraError("Docker engine call 'create' failed: connection refused")
        yield  # an async generator all the same


class BrokenStartPool(FakePool):
    """Every workspace start fails with an error that is not an ``InfraError`` (a bug below the pool)."""

    @asynccontextmanager
    async def acquire(self, owner: str = "", keys: frozenset[str] | None = None):
        self.acquired += 1
        raise RuntimeError("use the pool inside `async with WorkspacePool(...)`")
        yield


@pytest.mark.parametrize("pool_type", [DeadEnginePool, BrokenStartPool])
def test_a_workspace_that_cannot_start_masks_the_episode_instead_of_raising(env, pool_type):
    result, pool, grader = episode(env, load_scripted("reference", env), pool=pool_type())
    t = result.trajectory
    assert t.masked and t.reward is None and t.end_reason == "infra_error" and t.failures == (FailureKind.INFRA_ERROR,)
    # the first tool call started it: its outcome is the infrastructure's, never the candidate's tool error
    assert result.turns == 1 and [r.outcome.failure for r in result.tool_calls] == [FailureKind.INFRA_ERROR]
    assert grader.graded == [] and pool.acquired == 1
    assert ("could not be started" if pool_type is BrokenStartPool else "connection refused") in result.infra


def test_policy_version_is_the_oldest_that_sampled(env):
    task = next(iter(env.tasks.values()))
    turns = [[Message.tool_call("list_dir", {})], [Message.tool_call("submit", {"code": "print()"})]]
    result, _, _ = episode(env, TurnsEngine(env, turns, version=5, step=1), task_id=task.task_id)
    assert result.trajectory.policy_version == 5 and result.trajectory.reward == 0.0
