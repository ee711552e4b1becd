"""Every shipped sample solution, graded in the real sandbox, gets the verdict its row expects.

Correct reference solutions pass every test; each incorrect one fails with its
one expected verdict (wrong_answer, runtime_error, time_limit, memory_limit,
compile_error), across all seven formats. Also: the grade CLI end to end, and
a sandbox that cannot start is infra_error, never a fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.failure import Verdict
from tasks.catalog import SAMPLE_SETS, load_sample_set
from tasks.grader import GraderConfig, GradeReport, grade_pairs, pair_submissions
from tasks.result import NOT_RUN
from tests.sandbox_support import sandbox_config

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SETS = [name for name in SAMPLE_SETS if name != "bench"]


@pytest.fixture(scope="module")
def graded():
    """All shipped solutions of all sets, graded once through one pool (2 s limits: short TLEs, slack under load)."""
    labelled, pairs = [], []
    for name in SETS:
        report, submissions = load_sample_set(name)
        set_pairs, unknown = pair_submissions(report.tasks, submissions)
        assert not unknown
        pairs += set_pairs
        labelled += [(name, n, s.expect) for n, s in enumerate(submissions)]
    results = grade_pairs(pairs, GraderConfig(default_time_s=2.0, min_time_s=2.0), sandbox_config())
    return {(name, n): (expect, result) for (name, n, expect), result in zip(labelled, results)}


def _cases():
    for name in SETS:
        _, submissions = load_sample_set(name)
        for n, submission in enumerate(submissions):
            yield pytest.param(name, n, id=f"{name}-{n}-{submission.task_id}-{submission.expect}")


@pytest.mark.parametrize("name, n", list(_cases()))
def test_sample_solution_gets_expected_verdict(graded, name, n):
    expect, result = graded[(name, n)]
    verdicts = [t.verdict for t in result.tests]
    assert not result.infra_error, result
    if expect == "passed":
        assert result.passed and result.fraction == 1.0, verdicts
    else:
        assert not result.passed
        failing = {v for v in verdicts if v != Verdict.PASSED}
        if expect == "time_limit":
            # A slow program that met the wall-clock backstop (the machine loaded: 2.3 s of CPU in 21 s of wall)
            # ends its batch: the later tests are not_run by design (test_cp_timing), never another verdict.
            failing.discard(NOT_RUN)
        assert failing == {Verdict(expect)}, [t.detail for t in result.tests]


def test_every_failing_verdict_is_exercised(graded):
    seen = {t.verdict for _, result in graded.values() for t in result.tests}
    assert {
        Verdict.PASSED,
        Verdict.WRONG_ANSWER,
        Verdict.RUNTIME_ERROR,
        Verdict.TIME_LIMIT,
        Verdict.MEMORY_LIMIT,
        Verdict.COMPILE_ERROR,
    } <= seen


def test_assert_tests_were_split(graded):
    splits = [
        t.split
        for name, n in graded
        if name in ("humaneval", "mbpp")
        for t in graded[(name, n)][1].tests
        if t.verdict != Verdict.COMPILE_ERROR
    ]
    assert splits and all(s is True for s in splits)


def test_grade_cli_writes_the_documented_json(tmp_path):
    out = tmp_path / "report.json"
    sample = SAMPLE_SETS["mbpp"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym",
            "grade",
            "--tasks",
            str(sample.tasks_path),
            "--format",
            "mbpp",
            "--solutions",
            str(sample.solutions_path),
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert {"total", "passed", "infra_errors", "tasks", "time_model", "speed_factor", "reruns"} <= set(report)
    assert (report["total"], report["passed"], report["infra_errors"]) == (7, 3, 0)
    assert report["time_model"] == "cpu" and report["speed_factor"] >= 1.0 and "limits: cpu time" in proc.stdout
    first = report["tasks"][0]
    assert {"task_id", "passed", "fraction", "tests", "reruns"} <= set(first) and first["tests"][0][
        "verdict"
    ] == "passed"
    assert first["tests"][0]["cpu_s"] > 0
    assert "passed 3/7" in proc.stdout


def test_a_sandbox_that_cannot_start_is_infra_error_not_a_fail():
    report, submissions = load_sample_set("mbpp")
    pairs, _ = pair_submissions(report.tasks, submissions[:1])
    broken = sandbox_config(image="gym-no-such-image:never", pool={"size": 0})
    results = grade_pairs(pairs, GraderConfig(), broken)
    summary = GradeReport.of(results)
    assert summary.infra_errors == 1 and summary.passed == 0
    assert all(t.verdict == Verdict.INFRA_ERROR for t in results[0].tests)


def test_early_stop_leaves_the_rest_not_run():
    report, submissions = load_sample_set("nemotron")
    looping = [s for s in submissions if s.expect == "time_limit"]
    pairs, _ = pair_submissions(report.tasks, looping)
    (result,) = grade_pairs(pairs, GraderConfig(default_time_s=1.0, early_stop=True), sandbox_config())
    assert [t.verdict for t in result.tests] == [Verdict.TIME_LIMIT, "not_run", "not_run"]
    assert result.fraction == 0.0 and not result.passed and not result.infra_error
