"""Math rows: GSM8K, MATH (competition) and plain problem/answer forms, parsed as published; malformed rows
are skipped with a reason; the shipped samples load whole and their reference answers pass."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tasks.errors import MalformedRow
from tasks.loader import load_tasks
from tasks.math.problem import MathTask, last_boxed, parse

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tasks" / "samples"

GSM8K_ROW = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}
MATH_ROW = {
    "problem": "Compute $\\cos 30^\\circ$.",
    "solution": "The point at $30^\\circ$ on the unit circle is $\\left(\\frac{\\sqrt{3}}{2}, \\frac12\\right)$, "
    "so $\\cos 30^\\circ = \\boxed{\\frac{\\sqrt{3}}{2}}$.",
    "level": "Level 1",
    "type": "Precalculus",
    "unique_id": "test/precalculus/1.json",
}
PLAIN_ROW = {"id": "p7", "problem": "What is 6 times 7?", "answer": "42"}


def test_gsm8k_gold_is_after_the_last_marker_without_thousands_separators():
    task = parse(3, GSM8K_ROW)
    assert (task.source_format, task.task_id, task.gold) == ("gsm8k", "3", "72")
    assert task.problem.startswith("Natalia") and "####" not in task.solution
    assert parse(0, {**GSM8K_ROW, "answer": "12 * 100 = 1200\n#### 1,200"}).gold == "1200"


def test_math_gold_is_the_last_boxed_with_nested_braces_whole():
    task = parse(0, MATH_ROW)
    assert (task.source_format, task.task_id, task.gold) == (
        "competition",
        "test/precalculus/1.json",
        "\\frac{\\sqrt{3}}{2}",
    )
    assert last_boxed("first $\\boxed{1}$, then $\\boxed{\\{2, 3\\}}$") == "\\{2, 3\\}"
    assert last_boxed("a $\\fbox{x^{2}}$") == "x^{2}"
    assert last_boxed("no box here") is None


def test_plain_rows_take_the_answer_as_written_numbers_included():
    assert parse(0, PLAIN_ROW).model_dump() == {
        "type": "math",
        "task_id": "p7",
        "source_format": "plain",
        "problem": "What is 6 times 7?",
        "gold": "42",
        "solution": "",
    }
    assert parse(5, {"problem": "0.1 + 0.2?", "answer": 0.3}).gold == "0.3"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"question": "How many?", "answer": "It is 4."}, "no '#### N' line"),
        ({"question": "How many?", "answer": "4\n####   "}, "nothing after '####'"),
        ({**MATH_ROW, "solution": "The answer is 4."}, "no \\boxed"),
        ({**MATH_ROW, "solution": "so $\\boxed{\\frac{1}{2}$."}, "never closes"),
        ({**MATH_ROW, "solution": "so $\\boxed{ }$."}, "is empty"),
        ({"problem": "  ", "answer": "1"}, "problem is empty"),
        ({"problem": "Is it?", "answer": True}, "boolean"),
        ({"problem": "What?", "answer": ["1", "2"]}, "expected str/int/float"),
        ({"statement": "What?", "result": "1"}, "no math row form fits"),
    ],
)
def test_malformed_rows_raise_a_specific_reason(row, reason):
    with pytest.raises(MalformedRow, match=re.escape(reason)):
        parse(0, row)


def test_loader_skips_and_counts_malformed_rows(tmp_path):
    rows = [PLAIN_ROW, {"problem": "What?", "answer": ""}, {"id": "p7", "problem": "Again?", "answer": "1"}, "[1, 2]"]
    path = tmp_path / "plain.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n{not json\n")
    report = load_tasks(path, "auto")
    assert report.format == "math" and [t.task_id for t in report.tasks] == ["p7"]
    reasons = {e.index: e.reason for e in report.errors}
    assert sorted(reasons) == [1, 2, 3, 4]
    assert "answer is empty" in reasons[1] and "duplicate task_id 'p7'" in reasons[2]


@pytest.mark.parametrize(("name", "form"), [("gsm8k", "gsm8k"), ("competition", "competition"), ("plain", "plain")])
def test_shipped_samples_load_whole_and_each_has_a_reference_answer(name, form):
    report = load_tasks(SAMPLES / f"math_{name}.jsonl", "math")
    assert report.errors == () and 8 <= len(report.tasks) <= 20
    assert all(isinstance(t, MathTask) and t.source_format == form for t in report.tasks)
    references = [json.loads(line) for line in (SAMPLES / f"math_{name}.solutions.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in references) == sorted(t.task_id for t in report.tasks)
