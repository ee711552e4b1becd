"""The adapters' pure mapping (issue 44 item 2): how a verl / TRL sample becomes a task and an answer, what each
outcome becomes in the library's terms, and every refusal with its reason. The graders are replaced by a scripted
scorer here; tests/integration/test_integrations_grading.py grades for real."""

from __future__ import annotations

import json

import pytest

from gym.integrations import ground_truth, trl, verl
from gym.integrations.ground_truth import UnknownDataSource, final_answer, sample, task_of
from gym.integrations.scorer import SandboxUnavailable, Score, ScorerConfig, masked, score_of
from sandbox.failure import Verdict
from tasks.math.problem import MathTask
from tasks.result import TaskResult, TestResult
from tasks.task import Task

STDIN_TRUTH = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
PASS = Score(reward=1.0, passed=True, fraction=1.0, verdict="passed")
FAIL = Score(reward=0.0, passed=False, fraction=0.5, verdict="wrong_answer", reason="token 0 differs")


class ScriptedScorer:
    """Answers each pair with the next scripted score and records what it was asked."""

    def __init__(self, *scores: Score, config: ScorerConfig | None = None) -> None:
        self.config = config or ScorerConfig()
        self.scores = list(scores)
        self.asked: list[tuple[object, str]] = []

    def score_many(self, pairs):
        self.asked += pairs
        return [self.scores.pop(0) for _ in pairs]


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("so the answer is \\boxed{72}.", "72"),
        ("\\boxed{71} or maybe \\boxed{72}", "71; 72"),  # every box counts: a hedge the check refuses
        ("\\boxed{72} and again \\boxed{ 72 }", "72"),
        ("\\boxed{\\frac{1}{\\boxed{2}}}", "\\frac{1}{\\boxed{2}}"),  # the outermost box
        ("\\fbox{5} \\boxed {6}", "5; 6"),
        ("3 * 24 = 72\n#### 72", "72"),
        ("#### 71\n#### 72 ", "71; 72"),
        ("cut off \\boxed{7", "cut off \\boxed{7"),  # an unclosed box is no answer: the whole reply is read
        ("The answer is 72.", "The answer is 72."),
        ("\\boxed{} #### 4", "4"),  # an empty box states nothing
    ],
)
def test_final_answer_reads_every_box_then_hashes_then_the_whole_reply(response, answer):
    assert final_answer(response) == answer


def test_routing_by_source_ability_and_table():
    assert isinstance(task_of("openai/gsm8k", "72"), MathTask)
    assert isinstance(task_of("codeforces", STDIN_TRUTH), Task)
    assert isinstance(task_of("mine", STDIN_TRUTH, {"ability": "code", "index": 3}), Task)
    assert task_of("mine", "4", {"index": 3}, sources={"mine": "math"}).task_id == "3"
    for source in ("searchR1_nq", None, 7):
        with pytest.raises(UnknownDataSource, match="neither code nor math"):
            task_of(source, "4", "not a dict")


def test_refusals_score_zero_with_the_reason(monkeypatch):
    config = ScorerConfig(max_response_chars=50, max_ground_truth_chars=60)
    cases = {
        "response is a NoneType": sample("taco", None, STDIN_TRUTH, config=config),
        "response of 51 characters": sample("taco", "x" * 51, STDIN_TRUTH, config=config),
        "not valid JSON": sample("taco", "print(3)", "{inputs: 1}", config=config),
        "0 outputs": sample("taco", "print(3)", json.dumps({"inputs": ["1"], "outputs": []}), config=config),
        "expected the gold answer": sample("openai/gsm8k", "4", ["4"], config=config),
        "not a mathematical answer": sample("openai/gsm8k", "4", True, config=config),
    }
    for reason, score in cases.items():
        assert isinstance(score, Score) and score.reward == 0.0 and score.verdict == "refused", reason
        assert reason in score.reason
    decoded = []
    monkeypatch.setattr(ground_truth.verl.json, "loads", lambda text: decoded.append(text))
    score = sample("taco", "print(3)", json.dumps({"inputs": ["1" * 40], "outputs": ["1"]}), config=config)
    assert score.verdict == "refused" and "at most 60" in score.reason and decoded == []  # bounded before decoding
    monkeypatch.undo()
    task, answer = sample("taco", "print(3)", STDIN_TRUTH, config=config)  # the control: within both bounds
    assert task.kind == "stdin" and answer == "print(3)"


def test_a_grader_result_becomes_a_score():
    tests = (TestResult(index=0, verdict=Verdict.PASSED), TestResult(index=1, verdict=Verdict.TIME_LIMIT, detail="t"))
    result = TaskResult(task_id="0", passed=False, fraction=0.5, tests=tests)
    assert score_of(result) == Score(reward=0.0, passed=False, fraction=0.5, verdict="time_limit", reason="t")
    assert score_of(result, "fraction").reward == 0.5
    infra = result.model_copy(update={"infra_error": True})
    assert score_of(infra).masked and score_of(infra).verdict == "infra_error"


def test_verl_batch_maps_each_outcome_with_the_same_keys(monkeypatch):
    fake = ScriptedScorer(PASS, FAIL)
    monkeypatch.setattr(verl, "scorer", lambda config=None: fake)
    scores = verl.compute_score_batch(
        ["taco", "taco", "openai/gsm8k"],
        ["```python\nprint(3)\n```", "print(4)", "#### 72"],
        [STDIN_TRUTH, "{bad json", "72"],
        [{"index": 0}, {"index": 1}, None],
    )
    assert [s["score"] for s in scores] == [1.0, 0.0, 0.0]
    assert [s["verdict"] for s in scores] == ["passed", "refused", "wrong_answer"]
    assert len({tuple(s) for s in scores}) == 1  # verl stacks reward_extra_info key by key
    assert [answer for _, answer in fake.asked] == ["```python\nprint(3)\n```", "72"]  # the refused one never graded
    single = ScriptedScorer(PASS)
    monkeypatch.setattr(verl, "scorer", lambda config=None: single)
    out = verl.compute_score("taco", "print(3)", STDIN_TRUTH, {"index": 5}, reward_router_address=None)
    assert out["score"] == 1.0 and out["acc"] == 1.0


def test_verl_masked_samples_raise_by_default_or_score_zero_marked(monkeypatch):
    monkeypatch.setattr(verl, "scorer", lambda config=None: ScriptedScorer(PASS, masked("engine down")))
    with pytest.raises(SandboxUnavailable, match="1 of 2 samples.*engine down"):
        verl.compute_score_batch(["taco"] * 2, ["a", "b"], [STDIN_TRUTH] * 2, None)
    monkeypatch.setattr(verl, "scorer", lambda config=None: ScriptedScorer(PASS, masked("engine down")))
    scores = verl.compute_score_batch(["taco"] * 2, ["a", "b"], [STDIN_TRUTH] * 2, None, on_infra_error="zero")
    assert [(s["score"], s["masked"]) for s in scores] == [(1.0, False), (0.0, True)]


def test_verl_configuration_errors_are_raised(monkeypatch):
    monkeypatch.setattr(verl, "scorer", lambda config=None: ScriptedScorer())
    with pytest.raises(UnknownDataSource):
        verl.compute_score("searchR1_nq", "paris", "Paris")
    with pytest.raises(TypeError, match="sourcse"):
        verl.compute_score("taco", "print(3)", STDIN_TRUTH, sourcse={})
    with pytest.raises(ValueError, match="differ in length"):
        verl.compute_score_batch(["taco"], ["a", "b"], [STDIN_TRUTH], None)
    with pytest.raises(ValueError, match="on_infra_error"):
        verl.compute_score("taco", "a", STDIN_TRUTH, on_infra_error="mask")


def test_trl_reward_reads_verl_columns_and_conversational_completions():
    fake = ScriptedScorer(PASS, FAIL, masked("engine down"))
    reward = trl.GymReward(scorer=fake)
    completions = [
        [{"role": "assistant", "content": "print(3)"}],
        "print(4)",
        "#### 72",
        [{"role": "assistant", "content": None}],
    ]
    rewards = reward(
        ["p"] * 4,
        completions,
        data_source=["taco", "taco", "openai/gsm8k", "taco"],
        reward_model=[{"ground_truth": STDIN_TRUTH}] * 2 + [{"ground_truth": "72"}, {"ground_truth": STDIN_TRUTH}],
        extra_info=[{"index": i} for i in range(4)],
        trainer_state=None,
    )
    assert rewards == [1.0, 0.0, None, 0.0]  # masked is None: TRL gives it no advantage
    assert [answer for _, answer in fake.asked] == ["print(3)", "print(4)", "72"]
    assert reward.last[3].verdict == "refused" and reward.__name__ == "code_rl_gym"


def test_trl_reward_by_task_id_and_rows_that_fit_nothing(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"problem": "2+2?", "answer": "4", "id": "q1"}) + "\n")
    fake = ScriptedScorer(PASS)
    reward = trl.GymReward(path, scorer=fake)
    assert reward(["p"], ["so \\boxed{4}"], task_id=["q1"]) == [1.0]
    assert fake.asked[0][0].gold == "4" and fake.asked[0][1] == "4"
    with pytest.raises(trl.DatasetMismatch, match="not a task"):
        reward(["p"], ["4"], task_id=["q2"])
    with pytest.raises(trl.DatasetMismatch, match="no data_source column"):
        trl.GymReward(scorer=fake)(["p"], ["4"], answer=["4"])
    with pytest.raises(trl.DatasetMismatch, match="neither a ground_truth"):
        trl.GymReward(scorer=fake)(["p"], ["4"], data_source=["taco"], reward_model=[{"style": "rule"}])
