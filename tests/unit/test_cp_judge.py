"""Verdicts from ExecResults (fakes here only for the pure mapping; the real runs are integration tests)."""

from __future__ import annotations

import pytest

from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import ExecResult
from tasks.assertion import split
from tasks.comparison import Tolerance
from tasks.judge import failure_verdict, judge_call, judge_split_assert, judge_stdin
from tasks.task import CallTest, StdinTest

TOL = Tolerance()
NONCE = "feedfacefeedface"


def result(failure=FailureKind.OK, stdout=b"", stderr=b"", exit_code=0, signal=None) -> ExecResult:
    return ExecResult(failure=failure, stdout=stdout, stderr=stderr, exit_code=exit_code, signal=signal, wall_s=0.1)


@pytest.mark.parametrize(
    "failure, stderr, verdict",
    [
        (FailureKind.TIMEOUT, b"", Verdict.TIME_LIMIT),
        (FailureKind.OOM, b"", Verdict.MEMORY_LIMIT),
        (FailureKind.NONZERO_EXIT, b"Traceback...\nMemoryError\n", Verdict.MEMORY_LIMIT),
        (FailureKind.NONZERO_EXIT, b"Traceback...\nValueError: x\n", Verdict.RUNTIME_ERROR),
        (FailureKind.PIDS_LIMIT, b"", Verdict.RUNTIME_ERROR),
        (FailureKind.DISK_FULL, b"", Verdict.RUNTIME_ERROR),
        (FailureKind.OUTPUT_TRUNCATED, b"", Verdict.WRONG_ANSWER),
        (FailureKind.INFRA_ERROR, b"", Verdict.INFRA_ERROR),
        (FailureKind.SANDBOX_DENIED, b"", Verdict.INFRA_ERROR),
        (FailureKind.TOOL_ERROR, b"", Verdict.RUNTIME_ERROR),  # the runner failed serving the test's process
        (FailureKind.WORKSPACE_LOST, b"", Verdict.RUNTIME_ERROR),  # the test's process took the runner down
    ],
)
def test_failure_kinds_map_to_verdicts(failure, stderr, verdict):
    assert failure_verdict(result(failure, stderr=stderr, exit_code=1))[0] == verdict


@pytest.mark.parametrize(
    "runner_detail, which",
    [
        ("CPU limit of 0.625s passed; process group killed. ", "its CPU limit"),
        ("deadline of 6.000s passed; process group killed. ", "its wall-clock deadline"),
        (
            "starved of CPU by the host: ...; process group killed at the deadline of 6.000s plus its grace. ",
            "its wall-clock deadline",
        ),
    ],
)
def test_a_time_limit_says_which_limit_ended_it(runner_detail, which):
    timed_out = ExecResult(failure=FailureKind.TIMEOUT, detail=runner_detail, cpu_s=0.7, wall_s=1.2)
    assert failure_verdict(timed_out) == (Verdict.TIME_LIMIT, f"killed at {which} after 0.70s CPU, 1.20s wall")


def test_ok_has_no_failure_verdict():
    assert failure_verdict(result()) is None


def test_stdin_needs_ok_and_matching_output():
    test = StdinTest(input="1 2\n", output="3\n")
    assert judge_stdin(0, result(stdout=b"3\n"), test, TOL).verdict == Verdict.PASSED
    assert judge_stdin(0, result(stdout=b"4\n"), test, TOL).verdict == Verdict.WRONG_ANSWER
    # the right output is not enough when the process did not end ok (e.g. printed, then crashed)
    crashed = result(FailureKind.NONZERO_EXIT, stdout=b"3\n", exit_code=1)
    assert judge_stdin(0, crashed, test, TOL).verdict == Verdict.RUNTIME_ERROR


def test_wrong_answer_detail_never_quotes_the_expected_output():
    test = StdinTest(input="", output="SECRET-EXPECTED\n")
    judged = judge_stdin(0, result(stdout=b"guess\n"), test, TOL)
    assert judged.verdict == Verdict.WRONG_ANSWER and "SECRET" not in judged.model_dump_json()


def report(payload: str) -> bytes:
    return f"noise\n{NONCE} {payload}\nmore noise\n".encode()


def test_call_verdicts():
    test = CallTest(args=[1], expected=[4])
    assert judge_call(0, result(stdout=report('{"value":["l",[["i",4]]]}')), test, NONCE, TOL).verdict == Verdict.PASSED
    assert judge_call(0, result(stdout=report('{"value":["i",4]}')), test, NONCE, TOL).verdict == Verdict.WRONG_ANSWER
    wrapped = CallTest(args=[1], expected=[4], wrapped=True)
    assert judge_call(0, result(stdout=report('{"value":["i",4]}')), wrapped, NONCE, TOL).verdict == Verdict.PASSED
    cases = {
        '{"error":"ZeroDivisionError: x"}': Verdict.RUNTIME_ERROR,
        '{"error":"MemoryError: "}': Verdict.MEMORY_LIMIT,
        '{"unserialisable":"Always"}': Verdict.WRONG_ANSWER,
        '{"completed":true}': Verdict.WRONG_ANSWER,
        '{"value":["zz",1]}': Verdict.WRONG_ANSWER,
    }
    for payload, verdict in cases.items():
        assert judge_call(0, result(stdout=report(payload)), test, NONCE, TOL).verdict == verdict, payload


def test_call_without_report_or_with_two_is_a_failure():
    test = CallTest(args=[], expected=1)
    assert judge_call(0, result(stdout=b"1\n"), test, NONCE, TOL).verdict == Verdict.RUNTIME_ERROR
    twice = report('{"value":["i",1]}') + report('{"value":["i",1]}')
    assert judge_call(0, result(stdout=twice), test, NONCE, TOL).verdict == Verdict.WRONG_ANSWER
    other_nonce = b'0000000000000000 {"value":["i",1]}\n'
    assert judge_call(0, result(stdout=other_nonce), test, NONCE, TOL).verdict == Verdict.RUNTIME_ERROR


def test_split_assert_verdicts():
    s = split("assert abs(candidate(1) - 0.5) < 1e-6")
    ok = judge_split_assert(0, result(stdout=report('{"values":[["f",0.5]]}')), s, NONCE)
    assert ok.verdict == Verdict.PASSED and ok.split is True
    bad = judge_split_assert(0, result(stdout=report('{"values":[["f",0.7]]}')), s, NONCE)
    assert bad.verdict == Verdict.WRONG_ANSWER
    raised = judge_split_assert(0, result(stdout=report('{"values":[["s","x"]]}')), s, NONCE)
    assert raised.verdict == Verdict.WRONG_ANSWER and "host" in raised.detail
    count = judge_split_assert(0, result(stdout=report('{"values":[]}')), s, NONCE)
    assert count.verdict == Verdict.WRONG_ANSWER
