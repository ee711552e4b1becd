"""The verl and TRL reward functions grade for real (issue 44 item 2): programs in the real Docker sandbox, math
answers by the real check process. Forged verdicts, hedged answers, oversized and malformed inputs score 0 with
their reason beside honest controls that score 1; the batch form never runs more sandboxes than ``concurrency``;
a sample the engine cannot grade is masked, never a 0."""

from __future__ import annotations

import json
import threading
import time

import docker
import pytest

from gym.integrations import trl, verl
from gym.integrations.ground_truth import task_of
from gym.integrations.scorer import SandboxUnavailable, Scorer, ScorerConfig
from sandbox.labels import current_owner

pytestmark = pytest.mark.docker

ADD = json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})
CALL = json.dumps({"inputs": [[1, 2], [5, 7]], "outputs": [[3], [12]], "fn_name": "add"})
CONFIG = ScorerConfig.model_validate(
    {"sandbox": {"pool": {"size": 1}, "episode": {"wall_s": 3600.0}}, "grader": {"default_time_s": 2.0}}
)


@pytest.fixture(scope="module")
def scorer():
    with Scorer(CONFIG) as service:
        yield service


@pytest.fixture
def graded(scorer, monkeypatch):
    """verl's batch function over the module's scorer: ``[(data_source, response, ground_truth)] -> [dict]``."""
    monkeypatch.setattr(verl, "scorer", lambda config=None: scorer)

    def grade(rows):
        sources, responses, truths = zip(*rows)
        return verl.compute_score_batch(list(sources), list(responses), list(truths), [{"index": 0}] * len(rows))

    return grade


PROGRAMS = {  # (ground truth, response, score)
    "honest stdin program in a fence": (
        ADD,
        "Sure:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        1,
    ),
    "prints PASSED": (ADD, "print('PASSED')\nprint('All tests passed')", 0),
    "sys.exit(0) before answering": (ADD, "import sys\nsys.exit(0)", 0),
    "os._exit(0) after a success marker": (ADD, "import os\nprint('OK', flush=True)\nos._exit(0)", 0),
    "hard-codes the first test": (ADD, "print(3)", 0),
    "honest call": (CALL, "def add(a, b):\n    return a + b\n", 1),
    "AlwaysEqual object": (
        CALL,
        "class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return AlwaysEqual()\n",
        0,
    ),
    "int subclass equal to everything": (
        CALL,
        "class Rigged(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Rigged(0)\n",
        0,
    ),
    "sys.exit(0) inside the function": (CALL, "import sys\ndef add(a, b):\n    sys.exit(0)\n", 0),
    "verdict printed by the function": (CALL, "def add(a, b):\n    print('passed')\n    return None\n", 0),
}


def test_programs_forged_and_honest(graded):
    names = sorted(PROGRAMS)
    scores = graded([("taco", PROGRAMS[name][1], PROGRAMS[name][0]) for name in names])
    got = {name: score["score"] for name, score in zip(names, scores)}
    assert got == {name: float(PROGRAMS[name][2]) for name in names}
    assert not any(score["masked"] for score in scores)  # every attack is the candidate's failure, scored
    wrong = {name: score["verdict"] for name, score in zip(names, scores) if not score["score"]}
    assert all(verdict not in ("passed", "refused", "infra_error") for verdict in wrong.values()), wrong


ANSWERS = {  # response to a gold of 72 -> score
    "#### 72": 1,
    "3 * 24 = 72, so the answer is \\boxed{72}.": 1,
    "\\boxed{72} (checking: \\boxed{72.0})": 1,
    "\\boxed{71} or \\boxed{72}": 0,
    "\\boxed{71 \\text{ or } 72}": 0,
    "#### 71\n#### 72": 0,
    "The answer is 71 or 72.": 0,
    "\\boxed{73}": 0,
}


def test_math_hedges_and_honest_answers(graded):
    scores = graded([("openai/gsm8k", response, "72") for response in ANSWERS])
    assert {r: s["score"] for r, s in zip(ANSWERS, scores)} == {r: float(v) for r, v in ANSWERS.items()}
    assert not any(score["masked"] for score in scores)


def test_oversized_and_malformed_inputs_score_zero_with_a_reason(graded):
    big = "x" * (CONFIG.max_response_chars + 1)
    rows = [
        ("taco", big, ADD),
        ("openai/gsm8k", big, "72"),
        ("taco", "print(3)", "{'inputs': ['1 2']}"),  # not JSON
        ("taco", "print(3)", json.dumps({"inputs": ["1 2\n"], "outputs": []})),
        ("taco", "print(3)", "[" * 200_000),
        ("openai/gsm8k", "#### 5", "6 | 5"),  # a gold the check cannot read: the row's fault, not masked
        ("taco", "print(3)", "0" * (CONFIG.max_ground_truth_chars + 1)),
    ]
    scores = graded(rows)
    assert [s["score"] for s in scores] == [0.0] * len(rows)
    assert [s["verdict"] for s in scores] == ["refused"] * len(rows)
    reasons = [s["reason"] for s in scores]
    assert "response of" in reasons[0] and "response of" in reasons[1] and "not valid JSON" in reasons[2]
    assert "0 outputs" in reasons[3] and "nested too deeply" in reasons[4] and "cannot grade against" in reasons[5]
    assert f"at most {CONFIG.max_ground_truth_chars}" in reasons[6]


def test_the_batch_bounds_concurrent_sandboxes():
    """Six programs that each hold their container about a second, concurrency 2, no warm pool: the containers this
    process owns, counted from outside while they run, never pass two, and two were in use at once (the bound is
    reached, so the check can fail)."""
    config = ScorerConfig.model_validate(
        {"concurrency": 2, "sandbox": {"pool": {"size": 0}, "episode": {"wall_s": 3600.0}}}
    )
    sleeper = "import time\ntime.sleep(0.6)\na, b = map(int, input().split())\nprint(a + b)\n"
    counts, done = [], threading.Event()

    client = docker.from_env()

    def ours() -> set[str]:
        return {c.id for c in client.containers.list(filters={"label": f"gym.owner={current_owner()}"})}

    before = ours()  # another scorer of this process (the module's) may hold a warm container

    def count() -> None:
        while not done.is_set():
            counts.append(len(ours() - before))
            time.sleep(0.1)

    counter = threading.Thread(target=count)
    with Scorer(config) as service:
        counter.start()
        try:
            scores = service.score_many([(task_of("taco", ADD), sleeper)] * 6)
        finally:
            done.set()
            counter.join()
    assert [s.reward for s in scores] == [1.0] * 6
    assert service.peak_in_flight == 2 and max(counts) <= 2, (service.peak_in_flight, counts)
    assert 2 in counts, counts


def test_an_engine_that_does_not_answer_masks_never_zeros(monkeypatch):
    config = ScorerConfig.model_validate(
        {"sandbox": {"engine": {"base_url": "unix:///nonexistent/docker.sock"}, "pool": {"size": 0}},
         "infra_retries": 1}
    )  # fmt: skip
    with Scorer(config) as service:
        monkeypatch.setattr(verl, "scorer", lambda config=None: service)
        with pytest.raises(SandboxUnavailable, match="1 of 1 samples could not be graded"):
            verl.compute_score("taco", "print(3)", ADD)
        (zeroed,) = verl.compute_score_batch(["taco"], ["print(3)"], [ADD], None, on_infra_error="zero")
        assert zeroed["masked"] and zeroed["score"] == 0.0 and zeroed["verdict"] == "infra_error"
        reward = trl.GymReward(scorer=service)
        assert reward(["p"], ["print(3)"], data_source=["taco"], reward_model=[{"ground_truth": ADD}]) == [None]
        # math needs no engine: still graded while the engine is away
        assert verl.compute_score("openai/gsm8k", "#### 72", "72")["score"] == 1.0
