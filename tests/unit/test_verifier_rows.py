"""Step-labelled rows (tasks/step_labels.py): reading, malformed rows counted by reason, the label schemes,
the problem-disjoint split, and the seeded arithmetic generator with its labelling convention."""

from __future__ import annotations

import json
import re

import pytest

from tasks.errors import SourceError
from tasks.step_labels import LabelScheme, load_step_rows, read_step_rows, split_by_problem
from tasks.step_samples import KINDS, SAMPLE, generate_rows, solution

GOOD = {"id": "a", "problem": "Compute 2 * 3 + 1.", "steps": ["2 * 3 = 6", "6 + 1 = 7"], "labels": [1, 1]}


def lines(*rows) -> list[str]:
    return [row if isinstance(row, str) else json.dumps(row) for row in rows]


def test_good_rows_read_with_optional_source():
    rows = read_step_rows(lines(GOOD, {**GOOD, "id": "b", "labels": [1, 0], "source": "x"}, ""))
    assert [r.id for r in rows.rows] == ["a", "b"] and not rows.skipped
    assert rows.rows[1].labels == (1, 0) and rows.rows[1].source == "x" and rows.rows[0].source is None


def test_malformed_rows_are_skipped_and_counted_by_reason():
    bad = lines(
        "{not json",
        "[1, 2]",
        {k: v for k, v in GOOD.items() if k != "labels"},
        {**GOOD, "id": "c", "labels": [1]},
        {**GOOD, "id": "d", "steps": ["ok", ""]},
        {**GOOD, "id": "e", "labels": [1, 2]},
        {**GOOD, "id": "f", "labels": [1, True]},
        {**GOOD, "id": "", "labels": [1, 1]},
        {**GOOD, "id": "g", "extra": 1},
        {**GOOD, "id": "h", "problem": "  "},
        GOOD,
        GOOD,  # duplicate id
    )
    rows = read_step_rows(bad)
    assert [r.id for r in rows.rows] == ["a"]
    assert sum(rows.skipped.values()) == 11
    assert rows.skipped["not valid JSON"] == 1
    assert rows.skipped["not a JSON object but list"] == 1
    assert rows.skipped["no 'labels' field"] == 1
    assert rows.skipped["1 labels for 2 steps"] == 1
    assert rows.skipped["duplicate id"] == 1
    assert rows.skipped["unknown field 'extra'"] == 1
    assert "11 skipped" in rows.summary() and rows.examples[0].startswith("line 1: ")


def test_binary_scheme_refuses_prm800k_ratings_with_a_hint():
    rows = read_step_rows(lines({**GOOD, "labels": [1, -1]}))
    (reason,) = rows.skipped
    assert "-1" in reason and "prm800k" in reason


@pytest.mark.parametrize(
    ("neutral", "expected"), [("correct", (1, 0, 1)), ("wrong", (0, 0, 1)), ("unscored", (None, 0, 1))]
)
def test_prm800k_mapping(neutral, expected):
    row = {**GOOD, "steps": ["a", "b", "c"], "labels": [0, -1, 1]}
    rows = read_step_rows(lines(row), LabelScheme(scheme="prm800k", neutral=neutral))
    assert rows.rows[0].labels == expected
    assert read_step_rows(lines({**row, "labels": [2, 1, 1]}), LabelScheme(scheme="prm800k")).skipped


def test_unreadable_or_empty_file_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="cannot read"):
        load_step_rows(tmp_path / "missing.jsonl")
    empty = tmp_path / "bad.jsonl"
    empty.write_text("{}\n")
    with pytest.raises(SourceError, match="no usable step row"):
        load_step_rows(empty)


def test_split_shares_no_problem_and_is_seeded():
    rows = read_step_rows([json.dumps(r) for r in generate_rows(300, seed=1)]).rows
    train, held = split_by_problem(rows, 0.25, seed=3)
    assert len(train) + len(held) == len(rows) and held and train
    assert not {r.problem for r in train} & {r.problem for r in held}
    assert [r.id for r in held] == [r.id for r in split_by_problem(rows, 0.25, seed=3)[1]]
    assert [r.id for r in held] != [r.id for r in split_by_problem(rows, 0.25, seed=4)[1]]
    with pytest.raises(ValueError, match="at least 2"):
        split_by_problem(rows[:1], 0.5, 0)


def _value(text: str) -> int:
    return int(re.findall(r"-?\d+", text)[-1])


def test_correct_solutions_are_right_and_all_labelled_one():
    import random

    rng = random.Random(0)
    for _ in range(200):
        problem, steps, labels = solution(rng, None)
        assert labels == [1] * len(steps)
        assert _value(steps[-1]) == eval(problem.removeprefix("Compute ").rstrip("."))  # noqa: S307 (our own digits)


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_labels_its_step_and_every_later_step_wrong(kind):
    import random

    rng = random.Random(7)
    for _ in range(100):
        problem, steps, labels = solution(rng, kind)
        first = labels.index(0)
        assert labels == [1] * first + [0] * (len(steps) - first)
        assert _value(steps[-1]) != eval(problem.removeprefix("Compute ").rstrip("."))  # noqa: S307
        for step in steps[:first]:  # every step before the error is true arithmetic
            left, _, right = step.partition(" = ")
            assert eval(left) == int(right), step  # noqa: S307


def test_generator_is_seeded_and_the_shipped_sample_is_its_output():
    assert generate_rows(50, 3) == generate_rows(50, 3) != generate_rows(50, 4)
    shipped = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert shipped == generate_rows(200, seed=0)
    assert SAMPLE.stat().st_size < 300_000
    rows = load_step_rows(SAMPLE)
    assert len(rows.rows) == 200 and not rows.skipped
