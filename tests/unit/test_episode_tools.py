"""Tools without Docker: argument validation, refusals, observation text, schemas in the prompt.

Tools run on ``MemoryWorkspace`` (tests/fakes.py): files in a dict, commands answered from a table.
Real execution is covered in tests/integration/test_episode_tools.py.
"""

from __future__ import annotations

import pytest

from gym.format.prompt import developer_message
from gym.tools import DEFAULT_TOOLS, SubmitArgs, Toolbox, ToolsConfig, patch_paths, schema_of
from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest, ExecResult
from tests.fakes import MemoryWorkspace, call, run


def test_unknown_tool_and_namespace_are_tool_errors_listing_the_tools():
    box, ws = Toolbox(), MemoryWorkspace()
    for bad in (call("rm_rf"), call("python", namespace="browser", code="1")):
        outcome = run(box, ws, bad)
        assert outcome.failure == FailureKind.TOOL_ERROR
        assert "unknown tool" in outcome.output and "functions.submit" in outcome.output
    assert ws.requests == []


def test_bad_arguments_name_the_field():
    box, ws = Toolbox(), MemoryWorkspace()
    missing = run(box, ws, call("write_file", path="a.py"))
    assert (
        missing.failure == FailureKind.TOOL_ERROR and "content" in missing.output and "Field required" in missing.output
    )
    typo = run(box, ws, call("bash", command="ls", cwdd="/"))
    assert typo.failure == FailureKind.TOOL_ERROR and "cwdd" in typo.output
    wrong_type = run(box, ws, call("python", code=42))
    assert wrong_type.failure == FailureKind.TOOL_ERROR and "code" in wrong_type.output
    both = run(box, ws, call("submit", path="a.py", code="print(1)"))
    assert both.failure == FailureKind.TOOL_ERROR and "exactly one" in both.output
    assert ws.requests == [] and ws.files == {}


def test_disabled_tool_is_unknown():
    box = Toolbox(ToolsConfig(enabled=("bash", "submit")))
    assert run(box, MemoryWorkspace(), call("python", code="1")).failure == FailureKind.TOOL_ERROR
    assert [spec.name for spec in box.specs()] == ["bash", "submit"]


def test_submit_must_stay_enabled_and_timeouts_are_ordered():
    with pytest.raises(ValueError, match="submit"):
        ToolsConfig(enabled=("bash",))
    with pytest.raises(ValueError, match="max_timeout_s"):
        ToolsConfig(timeout_s=100, max_timeout_s=10)


def test_exec_tools_build_the_request_and_cap_the_timeout():
    box, ws = Toolbox(ToolsConfig(timeout_s=5, max_timeout_s=20)), MemoryWorkspace()
    run(box, ws, call("python", code="print(1)", stdin="x"))
    run(box, ws, call("bash", command="ls", cwd="sub", timeout=999))
    first, second = ws.requests
    assert first.argv == ["python3", "-c", "print(1)"] and first.stdin == b"x" and first.timeout_s == 5
    assert second.argv == ["bash", "-c", "ls"] and second.cwd == "sub" and second.timeout_s == 20


def test_exec_observation_is_deterministic_text():
    result = ExecResult(exit_code=3, stdout=b"out\n", stderr=b"boom\n", wall_s=1.234, failure=FailureKind.NONZERO_EXIT)
    ws = MemoryWorkspace({("bash", "-c", "false"): result})
    outcome = run(Toolbox(), ws, call("bash", command="false"))
    assert outcome.failure == FailureKind.NONZERO_EXIT
    assert outcome.output == "[exit code 3]\nstdout:\nout\n\nstderr:\nboom\n"
    assert "1.234" not in outcome.output  # timings would break replay comparison


def test_long_output_keeps_head_and_tail():
    long = ExecResult(exit_code=0, stdout=b"A" * 5000 + b"TAIL")
    ws = MemoryWorkspace({("bash", "-c", "big"): long})
    outcome = run(Toolbox(ToolsConfig(output_chars=1000)), ws, call("bash", command="big"))
    assert (
        len(outcome.output) < 1200 and outcome.output.rstrip().endswith("TAIL") and "characters cut" in outcome.output
    )


def test_file_tools_round_trip_and_refusals():
    box, ws = Toolbox(), MemoryWorkspace()
    assert run(box, ws, call("write_file", path="d/a.py", content="print(1)\n")).output == "wrote 9 bytes to d/a.py"
    assert run(box, ws, call("read_file", path="d/a.py")).output == "print(1)\n"
    assert run(box, ws, call("list_dir", path="d")).output == "a.py (9 bytes)"
    missing = run(box, ws, call("read_file", path="nope.py"))
    assert missing.failure == FailureKind.TOOL_ERROR and "No such file" in missing.output
    denied = run(box, ws, call("read_file", path="../etc/passwd"))
    assert denied.failure == FailureKind.SANDBOX_DENIED and denied.output.startswith("[sandbox_denied]")


def test_submit_by_path_or_code():
    box, ws = Toolbox(), MemoryWorkspace()
    ws.files["/workspace/solution.py"] = b"print(2)\n"
    by_path = run(box, ws, call("submit", path="solution.py"))
    assert by_path.failure == FailureKind.OK and by_path.submitted == "print(2)\n"
    assert run(box, ws, call("submit", code="print(3)")).submitted == "print(3)"
    missing = run(box, ws, call("submit", path="other.py"))
    assert missing.failure == FailureKind.TOOL_ERROR and missing.submitted is None


def test_patch_strip_level_and_paths():
    git = "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    plain = "--- x.py.orig\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n"
    created = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+b\n"
    assert patch_paths(git) == (["src/x.py", "src/x.py"], 1)
    assert patch_paths(plain) == (["x.py.orig", "x.py"], 0)
    assert patch_paths(created) == (["new.py"], 1)
    assert patch_paths("not a diff") == ([], 0)


def test_patch_leaving_the_workspace_is_denied_before_running():
    box, ws = Toolbox(), MemoryWorkspace()
    for target in ("/etc/passwd", "../../tmp/x", "a/../../x"):
        outcome = run(box, ws, call("apply_patch", patch=f"--- {target}\n+++ {target}\n@@ -1 +1 @@\n-a\n+b\n"))
        assert outcome.failure == FailureKind.SANDBOX_DENIED, target
    assert run(box, ws, call("apply_patch", patch="hello")).failure == FailureKind.TOOL_ERROR
    assert ws.requests == []
    run(box, ws, call("apply_patch", patch="--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"))
    assert ws.requests[0].argv[:2] == ["patch", "-p1"] and ws.requests[0].stdin.startswith(b"--- a/x.py")


def test_schemas_render_into_the_developer_message():
    text = developer_message("Solve it.", Toolbox().specs()).content
    for name in DEFAULT_TOOLS:
        assert f"type {name} = (_: {{" in text
    assert "code: string," in text and "timeout?: number," in text  # optional, not "number | null"
    schema = schema_of(SubmitArgs)
    assert "title" not in schema and schema["properties"]["path"] == {
        "description": "File holding the final program (e.g. 'solution.py').",
        "type": "string",
    }


def test_arguments_the_sandbox_cannot_carry_are_tool_errors_not_exceptions():
    """A sampled JSON escape can hold a lone surrogate: no tool may raise past the episode on it."""
    box, ws = Toolbox(), MemoryWorkspace()
    for bad in (
        call("python", code="print(1)", stdin="\ud800"),
        call("bash", command="ls", stdin="x\udcff"),
        call("write_file", path="a.py", content="\ud83d"),
        call("apply_patch", patch="--- a\n+++ b\n\udc80"),
    ):
        outcome = run(box, ws, bad)
        assert outcome.failure == FailureKind.TOOL_ERROR and "UnicodeEncodeError" in outcome.output, outcome
        outcome.output.encode("utf-8")


class _RaisingWorkspace(MemoryWorkspace):
    async def exec(self, request: ExecRequest) -> ExecResult:
        from sandbox.errors import InfraError

        raise InfraError("engine went away")


def test_an_engine_failure_under_a_tool_is_infra_error_and_anything_else_tool_error():
    outcome = run(Toolbox(), _RaisingWorkspace(), call("bash", command="true"))
    assert outcome.failure == FailureKind.INFRA_ERROR and "engine went away" in outcome.output


def test_observations_always_encode():
    ws = MemoryWorkspace({("bash", "-c", "ls"): ExecResult(exit_code=0, stdout=b"ok", detail="")})
    ws.files["/workspace/caf\udce9.txt"] = b"x"  # a name that was not UTF-8 (os.fsdecode's surrogateescape)
    outcome = run(Toolbox(), ws, call("list_dir", path="."))
    assert outcome.failure == FailureKind.OK and outcome.output == "caf?.txt (1 bytes)"
