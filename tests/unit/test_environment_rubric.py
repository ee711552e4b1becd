"""The rubric on hand-built trajectories and gradings: each term, the weights, and sum == reward."""

from __future__ import annotations

import pytest

from gym.rubric import RubricConfig, score, total
from gym.trajectory import Event, Trajectory
from sandbox.failure import FailureKind, Verdict
from tasks.result import TestResult, summarise


def trajectory(events=(), sampled: int = 10) -> Trajectory:
    n = 5 + sampled
    return Trajectory(
        task_id="t",
        tokenizer="x",
        policy_version=0,
        prompt_ids=tuple(range(5)),
        ids=tuple(range(n)),
        sampled=(False,) * 5 + (True,) * sampled,
        logprobs=(None,) * 5 + (-0.1,) * sampled,
        events=tuple(events),
    )


def grading(passed: int, total_tests: int = 4):
    verdicts = [Verdict.PASSED] * passed + [Verdict.WRONG_ANSWER] * (total_tests - passed)
    return summarise("t", [TestResult(index=i, verdict=v) for i, v in enumerate(verdicts)])


def result(failure: FailureKind) -> Event:
    return Event(kind="result", start=0, end=1, tool="functions.bash", failure=failure)


def test_correctness_all_pass_or_fraction():
    clean = trajectory()
    assert score(RubricConfig(), clean, grading(4), turns=2, token_budget=100)["correctness"] == 1.0
    assert score(RubricConfig(), clean, grading(3), turns=2, token_budget=100)["correctness"] == 0.0
    fraction = RubricConfig(correctness={"mode": "fraction", "weight": 2.0})
    assert score(fraction, clean, grading(3), turns=2, token_budget=100)["correctness"] == 1.5
    assert score(RubricConfig(), clean, None, turns=2, token_budget=100)["correctness"] == 0.0


def test_penalties_are_shares_times_weights():
    events = [
        Event(kind="parse_error", start=6, end=8, failure=FailureKind.PARSE_ERROR),
        result(FailureKind.TOOL_ERROR),
        result(FailureKind.SANDBOX_DENIED),
        result(FailureKind.NONZERO_EXIT),
        result(FailureKind.OK),
    ]
    breakdown = score(RubricConfig(), trajectory(events), grading(4), turns=4, token_budget=100)
    assert breakdown == {
        "correctness": 1.0,
        "format": pytest.approx(-0.05),
        "tool_hygiene": pytest.approx(-0.05),
        "length": 0.0,
    }
    assert total(breakdown) == pytest.approx(0.9)
    only_tool_errors = RubricConfig(tool_hygiene={"weight": 1.0, "kinds": ["tool_error"]})
    assert score(only_tool_errors, trajectory(events), None, turns=4, token_budget=100)["tool_hygiene"] == -0.25


def test_length_penalty_past_the_free_tokens():
    config = RubricConfig(length={"weight": 0.5, "free_tokens": 20})
    assert score(config, trajectory(sampled=20), grading(4), turns=1, token_budget=120)["length"] == 0.0
    assert score(config, trajectory(sampled=70), grading(4), turns=1, token_budget=120)["length"] == pytest.approx(
        -0.25
    )
    assert score(config, trajectory(sampled=500), grading(4), turns=1, token_budget=120)["length"] == -0.5


def test_clean_episode_is_exactly_one_and_never_negative_zero():
    breakdown = score(RubricConfig(), trajectory(), grading(4), turns=3, token_budget=100)
    assert total(breakdown) == 1.0
    assert all(str(value) != "-0.0" for value in breakdown.values())


def test_unknown_keys_and_bad_modes_are_refused():
    with pytest.raises(ValueError, match="mode"):
        RubricConfig(correctness={"mode": "partial"})
    with pytest.raises(ValueError, match="weight"):
        RubricConfig(format={"weight": -1})
    with pytest.raises(ValueError, match="Extra inputs"):
        RubricConfig(style={"weight": 1})
