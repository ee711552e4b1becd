"""Math episodes end to end without Docker (in-memory workspaces, the real math-verify check): the answer is the
final-channel message, right is reward 1.0 and wrong 0.0 through the rubric, and nothing the policy writes (an
answer only in analysis, several answers, code blocks of guesses, a huge reply) raises past its episode."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.episode import run_episode
from gym.format.message import Message
from gym.scripted import load_scripted
from sandbox.failure import Verdict
from tasks.math.family import MathFamily
from tasks.math.grader import MathGrader
from tasks.math.problem import MathTask
from tests.fakes import FakePool, TurnsEngine, tokenizer

ROOT = Path(__file__).resolve().parents[2]
TASK = "gsm8k/3"  # 45 boxes of 24 pencils: gold 1080


@pytest.fixture(scope="module")
def env() -> Environment:
    return Environment(EnvironmentConfig.from_file(ROOT / "configs" / "math_smoke.yaml"), tokenizer())


def episode(env, engine, task_id=TASK):
    family = MathFamily(FakePool(), MathGrader(env.config.math))
    return trio.run(lambda: run_episode(env, engine, family, env.tasks[task_id], seed=3, group_id="g"))


def final(text: str) -> list[list[Message]]:
    return [[Message.assistant("analysis", "45 * 24 = 1080."), Message.assistant("final", text)]]


def test_the_environment_loads_math_tasks_with_their_own_prompt_and_tools(env):
    assert len(env.tasks) == 36 and all(isinstance(t, MathTask) for t in env.tasks.values())
    task = env.tasks[TASK]
    assert [spec.name for spec in env.toolbox_for(task).specs()] == ["python"]  # no submit, no files
    system, developer, user = env.prompt(task)
    assert "final answer" in developer.content and "functions.submit" not in developer.content
    assert user.content == task.problem and "1080" not in user.content


@pytest.mark.parametrize("answer", ["1080", "1,080", "The school gets 1080 pencils.", "$1080$", "\\boxed{1080}"])
def test_a_right_final_answer_scores_one(env, answer):
    result = episode(env, TurnsEngine(env, final(answer)))
    t = result.trajectory
    assert (t.reward, t.reward_breakdown["correctness"], t.end_reason, t.masked) == (1.0, 1.0, "final", False)
    assert result.answer == answer and result.answer_source == "final" and result.grading.passed


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("1079", "1079 is not 1080"),
        ("1080 or 1079", "several different answers"),
        ("```\n1079\n```\n```\n1080\n```", "several different answers"),  # code blocks do not pick one
        ("", "empty answer"),
        ("1080 " * 400, "1999 characters (at most 512 are read)"),
    ],
    ids=["wrong", "hedge", "code-blocks", "empty", "long"],
)
def test_wrong_and_gaming_answers_score_zero_without_raising(env, answer, detail):
    result = episode(env, TurnsEngine(env, final(answer)))
    t = result.trajectory
    assert t.reward == 0.0 and t.reward_breakdown["correctness"] == 0.0 and not t.masked
    assert result.grading.tests[0].verdict == Verdict.WRONG_ANSWER and detail in result.grading.detail


def test_a_reply_past_the_token_budget_is_a_classified_failure(env):
    result = episode(env, TurnsEngine(env, final("1080 " * 50_000)))
    t = result.trajectory
    assert (t.end_reason, result.answer, result.grading, t.masked) == ("max_tokens", None, None, False)
    assert t.reward_breakdown["correctness"] == 0.0 and t.reward < 0


def test_an_answer_only_in_the_analysis_channel_is_no_answer(env):
    engine = TurnsEngine(env, [[Message.assistant("analysis", "The answer is 1080.")]])
    result = episode(env, engine)
    t = result.trajectory
    assert result.answer is None and result.grading is None and engine.calls == env.config.episode.max_turns
    assert (t.reward, t.end_reason, t.masked) == (0.0, "max_turns", False)


def test_submit_is_not_a_tool_of_math_tasks(env):
    turns = [[Message.tool_call("submit", {"code": "1080"})], *final("1080")]
    result = episode(env, TurnsEngine(env, turns))
    assert (
        result.tool_calls[0].outcome.failure == "tool_error" and "unknown tool" in result.tool_calls[0].outcome.output
    )
    assert result.answer_source == "final" and result.trajectory.reward_breakdown["correctness"] == 1.0


@pytest.mark.parametrize(("policy", "reward"), [("reference", 1.0), ("wrong", 0.0), ("empty", 0.0)])
def test_scripted_policies_on_math_tasks(env, policy, reward):
    engine = load_scripted(policy, env)
    for task_id in ("gsm8k/0", "competition/samples/precalculus/10.json", "plain/plain-11"):
        result = episode(env, engine, task_id)
        assert result.trajectory.reward == reward and result.answer_source == "final", (policy, task_id)


def test_warm_start_demos_answer_math_tasks_without_a_code_block(env):
    from trainer.warmup import final_answer_demos

    demos = {d.task_id: d for d in final_answer_demos(env, None)}
    assert len(demos) == 36
    answer = [m for m in demos[TASK].messages if m.is_final][-1].content
    assert answer == env.reference_programs()[TASK] == "1,080" and "```" not in answer
