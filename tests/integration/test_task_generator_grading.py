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
    """Issue 41 class 4 in the real grader: programs of the degenerate family pass a task's tests as first drawn
    (its hidden tests cut back to HIDDEN_TESTS) and fail the strengthened task, beside the references, which pass
    both: constant YES (divisible/L1/D=78, an outside find of the first round), D off by 2 (divisible/L1/D=6, the
    second round's), and on main-job tasks (parameters in the input) K one too high, a constant once per case, and
    the other operation with a letter no drawn test holds (count C or D)."""
    cases = [
        ("divisible/L1/D=78", "constant 'YES\\n'", "statement"),
        ("divisible/L1/D=6", "D-2", "statement"),
        ("count_greater/L2/K=98", "K+1", "input"),
        ("count_greater/L2/K=98", "per case '0'", "input"),
        ("count_char/L2/C=a", "count_two(C=a,D=y)", "input"),
    ]
    tasks, submissions = [], []
    for task_id, name, params_in in cases:
        spec, source = _degenerate_source(task_id, name, params_in)
        task = render(spec, 0, params_in)
        assert task.added >= 1
        first = json.loads(json.dumps(task.row))
        first["name"] = f"{task_id}#{name}#as-drawn"
        first["private_tests"] = {k: v[:HIDDEN_TESTS] for k, v in first["private_tests"].items()}
        for row in (dict(task.row, name=f"{task_id}#{name}"), first):
            tasks.append(codecontests.parse(len(tasks), row))
            submissions += [Submission(task_id=row["name"], completion=c) for c in (task.reference, source)]
    pairs, unknown = pair_submissions(tasks, submissions)
    assert not unknown and len(pairs) == 4 * len(cases)

    results = grade_pairs(pairs, CONFIG, SANDBOX)

    assert not any(r.infra_error for r in results), [r.detail for r in results if r.infra_error]
    passed = {(r.task_id, s.completion == t.solutions[0]): r.passed for r, (t, s) in zip(results, pairs)}
    for task_id, name, _ in cases:
        key = f"{task_id}#{name}"
        assert passed[(key, True)] and passed[(f"{key}#as-drawn", True)], key  # references pass both
        assert passed[(f"{key}#as-drawn", False)], key  # the weak tests let the degenerate program through
        assert not passed[(key, False)], key  # the added hidden tests reject it


# The outside round's programs of 2026-11-28 (report section B), verbatim: each passed every test of its task in
# this grader as the generator wrote it before the fix; the last is a solution (the same answer on every n).
OUTSIDE = [
    ("divisible/L3/D=19,E=15", "for _ in range(int(input())):\n    input()\n    print('NO')\n", False),
    ("divisible/L1/D=6", "D = 4\nn = int(input())\nprint('YES' if n % D == 0 else 'NO')\n", False),
    ("divisible/L1/D=9", "D = 6\nn = int(input())\nprint('YES' if n % D == 0 else 'NO')\n", False),
    (
        "divisible/L3/D=5,E=14",
        "D = 2\nE = 14\nfor _ in range(int(input())):\n    n = int(input())\n"
        "    print('YES' if n % D == 0 and n % E != 0 else 'NO')\n",
        False,
    ),
    (
        "divisible/L3/D=2,E=3",
        "D = 2\nE = 6\nfor _ in range(int(input())):\n    n = int(input())\n"
        "    print('YES' if n % D == 0 and n % E != 0 else 'NO')\n",
        True,
    ),
]


def test_the_outside_rounds_programs_fail_the_tasks_as_generated_now():
    """The outside programs on their tasks as `tasks generate` writes them now, in the real grader: each fails
    (wrong_answer on a test), the program with the reference's answers passes, and every reference passes."""
    by_id = {spec.task_id: spec for spec in catalogue()}
    tasks, submissions = [], []
    for task_id, source, _ in OUTSIDE:
        task = render(by_id[task_id], 0)
        tasks.append(codecontests.parse(len(tasks), task.row))
        submissions += [Submission(task_id=task_id, completion=c) for c in (source, task.reference)]
    pairs, unknown = pair_submissions(tasks, submissions)
    assert not unknown and len(pairs) == 2 * len(OUTSIDE)

    results = grade_pairs(pairs, CONFIG, SANDBOX)

    assert not any(r.infra_error for r in results), [r.detail for r in results if r.infra_error]
    verdicts = {(r.task_id, s.completion == t.solutions[0]): r for r, (t, s) in zip(results, pairs)}
    for task_id, _, solution in OUTSIDE:
        assert verdicts[(task_id, True)].passed, task_id
        attack = verdicts[(task_id, False)]
        assert attack.passed == solution, task_id
        if not solution:
            assert Verdict.WRONG_ANSWER in {t.verdict for t in attack.tests}, task_id
