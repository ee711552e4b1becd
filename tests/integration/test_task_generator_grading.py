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
from tasks.generator import LEVELS, TEMPLATES, write
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
