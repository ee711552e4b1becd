"""`grade` through the real CLI tells the truth in its exit code and summary line: nothing graded (an empty
tasks or solutions file, every solution naming an unknown task) exits 5 with a one-line reason, and
rows that were skipped are counted in the printed summary and the --json report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks" / "samples" / "mbpp.jsonl"
SOLUTIONS = ROOT / "tasks" / "samples" / "mbpp.solutions.jsonl"
NOTHING_TO_GRADE = 5


def grade(tasks: Path, solutions: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gym",
            "grade",
            "--tasks",
            str(tasks),
            "--format",
            "mbpp",
            "--solutions",
            str(solutions),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def reason(done: subprocess.CompletedProcess) -> str:
    """The one line `grade` prints on stderr when it exits non-zero."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("grade: ")]
    assert len(lines) == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_an_empty_tasks_file_grades_nothing_and_says_so(tmp_path):
    empty = tmp_path / "tasks.jsonl"
    empty.write_text("")
    done = grade(empty, SOLUTIONS, "--json", str(tmp_path / "report.json"))
    assert done.returncode == NOTHING_TO_GRADE
    assert reason(done) == f"grade: nothing graded: {empty} holds no readable task"
    assert "passed 0/0 graded (0.000), failed 0, infra_errors 0, 7 skipped (7 unknown task ids)" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())  # the report is written all the same
    assert (report["total"], report["skipped"], report["skipped_reasons"]) == (0, 7, {"unknown task id": 7})


def test_an_empty_solutions_file_grades_nothing_and_says_so(tmp_path):
    empty = tmp_path / "solutions.jsonl"
    empty.write_text("\n")
    done = grade(TASKS, empty)
    assert done.returncode == NOTHING_TO_GRADE
    assert reason(done) == f"grade: nothing graded: {empty} holds no solution row"
    assert "passed 0/0 graded (0.000), failed 0, infra_errors 0, 0 skipped" in done.stdout


def test_solutions_that_all_name_unknown_tasks_grade_nothing(tmp_path):
    solutions = tmp_path / "solutions.jsonl"
    solutions.write_text(
        "".join(json.dumps({"task_id": f"nope-{i}", "completion": "print(1)"}) + "\n" for i in range(3)) + "{not json\n"
    )
    done = grade(TASKS, solutions, "--json", str(tmp_path / "report.json"))
    assert done.returncode == NOTHING_TO_GRADE
    assert reason(done) == (
        f"grade: nothing graded: none of the 4 solution rows of {solutions} could be graded "
        "(unknown task id or unparseable row); the tasks file holds '9501', '9502', '9503'"
    )
    assert (
        "passed 0/0 graded (0.000), failed 0, infra_errors 0, 4 skipped (3 unknown task ids, 1 unparseable row)"
        in done.stdout
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["unknown_task_ids"] == ["nope-0", "nope-1", "nope-2"] and len(report["skipped_solution_rows"]) == 1


@pytest.mark.docker
def test_skipped_rows_are_counted_beside_the_graded_ones(tmp_path):
    solutions = tmp_path / "solutions.jsonl"
    good = SOLUTIONS.read_text().splitlines()[0]  # task 9501, expected to pass
    solutions.write_text(
        "\n".join(
            [
                good,
                json.dumps({"task_id": "no-such-task", "completion": "print(1)"}),
                "{not json",
                json.dumps({"task_id": 9502}),  # no completion
            ]
        )
        + "\n"
    )
    done = grade(TASKS, solutions, "--json", str(tmp_path / "report.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "passed 1/1 graded (1.000), failed 0, infra_errors 0, 3 skipped (1 unknown task id, 2 unparseable rows)"
        in done.stdout
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["total"], report["passed"], report["skipped"]) == (1, 1, 3)
    assert report["skipped_reasons"] == {"unknown task id": 1, "unparseable row": 2}
    assert [row["index"] for row in report["skipped_solution_rows"]] == [2, 3]


def test_solutions_named_as_a_rollout_names_them_match_with_the_pools_prefix(tmp_path):
    """A rollout of a pool with ``id_prefix: mbpp/`` names its tasks ``mbpp/<id>``: `grade` says which prefix the
    solutions carry and lists ids the file holds; with ``--id-prefix mbpp/`` the same rows are graded."""
    rows = [json.loads(line) for line in SOLUTIONS.read_text().splitlines() if line.strip()]
    renamed = tmp_path / "rollout.solutions.jsonl"
    renamed.write_text("".join(json.dumps({**row, "task_id": f"mbpp/{row['task_id']}"}) + "\n" for row in rows))
    done = grade(TASKS, renamed)
    assert done.returncode == NOTHING_TO_GRADE
    line = reason(done)
    assert "pass --id-prefix mbpp/" in line and "the tasks file holds '" in line, line
    again = grade(TASKS, renamed, "--id-prefix", "mbpp/", "--json", str(tmp_path / "report.json"))
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["total"] == len(rows) and all(t["task_id"].startswith("mbpp/") for t in report["tasks"])
