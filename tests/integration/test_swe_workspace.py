"""The agent's side of an SWE instance: a scrubbed workspace, and a scripted multi-turn episode graded end to end."""

from __future__ import annotations

import json

import pytest
import trio

from gym.format.message import ToolCall
from gym.tools import Toolbox
from sandbox.failure import FailureKind
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.swe.diff import touched_paths
from tasks.swe.evaluation import grading_sandbox
from tasks.swe.grader import SweGrader, instance_sandbox
from tasks.swe.workspace import prepare, workspace_diff
from tests.swe_support import TOOLZ, images, shipped

pytestmark = [pytest.mark.docker, pytest.mark.slow]

F2P_NAME = "test_accumulate_zero_initial"  # only in test_patch
GOLD_LINE = "    if initial == no_default:\n"  # only in the fix commit


def sh(script: str, cwd: str = "/workspace") -> ExecRequest:
    return ExecRequest(argv=["bash", "-c", script], cwd=cwd, timeout_s=60)


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(namespace="functions", name=name, arguments=arguments, raw=json.dumps(arguments))


def run_in_workspace(fn):
    instance = shipped()[TOOLZ]
    sandbox = instance_sandbox(grading_sandbox(None), images()[TOOLZ])

    async def main():
        async with WorkspacePool(sandbox, gc_at_start=False) as pool:
            async with pool.acquire("pytest-swe-agent") as ws:
                await prepare(ws, instance)
                return await fn(instance, pool, ws)

    return trio.run(main)


def test_workspace_holds_the_base_commit_only():
    async def inspect(instance, pool, ws):
        out = {}
        for key, script in {
            "commits": "git -C repo rev-list --all | wc -l",
            "refs": "git -C repo for-each-ref --format='%(refname)'",
            "reflog": "git -C repo reflog --all | wc -l; ls repo/.git/logs 2>&1 | head -1",
            "objects": "git -C repo cat-file --batch-all-objects --batch",
            "grep": f"grep -rl {F2P_NAME} /workspace /opt/swe /usr/local/lib 2>/dev/null | head -5; true",
            "status": "git -C repo status --porcelain",
            "import": "python -c 'import toolz; print(toolz.__file__)'",
            "problem": "cat PROBLEM_STATEMENT.md",
        }.items():
            result = await ws.exec(sh(script))
            assert result.failure == FailureKind.OK, (key, result.stderr_text)
            out[key] = result.stdout_text
        return out

    seen = run_in_workspace(inspect)
    assert seen["commits"].strip() == "1"
    assert seen["refs"].split() == ["refs/heads/main"]
    assert seen["reflog"].startswith("0\n") and "No such file" in seen["reflog"]
    assert GOLD_LINE not in seen["objects"] and F2P_NAME not in seen["objects"]
    assert "if not initial or initial == no_default:" in seen["objects"]  # the base (buggy) code is there
    assert seen["grep"].strip() == ""  # nothing of the tests to come, anywhere in the image
    assert seen["status"] == ""  # a clean work tree: the install left no tracked change
    assert seen["import"].strip() == "/workspace/repo/toolz/__init__.py"  # edits are what `import` sees
    assert seen["problem"] == shipped()[TOOLZ].problem_statement


def test_scripted_episode_through_the_tools_is_graded_resolved():
    """A multi-turn scripted policy reads, edits and tests through the gym's tools, then the diff is graded."""
    box = Toolbox()
    # the policy's fix, as a diff against the workspace root (where apply_patch runs)
    fix = shipped()[TOOLZ].patch.replace(" a/toolz/", " a/repo/toolz/").replace(" b/toolz/", " b/repo/toolz/")
    script = [
        call("list_dir", path="."),
        call("read_file", path="PROBLEM_STATEMENT.md"),
        call("bash", command="grep -n 'no_default:' toolz/itertoolz.py", cwd="repo"),
        call("write_file", path="notes.md", content="accumulate: `not initial` drops 0 -> compare to no_default\n"),
        call("apply_patch", patch=fix),
        call("python", code="import toolz, operator; print(list(toolz.accumulate(operator.add, [1, 2], 0)))"),
        call(
            "bash",
            command="python -m pytest -q -p no:cacheprovider toolz/tests/test_itertoolz.py -k accumulate",
            cwd="repo",
            timeout=60,
        ),
        # the agent commits, tags and then deletes its .git: none of it may change the extracted diff
        call("bash", command="git add -A && git commit -qm fix && git tag v9 && rm -rf .git", cwd="repo"),
    ]

    async def episode(instance, pool, ws):
        outcomes = [await box.call(ws, step) for step in script]
        diff = await workspace_diff(ws, pool)
        async with WorkspacePool(pool.config, gc_at_start=False) as grading_pool:
            result = await SweGrader().grade(grading_pool, instance, diff)
        return outcomes, diff, result

    outcomes, diff, result = run_in_workspace(episode)
    assert [o.failure for o in outcomes] == [FailureKind.OK] * len(script), [o.output[-300:] for o in outcomes]
    assert "PROBLEM_STATEMENT.md" in outcomes[0].output and "repo" in outcomes[0].output
    assert "accumulate" in outcomes[1].output
    assert "58:    if not initial or initial == no_default:" in outcomes[2].output
    assert "[0, 1, 3]" in outcomes[5].output  # the edited repository is what `import toolz` sees
    assert "passed" in outcomes[6].output
    assert touched_paths(diff) == ["toolz/itertoolz.py"]
    assert f"+{GOLD_LINE}" in diff
    assert result.resolved and result.status == "resolved", result.detail
    assert result.f2p.failure == () and result.p2p.failure == ()


def test_an_untouched_workspace_gives_an_empty_diff_and_is_not_resolved():
    async def nothing(instance, pool, ws):
        await ws.exec(sh("cd repo && python -m pytest -q -p no:cacheprovider toolz/tests/test_itertoolz.py -x -k tail"))
        diff = await workspace_diff(ws, pool)
        async with WorkspacePool(pool.config, gc_at_start=False) as grading_pool:
            return diff, await SweGrader().grade(grading_pool, instance, diff)

    diff, result = run_in_workspace(nothing)
    assert diff == ""  # test runs leave caches, never a diff
    assert result.status == "unresolved" and set(result.f2p.failure) == set(shipped()[TOOLZ].fail_to_pass)
