"""Every tool in a real hardened workspace: results, allowlist refusals, budgets, patching."""

from __future__ import annotations

import pytest

from gym.format.message import ToolCall
from gym.tools import Toolbox, ToolsConfig
from sandbox.failure import FailureKind
from tests.sandbox_support import in_workspace, small_config

pytestmark = pytest.mark.docker


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(namespace="functions", name=name, arguments=arguments, raw="{}")


def run_calls(calls: list[ToolCall], config: ToolsConfig | None = None, sandbox=None):
    box = Toolbox(config or ToolsConfig(timeout_s=5))

    async def go(ws):
        return [await box.call(ws, c) for c in calls]

    return in_workspace(go, sandbox or small_config())


def test_tools_work_together_in_one_workspace():
    program = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
    patch = (
        "--- a/sum.py\n+++ b/sum.py\n@@ -1,2 +1,2 @@\n import sys\n"
        "-print(sum(map(int, sys.stdin.read().split())))\n+print(-sum(map(int, sys.stdin.read().split())))\n"
    )
    outcomes = run_calls(
        [
            call("write_file", path="src/sum.py", content=program),
            call("bash", command="python3 sum.py", stdin="1 2 3", cwd="src"),
            call("python", code="import os; print(sorted(os.listdir('src')))"),
            call("list_dir", path="src"),
            call("apply_patch", patch=patch.replace("sum.py", "src/sum.py")),
            call("read_file", path="src/sum.py"),
            call("bash", command="python3 src/sum.py", stdin="1 2 3"),
            call("bash", command="echo oops >&2; exit 4"),
            call("submit", path="src/sum.py"),
        ]
    )
    assert [o.failure for o in outcomes] == [FailureKind.OK] * 7 + [FailureKind.NONZERO_EXIT, FailureKind.OK]
    assert outcomes[1].output == "[exit code 0]\nstdout:\n6\n"
    assert outcomes[2].output == "[exit code 0]\nstdout:\n['sum.py']\n"
    assert outcomes[3].output == f"sum.py ({len(program)} bytes)"
    assert "patching file src/sum.py" in outcomes[4].output
    assert outcomes[5].output.endswith("print(-sum(map(int, sys.stdin.read().split())))\n")
    assert outcomes[6].output == "[exit code 0]\nstdout:\n-6\n"
    assert outcomes[7].output == "[exit code 4]\nstderr:\noops\n"
    assert outcomes[8].submitted == outcomes[5].output


def test_allowlist_refusals_are_sandbox_denied():
    outcomes = run_calls(
        [
            call("read_file", path="/etc/passwd"),
            call("write_file", path="../tmp/x", content="x"),
            call("list_dir", path="/"),
            call("bash", command="pwd", cwd="/etc"),
            call("bash", command="ln -s /etc/passwd link"),
            call("read_file", path="link"),
            call("submit", path="/etc/hostname"),
        ]
    )
    kinds = [o.failure for o in outcomes]
    assert kinds == [FailureKind.SANDBOX_DENIED] * 4 + [
        FailureKind.OK,
        FailureKind.SANDBOX_DENIED,
        FailureKind.SANDBOX_DENIED,
    ]
    assert all(o.output.startswith("[sandbox_denied]") for i, o in enumerate(outcomes) if i != 4)
    assert outcomes[6].submitted is None


def test_timeouts_missing_files_and_failed_patches():
    outcomes = run_calls(
        [
            call("bash", command="sleep 30", timeout=0.5),
            call("read_file", path="missing.py"),
            call("apply_patch", patch="--- a/missing.py\n+++ b/missing.py\n@@ -1 +1 @@\n-a\n+b\n"),
        ]
    )
    assert outcomes[0].failure == FailureKind.TIMEOUT and outcomes[0].output.startswith("[timeout")
    assert outcomes[1].failure == FailureKind.TOOL_ERROR and "No such file" in outcomes[1].output
    assert outcomes[2].failure == FailureKind.NONZERO_EXIT and "missing.py" in outcomes[2].output


def test_episode_call_budget_refuses_later_calls():
    sandbox = small_config(episode={"max_calls": 2})
    outcomes = run_calls([call("bash", command="true")] * 3, sandbox=sandbox)
    assert [o.failure for o in outcomes] == [FailureKind.OK, FailureKind.OK, FailureKind.SANDBOX_DENIED]
    assert "budget" in outcomes[2].output


def test_any_text_round_trips_through_write_and_read():
    # "?>" encodes to '+' in standard base64 ('-' in pydantic's URL-safe default, which the runner dropped)
    text = "print('a?>b', \"~~~\", '\\u00e9\\u4e2d')\n" + "".join(chr(c) for c in range(32, 127))
    outcomes = run_calls(
        [
            call("write_file", path="t.py", content=text),
            call("read_file", path="t.py"),
            call("bash", command="cat", stdin=text),
        ]
    )
    assert [o.failure for o in outcomes] == [FailureKind.OK] * 3
    assert outcomes[1].output == text and outcomes[2].output == f"[exit code 0]\nstdout:\n{text}"


def test_sampled_bytes_never_raise_past_the_call():
    """Names that are not UTF-8 and arguments with lone surrogates, in the real sandbox: outcomes, not crashes."""
    outcomes = run_calls(
        [
            call("python", code="open(b'caf\\xe9.txt', 'w').write('x'); import os; os.mkdir(b'd\\xff')"),
            call("list_dir", path="."),
            call("bash", command="ls", cwd="d\udcff"),
            call("python", code="print('\ud800')"),
            call("read_file", path="caf\udce9.txt"),
            call("bash", command="echo still here"),
        ]
    )
    made, listing, odd_cwd, surrogate, odd_read, after = outcomes
    assert made.failure == FailureKind.OK, made
    assert listing.failure == FailureKind.OK and "caf" in listing.output, listing
    for outcome in outcomes:
        outcome.output.encode("utf-8")
    assert surrogate.failure == FailureKind.TOOL_ERROR and odd_cwd.failure in (
        FailureKind.TOOL_ERROR,
        FailureKind.SANDBOX_DENIED,
    )
    assert odd_read.failure in (FailureKind.TOOL_ERROR, FailureKind.OK), odd_read
    assert after.failure == FailureKind.OK and "still here" in after.output
