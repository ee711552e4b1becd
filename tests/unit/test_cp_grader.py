"""Grader planning and submissions, without a sandbox: what goes into the container, and what never does."""

from __future__ import annotations

import contextlib
import json
import marshal
from types import SimpleNamespace

import pytest
import trio

from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import ExecResult
from tasks.catalog import SAMPLE_SETS, load_sample_set
from tasks.grader import Grader, GraderConfig, GradeReport, compile_problem, pair_submissions
from tasks.result import TestResult, summarise
from tasks.submission import Submission, extract_code, program, read_submissions
from tasks.task import AssertTest, CallTest, Limits, StdinTest, Task
from tests.task_support import task


@pytest.mark.parametrize(
    "answer, code",
    [
        ("print(1)\n", "print(1)\n"),
        ("Sure:\n```python\nprint(2)\n```\nDone.", "print(2)\n"),
        ("```text\nout\n```\n```\nprint(3)\n```", "print(3)\n"),  # untagged beats other languages
        ("```python\nprint(1)\n```\nbetter:\n```py\nprint(4)\n```", "print(4)\n"),  # the last Python block
        ("```python\nprint(5)\n", "print(5)\n"),  # unterminated (truncated answer)
        ("```cpp\nint main(){}\n```", "int main(){}\n"),
    ],
)
def test_extract_code(answer, code):
    assert extract_code(answer) == code


def test_humaneval_completion_is_appended_to_the_prompt_verbatim():
    he = task(
        source_format="humaneval",
        kind="assert",
        completion_prefix="def f():\n",
        tests=(AssertTest(source="assert candidate() == 1"),),
        fn_name="f",
    )
    completion = "    return 1\n```python\nnot extracted\n```\n"
    assert program(he, Submission(task_id="t", completion=completion)) == "def f():\n" + completion


def test_read_submissions_reports_bad_rows(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"task_id": 1, "completion": "x"}\n{"task_id": true, "completion": "x"}\n'
        '{"task_id": "a"}\nnot json\n{"task_id": "b", "completion": "y", "extra": 1}\n'
    )
    submissions, errors = read_submissions(path)
    assert [s.task_id for s in submissions] == ["1", "b"]  # integer ids become strings
    assert [e.index for e in errors] == [1, 2, 3]


def test_compile_problem_is_host_side_and_executes_nothing(tmp_path):
    marker = tmp_path / "ran"
    assert compile_problem(f"open({str(marker)!r}, 'w').write('x')\n") is None
    assert not marker.exists()
    assert "SyntaxError" in compile_problem("def f(:\n    pass\n")
    assert "null bytes" in compile_problem("x = '\0'")
    assert "larger than" in compile_problem("#" * (2 << 20))


def test_config_refuses_crossed_time_bounds():
    with pytest.raises(ValueError, match="min_time_s"):
        GraderConfig(min_time_s=5.0, max_time_s=2.0)
    with pytest.raises(ValueError):
        GraderConfig(unknown_field=1)


def test_limits_resolution():
    grader = Grader(None, GraderConfig(default_time_s=3.0, time_scale=2.0, default_memory_bytes=300 << 20))
    assert grader.limits(task()) == (6.0, 300 << 20)
    assert grader.limits(task(limits=Limits(time_s=0.1, memory_bytes=1 << 20))) == (1.0, 96 << 20)  # floors
    assert grader.limits(task(limits=Limits(time_s=100.0)))[0] == 30.0  # ceiling


def _secrets_of(t: Task) -> list[str]:
    """Expected values that must never appear in what is sent into the container."""
    found = []
    for test in t.tests:
        if isinstance(test, StdinTest):
            found.append(test.output.strip())
        elif isinstance(test, CallTest):
            found.append(json.dumps(test.expected))
    return [s for s in found if len(s) > 3]


@pytest.mark.parametrize("name", sorted(SAMPLE_SETS))
def test_planned_requests_never_carry_expected_values(name):
    report, _ = load_sample_set(name)
    grader = Grader(None, GraderConfig())
    for t in report.tasks:
        for i, test in enumerate(t.tests):
            request, _ = grader.plan(t, i, test)
            payload = (
                request.stdin.decode() if isinstance(test, StdinTest) else json.dumps(marshal.loads(request.stdin))
            )
            sent = json.dumps(request.argv) + payload
            inputs = test.input if isinstance(test, StdinTest) else json.dumps(getattr(test, "args", ""))
            for secret in _secrets_of(t):
                if secret not in inputs:  # an expected value that happens to equal an input is no secret
                    assert secret not in sent, (t.task_id, i, secret)
            if isinstance(test, AssertTest):
                stdin = marshal.loads(request.stdin)
                assert stdin["mode"] == "eval" and "==" not in json.dumps(stdin["exprs"])


def test_each_test_gets_its_own_nonce_and_limits():
    t = task(
        kind="call",
        fn_name="f",
        limits=Limits(time_s=2.0, memory_bytes=200 << 20),
        tests=(CallTest(args=[1], expected=1), CallTest(args=[2], expected=2)),
    )
    grader = Grader(None, GraderConfig(speed_factor=1.0))
    (first, _), (second, _) = (grader.plan(t, i, test) for i, test in enumerate(t.tests))
    assert marshal.loads(first.stdin)["nonce"] != marshal.loads(second.stdin)["nonce"]
    assert (
        first.cpu_limit_s == 2.0 * 1.25 and first.timeout_s == 2.0 * 10 + 1.0
    )  # the CPU limit (+ margin), the backstop
    assert first.memory_limit_bytes == 200 << 20 and first.argv[:3] == ["python3", "-I", "-c"]
    walled = Grader(None, GraderConfig(time_model="wall", speed_factor=1.0)).plan(t, 0, t.tests[0])[0]
    assert walled.timeout_s == 2.0 and walled.cpu_limit_s is None


def test_the_budget_counts_limits_and_one_backstop():
    t = task(
        kind="call",
        fn_name="f",
        limits=Limits(time_s=2.0),
        tests=tuple(CallTest(args=[i], expected=i) for i in range(5)),
    )
    for config, expected in (
        (GraderConfig(speed_factor=1.0), 5 * 2.0 + 21.0 + 2 * 21.0),  # and the starvation grace past the backstop
        (GraderConfig(speed_factor=1.0, starved_grace_factor=None), 5 * 2.0 + 21.0),
        (GraderConfig(time_model="wall", speed_factor=1.0), 5 * 2.0),
    ):
        grader = Grader(None, config)
        assert grader.budget([grader.plan(t, i, test)[0] for i, test in enumerate(t.tests)]) == pytest.approx(expected)


def test_summaries_and_report_totals():
    passed = TestResult(index=0, verdict=Verdict.PASSED)
    wrong = TestResult(index=1, verdict=Verdict.WRONG_ANSWER)
    infra = TestResult(index=1, verdict=Verdict.INFRA_ERROR)
    a, b, c = summarise("a", [passed, passed]), summarise("b", [passed, wrong]), summarise("c", [passed, infra])
    assert (a.passed, a.fraction) == (True, 1.0)
    assert (b.passed, b.fraction) == (False, 0.5)
    assert (c.passed, c.infra_error) == (False, True)
    report = GradeReport.of([a, b, c])
    assert (report.total, report.passed, report.infra_errors) == (3, 1, 1)
    document = json.loads(report.model_dump_json())
    assert set(document) == {
        "total",
        "passed",
        "infra_errors",
        "tasks",
        "time_model",
        "time_scale",
        "speed_factor",
        "reruns",
        "skipped",
        "skipped_reasons",
    }
    assert (document["skipped"], document["skipped_reasons"]) == (0, {})
    skipping = GradeReport.of([a], skipped={"unknown task id": 2, "unparseable row": 0})
    assert (skipping.total, skipping.skipped, skipping.skipped_reasons) == (1, 2, {"unknown task id": 2})
    assert {"task_id", "passed", "fraction", "tests"} <= set(document["tasks"][0])
    assert document["tasks"][1]["tests"][1]["verdict"] == "wrong_answer"


def test_pairing_reports_unknown_ids():
    tasks = [task(task_id="a"), task(task_id="b")]
    subs = [Submission(task_id="b", completion="x"), Submission(task_id="z", completion="y")]
    pairs, unknown = pair_submissions(tasks, subs)
    assert [(t.task_id, s.completion) for t, s in pairs] == [("b", "x")] and unknown == ["z"]


def test_tests_go_in_one_batch_unless_their_inputs_are_huge():
    from sandbox.protocol import ExecRequest
    from tasks.grader import MAX_BATCH_STDIN_BYTES, _chunks

    small = [ExecRequest(argv=["x"], stdin=b"1" * 100) for _ in range(50)]
    assert len(_chunks(small)) == 1
    big = [ExecRequest(argv=["x"], stdin=b"1" * (MAX_BATCH_STDIN_BYTES // 2 + 1)) for _ in range(3)]
    assert [len(c) for c in _chunks(big)] == [1, 1, 1]


def test_a_judge_that_cannot_read_the_output_gives_wrong_answer_not_a_grader_crash():
    from sandbox.protocol import ExecResult
    from tasks.grader import _judged

    def judge(result):
        return int(result.stdout)  # Python's int-string limit: ValueError on 5000 digits

    verdict = _judged(3, judge, ExecResult(exit_code=0, stdout=b"9" * 5000))
    assert verdict.index == 3 and verdict.verdict == Verdict.WRONG_ANSWER and "ValueError" in verdict.detail


class ScriptedSandbox:
    """A pool whose every acquire is a fresh 'container' answering exec_batch from a script of (cpu_s, stdout)."""

    def __init__(self, script: list[list[tuple[float, str]]]) -> None:
        self.script, self.acquired = list(script), 0

    @contextlib.asynccontextmanager
    async def acquire(self, owner: str, keys: frozenset[str] | None = None):
        self.acquired += 1
        answers = self.script.pop(0)

        class Workspace:
            config = SimpleNamespace(episode=SimpleNamespace(wall_s=120.0))

            async def write_file(self, path, data):
                return SimpleNamespace(failure=FailureKind.OK, detail="")

            async def exec_batch(self, request):
                assert len(request.items) == len(answers) and request.stop_on_deadline
                return SimpleNamespace(
                    results=[
                        ExecResult(stdout=out.encode(), cpu_s=cpu, wall_s=cpu, exit_code=0) for cpu, out in answers
                    ]
                )

        yield Workspace()


@pytest.fixture
def slowdown(monkeypatch):
    """The machine's slowdown the grader reads when a re-run ends over its limit too: set by the test (1.0: a
    machine as fast as the limits assume); the readings taken are counted."""
    import tasks.grader as grader_module

    state = SimpleNamespace(value=1.0, readings=0)

    def reading():
        state.readings += 1
        return state.value

    monkeypatch.setattr(grader_module, "machine_slowdown", reading)
    return state


@pytest.mark.parametrize(
    ("rerun", "verdict"),
    [((0.5, "1\n"), Verdict.PASSED), ((1.1, "1\n"), Verdict.TIME_LIMIT), ((0.5, "2\n"), Verdict.WRONG_ANSWER)],
)
def test_a_borderline_test_is_judged_by_its_rerun_in_a_fresh_container(rerun, verdict, slowdown):
    t = task(
        limits=Limits(time_s=1.0), tests=(StdinTest(input="1\n", output="1\n"), StdinTest(input="1\n", output="1\n"))
    )
    sandbox = ScriptedSandbox([[(0.2, "1\n"), (1.1, "1\n")], [rerun]])  # test 1 ends 10% over its limit
    result = trio.run(Grader(sandbox, GraderConfig()).grade, t, Submission(task_id="t", completion="print(1)"))
    assert sandbox.acquired == 2 and result.reruns == 1
    assert [x.verdict for x in result.tests] == [Verdict.PASSED, verdict]
    assert result.tests[1].cpu_s == rerun[0]


def test_nothing_is_rerun_under_the_limit(slowdown):
    t = task(limits=Limits(time_s=1.0))
    sandbox = ScriptedSandbox([[(0.99, "1\n")]])
    result = trio.run(Grader(sandbox, GraderConfig()).grade, t, Submission(task_id="t", completion="print(1)"))
    assert sandbox.acquired == 1 and result.reruns == 0 and result.passed and slowdown.readings == 0


@pytest.mark.parametrize(
    ("now", "cpu_s", "verdict"),
    [
        (1.0, 1.1, Verdict.TIME_LIMIT),  # a machine as fast as the limits assume: the limit as written
        (1.05, 1.1, Verdict.TIME_LIMIT),  # slower by less than the program is over
        (1.2, 1.1, Verdict.PASSED),  # an honest program near its limit on a busy machine
        (1.2, 1.24, Verdict.TIME_LIMIT),
        (3.0, 1.24, Verdict.PASSED),  # within the re-run margin (25%)...
        (3.0, 1.3, Verdict.TIME_LIMIT),  # ...and never past it, however slow the machine reads
    ],
)
def test_a_rerun_over_its_limit_is_judged_against_how_slow_the_machine_runs_now(now, cpu_s, verdict, slowdown):
    slowdown.value = now
    t = task(limits=Limits(time_s=1.0))
    sandbox = ScriptedSandbox([[(1.1, "1\n")], [(cpu_s, "1\n")]])
    result = trio.run(Grader(sandbox, GraderConfig()).grade, t, Submission(task_id="t", completion="print(1)"))
    (test,) = result.tests
    assert sandbox.acquired == 2 and result.reruns == 1 and slowdown.readings == 1
    assert test.verdict == verdict and test.cpu_s == cpu_s
    if verdict == Verdict.TIME_LIMIT:
        assert "twice" in test.detail and (now == 1.0) == ("for a machine that slow" not in test.detail)


def test_the_slowdown_is_read_against_the_machines_fastest_reading_since_boot(monkeypatch, tmp_path):
    import tasks.grader as grader_module

    readings = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(grader_module, "_workload_cpu_s", lambda: readings.pop(0))
    record = grader_module.speed_record()
    boot = grader_module.BOOT_ID.read_text().strip()

    def process(*values):
        """A new grader process reading ``values`` (one reading per call: the TTL is spent)."""
        monkeypatch.setattr(grader_module, "_fastest", float("inf"))
        monkeypatch.setattr(grader_module, "_slowdown", None)
        readings.extend(values)
        return [grader_module.machine_slowdown() for _ in values]

    monkeypatch.setattr(grader_module, "SLOWDOWN_TTL_S", -1.0)
    assert process(0.14) == [1.0]  # the first reading is the machine at its fastest so far
    assert json.loads(record.read_text()) == {"boot_id": boot, "workload_s": 0.14}
    assert process(0.175, 0.21) == [pytest.approx(1.25), pytest.approx(1.5)]  # a busy machine, another process
    assert process(0.1, 0.15) == [1.0, pytest.approx(1.5)]  # a faster reading is kept
    assert json.loads(record.read_text())["workload_s"] == 0.1
    for hostile in (
        {"boot_id": "another boot", "workload_s": 0.05},  # another boot's record (another machine, maybe)
        {"boot_id": boot, "workload_s": 1e-9},  # not believable
        {"boot_id": boot, "workload_s": "fast"},
        ["not", "a", "record"],
    ):
        record.write_text(json.dumps(hostile))
        assert process(0.2, 0.3) == [1.0, pytest.approx(1.5)]
    record.write_text("{" * 100_000)  # not JSON, and read no further than 4 KB
    assert process(0.2) == [1.0]
    assert json.loads(record.read_text()) == {"boot_id": boot, "workload_s": 0.2}
    record.unlink()
    record.mkdir()  # a record that can be neither read nor written leaves the process's own fastest reading
    assert process(0.2, 0.26) == [1.0, pytest.approx(1.3)]
    assert [path.name for path in record.parent.iterdir()] == [record.name]  # no spare file left behind
    record.rmdir()
    monkeypatch.setattr(grader_module, "SLOWDOWN_TTL_S", 60.0)
    assert process(0.2, 0.3)[1] == 1.0 and readings == [0.3]  # one reading answers for SLOWDOWN_TTL_S


def test_the_machine_speed_factor_scales_limits_and_never_tightens_them(monkeypatch):
    import tasks.grader as grader_module

    t = task(limits=Limits(time_s=2.0))
    assert Grader(None, GraderConfig(speed_factor=1.5)).limits(t)[0] == 3.0
    for reference, expected in ((1e-6, grader_module.MAX_SPEED_FACTOR), (1e6, 1.0)):  # a far slower / faster machine
        monkeypatch.setattr(grader_module, "REFERENCE_WORKLOAD_S", reference)
        grader_module.machine_speed_factor.cache_clear()
        assert grader_module.machine_speed_factor() == expected
        assert Grader(None, GraderConfig()).limits(t)[0] == min(2.0 * expected, GraderConfig().max_time_s)
    grader_module.machine_speed_factor.cache_clear()
    report = GradeReport.of([], GraderConfig(time_model="wall", time_scale=2.0, speed_factor=1.25))
    assert (report.time_model, report.time_scale, report.speed_factor, report.reruns) == ("wall", 2.0, 1.25, 0)


def test_the_workload_reads_its_own_threads_cpu_not_the_processes():
    # A grader runs in a busy process (a learner's threads, an engine's): their CPU must not read as a slow machine.
    import threading

    import tasks.grader as grader_module

    alone = grader_module._workload_cpu_s()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        beside = grader_module._workload_cpu_s()
    finally:
        stop.set()
        spinner.join()
    alone = min(alone, grader_module._workload_cpu_s())
    assert beside < 1.5 * alone, (beside, alone)  # the process's CPU time would read ~2x: both threads' time
