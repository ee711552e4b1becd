"""SandboxFusion's /run_code schema and its mapping onto our sandbox (sandbox/fusion.py), without Docker: which paths a
request may name, what it may ask, how every outcome of a run reads in SandboxFusion's terms."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from sandbox.failure import FailureKind
from sandbox.fusion import (
    CODE_STEM,
    FUSION_LANGUAGES,
    RUNNERS,
    CommandRunStatus,
    RunCodeLimits,
    RunCodeRefused,
    RunCodeRequest,
    RunStatus,
    command_result,
    plan,
    response_of,
    workspace_path,
)
from sandbox.protocol import ExecResult

LIMITS = RunCodeLimits(
    max_code_bytes=100, max_stdin_bytes=50, max_files=3, max_files_bytes=30, max_fetch_files=2, max_run_timeout_s=5
)


def request(**fields) -> RunCodeRequest:
    return RunCodeRequest.model_validate({"code": "print(1)", "language": "python", **fields})


def refusal(**fields) -> RunCodeRefused:
    with pytest.raises(RunCodeRefused) as caught:
        plan(request(**fields), LIMITS, memory_mb=256)
    return caught.value


@pytest.mark.parametrize(
    "name",
    ["../x", "a/../../x", "a/..", "..", "/etc/passwd", "//etc/passwd", "", ".", "./", "a\x00b", "x" * 1025, "a/../.."],
)
def test_a_path_that_could_leave_the_workspace_is_refused(name):
    assert workspace_path(name) is None


@pytest.mark.parametrize(
    ("name", "normal"), [("a.txt", "a.txt"), ("d/e/f.py", "d/e/f.py"), ("./a", "a"), ("a//b", "a/b"), ("..a", "..a")]
)
def test_a_path_inside_is_normalised(name, normal):
    assert workspace_path(name) == normal


def test_the_files_land_beside_the_code_and_the_command_runs_it():
    files = {"d/in.txt": base64.b64encode(b"42").decode(), "skipped.txt": None}
    checked = plan(request(files=files, stdin="x", fetch_files=["./out.txt"]), LIMITS, memory_mb=256)
    assert checked.files == {"d/in.txt": b"42", f"{CODE_STEM}.py": b"print(1)"}
    assert checked.exec.argv == ["python3", f"{CODE_STEM}.py"] and checked.exec.stdin == b"x"
    assert checked.fetch == (("./out.txt", "out.txt"),)
    assert plan(request(language="bash", code="echo"), LIMITS, 256).exec.argv == ["/bin/bash", f"{CODE_STEM}.sh"]


@pytest.mark.parametrize("field", ["files", "fetch_files"])
def test_traversal_in_files_and_fetch_files_is_refused_before_anything_runs(field):
    value = {"../escape": "eA==", "/abs": "eA=="} if field == "files" else ["ok.txt", "../../etc/shadow"]
    refused = refusal(**{field: value})
    assert refused.status == 422
    assert {d["type"] for d in refused.detail} == {"path_outside"}
    assert len(refused.detail) == (2 if field == "files" else 1)


def test_two_names_of_one_file_and_the_codes_own_name_are_refused():
    assert refusal(files={"a": "eA==", "./a": "eA=="}).status == 422
    assert refusal(files={f"{CODE_STEM}.py": "eA=="}).detail[0]["loc"] == ["body", "files", f"{CODE_STEM}.py"]
    assert refusal(files={"a": "e"}).detail[0]["type"] == "base64_invalid"


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"code": "x" * 101}, "code"),
        ({"code": "é" * 51}, "code"),  # 102 bytes in UTF-8
        ({"stdin": "x" * 51}, "stdin"),
        ({"files": {f"f{i}": None for i in range(4)}}, "files"),
        ({"files": {"a": base64.b64encode(b"x" * 31).decode()}}, "files"),
        ({"fetch_files": ["a", "b", "c"]}, "fetch_files"),
    ],
)
def test_a_field_past_its_bound_is_413_and_one_at_it_runs(fields, loc):
    refused = refusal(**fields)
    assert refused.status == 413 and refused.detail[0]["loc"] == ["body", loc]


def test_fields_at_their_bounds_are_taken():
    files = {"a": base64.b64encode(b"x" * 30).decode(), "b": None, "c": None}
    plan(request(code="x" * 100, stdin="y" * 50, files=files, fetch_files=["a", "b"]), LIMITS, 256)


def test_a_language_this_image_lacks_is_refused_as_sandbox_fusion_refuses_an_unknown_one():
    for language in ("cpp", "klingon"):
        refused = refusal(language=language)
        assert refused.status == 422
        assert refused.detail[0]["type"] == "literal_error" and refused.detail[0]["loc"] == ["body", "language"]
    assert set(RUNNERS) <= set(FUSION_LANGUAGES)


def test_timeouts_are_checked_and_clamped():
    for bad in ({"run_timeout": 0}, {"run_timeout": -1}, {"compile_timeout": -1}, {"run_timeout": float("inf")}):
        with pytest.raises(ValidationError):
            request(**bad)
    assert plan(request(run_timeout=1e9), LIMITS, 256).exec.timeout_s == 5
    assert plan(request(run_timeout=0.5), LIMITS, 256).exec.timeout_s == 0.5


@pytest.mark.parametrize(("asked", "limit"), [(-1, None), (0, None), (-7, None), (64, 64 << 20), (10**12, 256 << 20)])
def test_the_memory_limit_is_clamped_to_the_workspace_budget(asked, limit):
    assert plan(request(memory_limit_MB=asked), LIMITS, memory_mb=256).exec.memory_limit_bytes == limit


@pytest.mark.parametrize(
    ("result", "status", "code", "overall"),
    [
        (ExecResult(exit_code=0, stdout=b"ok\n"), CommandRunStatus.FINISHED, 0, RunStatus.SUCCESS),
        (ExecResult(exit_code=3, failure=FailureKind.NONZERO_EXIT), CommandRunStatus.FINISHED, 3, RunStatus.FAILED),
        (ExecResult(signal=11, failure=FailureKind.NONZERO_EXIT), CommandRunStatus.FINISHED, -11, RunStatus.FAILED),
        (ExecResult(failure=FailureKind.TIMEOUT, wall_s=2.0), CommandRunStatus.TIME_LIMIT_EXCEEDED, None, "Failed"),
        (ExecResult(failure=FailureKind.OOM), CommandRunStatus.FINISHED, -9, RunStatus.FAILED),
        (ExecResult(failure=FailureKind.WORKSPACE_LOST), CommandRunStatus.FINISHED, -9, RunStatus.FAILED),
        (ExecResult(exit_code=1, failure=FailureKind.PIDS_LIMIT), CommandRunStatus.FINISHED, 1, RunStatus.FAILED),
        (ExecResult(signal=9, failure=FailureKind.OUTPUT_TRUNCATED, truncated=True), "Finished", -9, "Failed"),
        (ExecResult(failure=FailureKind.INFRA_ERROR, detail="engine"), CommandRunStatus.ERROR, None, "SandboxError"),
    ],
)
def test_every_outcome_reads_as_sandbox_fusion_reports_it(result, status, code, overall):
    run = command_result(result)
    assert run.status == status and run.return_code == code
    answer = response_of(run, "pod")
    assert answer.status == overall
    assert (answer.message == "") == (result.failure == FailureKind.OK)
    assert run.truncated == result.truncated and run.failure == result.failure


def test_a_zero_exit_after_an_oom_kill_of_a_child_still_says_oom():
    """The process's own status decides Success, as in SandboxFusion; our classification rides along."""
    answer = response_of(command_result(ExecResult(exit_code=0, failure=FailureKind.OOM)), None)
    assert answer.status == RunStatus.SUCCESS and answer.run_result.failure == FailureKind.OOM
    assert answer.message == "run: oom"
