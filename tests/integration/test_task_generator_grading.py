"""Generated tasks through the real grader: `python -m gym tasks generate` files, loaded as CodeContests
rows, graded by `tasks.grader.Grader` in a `WorkspacePool` (a fresh container per task).

One task per template (levels and splits alternating) passes with its reference solution from
``*.solutions.jsonl``; the rows' deliberately wrong programs fail with ``wrong_answer``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from tasks.formats import codecontests
from tasks.generator import HIDDEN_TESTS, LEVELS, TEMPLATES, TaskSpec, catalogue, degenerates, render, write
from tasks.grader import GraderConfig, grade_pairs, pair_submissions
from tasks.loader import load_tasks
from tasks.submission import Submission, read_submissions

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})
# the rows ask for 2 s per test; 4 s keeps a busy machine from turning a pass into a time_limit
CONFIG = GraderConfig(min_time_s=4.0)
WRONG = ("divisible", "replace_char")  # one number and one string template: two containers


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    per_split = len(TEMPLATES) * len(LEVELS)  # round-robin draw: one task of every (template, level)
    write(out, seed=7, train=per_split, heldout=per_split)
    return out


def _chosen(generated: Path) -> list[tuple[str, dict]]:
    """``(split, row)``: one row per template, its level and split alternating over the templates."""
    rows = {}
    for split in ("train", "heldout"):
        for line in (generated / f"{split}.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows[(split, row["generator"]["template"], row["generator"]["level"])] = row
    return [
        (split, rows[(split, name, LEVELS[i % len(LEVELS)])])
        for i, name in enumerate(TEMPLATES)
        for split in [("train", "heldout")[i % 2]]
    ]


def test_references_pass_and_wrong_programs_fail_in_the_sandbox(generated):
    chosen = _chosen(generated)
    tasks, references = [], {}
    for split in ("train", "heldout"):
        report = load_tasks(generated / f"{split}.jsonl", "codecontests")
        assert report.errors == ()
        tasks += report.tasks
        solutions, errors = read_submissions(generated / f"{split}.solutions.jsonl")
        assert not errors and all(s.expect == "passed" for s in solutions)
        references.update({s.task_id: s for s in solutions})
    wrong = [
        Submission(task_id=row["name"], completion=row["incorrect_solutions"]["solution"][0])
        for _, row in chosen
        if row["generator"]["template"] in WRONG
    ]
    pairs, unknown = pair_submissions(tasks, [references[row["name"]] for _, row in chosen] + wrong)
    assert not unknown and len(pairs) == len(TEMPLATES) + len(WRONG)

    results = grade_pairs(pairs, CONFIG, SANDBOX)

    assert not any(r.infra_error for r in results), [r.detail for r in results if r.infra_error]
    passing, failing = results[: len(TEMPLATES)], results[len(TEMPLATES) :]
    assert [r.task_id for r in passing] == [row["name"] for _, row in chosen]
    for result in passing:
        assert result.passed and result.fraction == 1.0, (result.task_id, [t.detail for t in result.tests])
        assert len(result.tests) >= 6
    for result in failing:
        verdicts = {t.verdict for t in result.tests}
        assert not result.passed and result.fraction < 1.0 and verdicts <= {Verdict.PASSED, Verdict.WRONG_ANSWER}
        assert Verdict.WRONG_ANSWER in verdicts, result.task_id
    assert {split for split, _ in chosen} == {"train", "heldout"}
    assert {row["generator"]["level"] for _, row in chosen} == set(LEVELS)


def _degenerate_source(spec_id: str, name: str, params_in: str) -> tuple[TaskSpec, str]:
    spec = next(s for s in catalogue() if s.task_id == spec_id)
    row = render(spec, 0, params_in).row
    groups = (row["public_tests"], row["private_tests"])
    tests = [(i, o) for group in groups for i, o in zip(group["input"], group["output"])]
    return spec, next(p.source for p in degenerates(spec, tests, params_in) if p.name == name)


def test_degenerate_programs_passed_the_tests_as_first_drawn_and_fail_the_strengthened_ones():
    """Issue 41 class 4 in the real grader: constant YES on an outside find (divisible/L1/D=78, seed 0) and the
    reference with K one too high on a main-job task (count_greater/L2/K=98, parameters in the input) pass the
    task's tests as first drawn (its hidden tests cut back to HIDDEN_TESTS) and fail the strengthened task,
    beside the references, which pass both."""
    cases = [("divisible/L1/D=78", "constant 'YES\\n'", "statement"), ("count_greater/L2/K=98", "K+1", "input")]
    tasks, submissions = [], []
    for task_id, name, params_in in cases:
        spec, source = _degenerate_source(task_id, name, params_in)
        task = render(spec, 0, params_in)
        assert task.added == 1
        first = json.loads(json.dumps(task.row))
        first["name"] = f"{task_id}#as-drawn"
        first["private_tests"] = {k: v[:HIDDEN_TESTS] for k, v in first["private_tests"].items()}
        for row in (task.row, first):
            tasks.append(codecontests.parse(len(tasks), row))
            submissions += [Submission(task_id=row["name"], completion=c) for c in (task.reference, source)]
    pairs, unknown = pair_submissions(tasks, submissions)
    assert not unknown and len(pairs) == 8

    results = grade_pairs(pairs, CONFIG, SANDBOX)

    assert not any(r.infra_error for r in results), [r.detail for r in results if r.infra_error]
    passed = {(r.task_id, s.completion == t.solutions[0]): r.passed for r, (t, s) in zip(results, pairs)}
    for task_id, _, _ in cases:
        assert passed[(task_id, True)] and passed[(f"{task_id}#as-drawn", True)], task_id  # references pass both
        assert passed[(f"{task_id}#as-drawn", False)], task_id  # the weak tests let the degenerate program through
        assert not passed[(task_id, False)], task_id  # the added hidden test rejects it
