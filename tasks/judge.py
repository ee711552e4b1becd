"""Turning one test's `ExecResult` into a verdict, on the host.

The runner classifies how a process ended from kernel counters and exit
status (`FailureKind`); that decides every failing verdict except one
refinement: a process that died of ``MemoryError`` under its RLIMIT_AS is
reported as ``memory_limit`` rather than ``runtime_error``. That reads the
candidate's stderr, which the candidate controls, so it only ever chooses
between two failing verdicts, never between pass and fail.

Passing needs an ``ok`` process *and* output the host judges correct:
stdout compared token by token for stdin tests, the driver's nonce-tagged
report decoded and compared for call/split assert tests, the checker's
nonce-tagged verdict for the other assert tests (`tasks/checker.py`: the
candidate never holds the descriptor it is written to). No exit code or
printed marker counts by itself. Details describe what the candidate produced and
never quote the expected value, so feeding them back to a policy leaks
nothing.
"""

from __future__ import annotations

from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import ExecResult
from tasks.assertion import HostEvalError, SplitAssert, holds
from tasks.comparison import Tolerance, outputs_match, values_match
from tasks.encoding import DriverReport, EncodingError, parse_report
from tasks.result import TestResult
from tasks.task import CallTest, StdinTest

# Masked verdicts: the engine failed (infra_error) or the grader's own budget refused the call
# (sandbox_denied: the grader chose every cwd and limit). Everything else a test's process met, a runner
# that failed serving it (tool_error) or a workspace it took down (workspace_lost) included, is the
# candidate's doing and is scored.
_INFRA = {FailureKind.INFRA_ERROR, FailureKind.SANDBOX_DENIED}
_HEAD = 200


def shown(value: object, width: int) -> str:
    """``repr(value)`` cut to ``width``; a value holding an int too long for decimal text (past 4,300 digits, which
    ``repr`` refuses) is named as such instead."""
    try:
        return repr(value)[:width]
    except ValueError:
        return f"<a {type(value).__name__} holding an int too long to write in decimal>"[:width]


def _tail(data: bytes) -> str:
    lines = data.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1][:_HEAD] if lines else ""


def failure_verdict(result: ExecResult) -> tuple[Verdict, str] | None:
    """The verdict of a process that did not end ``ok``; None when it did."""
    failure = result.failure
    if failure == FailureKind.OK:
        return None
    if failure in _INFRA:
        return Verdict.INFRA_ERROR, f"{failure.value}: {result.detail}"[:_HEAD]
    if failure == FailureKind.TIMEOUT:  # the runner's detail says which limit ended it (sandbox/runner/command.py)
        which = "its CPU limit" if result.detail.startswith("CPU limit of") else "its wall-clock deadline"
        return Verdict.TIME_LIMIT, f"killed at {which} after {result.cpu_s:.2f}s CPU, {result.wall_s:.2f}s wall"
    if failure == FailureKind.OOM:
        return Verdict.MEMORY_LIMIT, "killed by the container's memory limit"
    if failure == FailureKind.OUTPUT_TRUNCATED:
        return Verdict.WRONG_ANSWER, "output exceeded the limit"
    last = _tail(result.stderr)
    if failure == FailureKind.NONZERO_EXIT and last.startswith("MemoryError"):
        return Verdict.MEMORY_LIMIT, last
    how = f"signal {result.signal}" if result.signal else f"exit code {result.exit_code}"
    return Verdict.RUNTIME_ERROR, f"{failure.value} ({how}): {last}"[:_HEAD]


def _result(
    index: int, result: ExecResult, verdict: Verdict, detail: str = "", split: bool | None = None
) -> TestResult:
    return TestResult(
        index=index,
        verdict=verdict,
        wall_s=round(result.wall_s, 4),
        cpu_s=round(result.cpu_s, 4),
        detail=detail,
        split=split,
        output_head=result.stdout[:_HEAD].decode("utf-8", errors="replace"),
    )


def _first_difference(actual: str, expected: str, tolerance: Tolerance) -> str:
    got, want = actual.split(), expected.split()
    for position, (a, e) in enumerate(zip(got, want)):
        if not outputs_match(a, e, tolerance):
            return f"token {position} differs (got {a[:40]!r})"
    return f"{len(got)} tokens, expected {len(want)}"


def judge_stdin(index: int, result: ExecResult, test: StdinTest, tolerance: Tolerance) -> TestResult:
    failed = failure_verdict(result)
    if failed:
        return _result(index, result, *failed)
    actual = result.stdout.decode("utf-8", errors="replace")
    if outputs_match(actual, test.output, tolerance):
        return _result(index, result, Verdict.PASSED)
    return _result(index, result, Verdict.WRONG_ANSWER, _first_difference(actual, test.output, tolerance))


def _report(index: int, result: ExecResult, nonce: str, split: bool | None) -> DriverReport | TestResult:
    """The driver's report, or the failing TestResult when there is none to judge."""
    failed = failure_verdict(result)
    if failed:
        return _result(index, result, *failed, split=split)
    try:
        report = parse_report(result.stdout, nonce)
    except EncodingError as err:
        return _result(index, result, Verdict.WRONG_ANSWER, f"malformed result: {err}"[:_HEAD], split)
    if report is None:
        detail = "no result from the driver: the program exited before returning"
        return _result(index, result, Verdict.RUNTIME_ERROR, detail, split)
    if report.kind == "error":
        verdict = Verdict.MEMORY_LIMIT if report.payload.startswith("MemoryError") else Verdict.RUNTIME_ERROR
        if split is False and report.payload.startswith("AssertionError"):
            verdict = Verdict.WRONG_ANSWER
        return _result(index, result, verdict, report.payload[:_HEAD], split)
    if report.kind == "unserialisable":
        detail = f"returned a value that is not plain data ({report.payload})"[:_HEAD]
        return _result(index, result, Verdict.WRONG_ANSWER, detail, split)
    return report


def judge_call(index: int, result: ExecResult, test: CallTest, nonce: str, tolerance: Tolerance) -> TestResult:
    report = _report(index, result, nonce, None)
    if isinstance(report, TestResult):
        return report
    if report.kind != "value":
        return _result(index, result, Verdict.WRONG_ANSWER, f"driver reported {report.kind!r}, not a value")
    value = report.payload
    if values_match(value, test.expected, tolerance) or (
        test.wrapped and values_match(value, test.expected[0], tolerance)
    ):
        return _result(index, result, Verdict.PASSED)
    return _result(index, result, Verdict.WRONG_ANSWER, f"returned {shown(value, 80)}")


def judge_split_assert(index: int, result: ExecResult, split: SplitAssert, nonce: str) -> TestResult:
    report = _report(index, result, nonce, True)
    if isinstance(report, TestResult):
        return report
    if report.kind != "values" or len(report.payload) != len(split.leaves):
        return _result(index, result, Verdict.WRONG_ANSWER, f"driver reported {report.kind!r}, not the values", True)
    try:
        passed = holds(split, report.payload)
    except HostEvalError as err:
        return _result(index, result, Verdict.WRONG_ANSWER, f"assert raised on the host: {err}"[:_HEAD], True)
    if passed:
        return _result(index, result, Verdict.PASSED, split=True)
    got = ", ".join(shown(v, 60) for v in report.payload)
    return _result(index, result, Verdict.WRONG_ANSWER, f"assert failed with candidate values ({got})"[:_HEAD], True)


# The checker's outcomes (tasks/checker.py): the candidate's failures are scored, what the task or the
# checker itself failed at is masked.
_CHECKED = {
    "assertion": Verdict.WRONG_ANSWER,
    "test_error": Verdict.WRONG_ANSWER,
    "raised": Verdict.RUNTIME_ERROR,
    "aborted": Verdict.RUNTIME_ERROR,
    "unsupported": Verdict.INFRA_ERROR,
    "task_error": Verdict.INFRA_ERROR,
    "checker_error": Verdict.INFRA_ERROR,
}


def judge_checked(index: int, result: ExecResult, nonce: str) -> TestResult:
    """An assert test run by the checker: its verdict line, from a process that ended ``ok``."""
    report = _report(index, result, nonce, False)
    if isinstance(report, TestResult):
        return report
    if report.kind != "verdict":
        return _result(index, result, Verdict.WRONG_ANSWER, f"checker reported {report.kind!r}, not a verdict", False)
    outcome, detail = report.payload["outcome"], str(report.payload.get("detail", ""))[:_HEAD]
    if outcome == "passed":
        return _result(index, result, Verdict.PASSED, split=False)
    verdict = _CHECKED.get(outcome, Verdict.WRONG_ANSWER)
    if outcome == "raised" and detail.startswith("MemoryError"):
        verdict = Verdict.MEMORY_LIMIT
    if outcome == "aborted" and "not plain data" in detail:
        verdict = Verdict.WRONG_ANSWER
    return _result(index, result, verdict, detail, False)
