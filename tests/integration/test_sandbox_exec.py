"""The runner path end to end: identity, I/O, file tools, archives, artifacts."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import trio

from sandbox.failure import FailureKind
from sandbox.pool import WorkspacePool
from sandbox.protocol import BatchExecRequest, ExecRequest
from tests.sandbox_support import in_workspace, py, sh, small_config

pytestmark = pytest.mark.docker


def test_command_runs_unprivileged_in_the_hardened_container():
    async def go(ws):
        return await ws.exec(sh("id -u; id -G; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; pwd"))

    result = in_workspace(go)
    assert result.failure == FailureKind.OK and result.exit_code == 0
    lines = result.stdout_text.splitlines()
    assert lines[0] == "1000" and lines[1] == "1000"
    status = dict(line.split(":\t") for line in lines[2:-1])
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, f"{cap} not empty: {status[cap]}"
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
    assert lines[-1] == "/workspace"


def test_stdin_stdout_stderr_exit_code_and_env():
    async def go(ws):
        return await ws.exec(
            py(
                "import os,sys; data=sys.stdin.read(); print(data.upper()); print(os.environ['X'], file=sys.stderr); sys.exit(7)",
                stdin=b"abc" * 50000,
                env={"X": "from-env"},
            )
        )

    result = in_workspace(go)
    assert result.exit_code == 7 and result.failure == FailureKind.NONZERO_EXIT
    assert result.stdout_text.strip() == "ABC" * 50000
    assert result.stderr_text.strip() == "from-env"
    assert result.wall_s > 0 and result.cpu_s > 0 and result.max_rss_kb > 0


def test_missing_program_is_a_classified_failure():
    async def go(ws):
        return await ws.exec(ExecRequest(argv=["definitely-not-a-program"]))

    result = in_workspace(go)
    assert result.exit_code == 127 and result.failure == FailureKind.NONZERO_EXIT
    assert "definitely-not-a-program" in result.detail


def test_file_tools_round_trip_and_permissions():
    async def go(ws):
        written = await ws.write_file("pkg/mod.py", b"X = 41\n")
        listed = await ws.list_dir("pkg")
        ran = await ws.exec(py("import mod; print(mod.X + 1)", cwd="/workspace/pkg"))
        owner = await ws.exec(sh("stat -c %u pkg/mod.py"))
        read = await ws.read_file("pkg/mod.py", max_bytes=3)
        return written, listed, ran, owner, read

    written, listed, ran, owner, read = in_workspace(go)
    assert written.failure == FailureKind.OK and written.bytes_written == 7
    assert [e.name for e in listed.entries] == ["mod.py"] and listed.entries[0].kind == "file"
    assert ran.stdout_text.strip() == "42"
    assert owner.stdout_text.strip() == "1000"
    assert read.data == b"X =" and read.truncated and read.failure == FailureKind.OUTPUT_TRUNCATED


def test_put_files_get_archive_and_batch():
    async def go(ws):
        put = await ws.put_files({"a.txt": b"alpha", "dir/b.txt": b"beta"})
        batch = await ws.exec_batch(
            BatchExecRequest(items=[sh("cat a.txt"), sh("cat dir/b.txt"), sh("exit 3"), sh("echo after")])
        )
        stopped = await ws.exec_batch(BatchExecRequest(items=[sh("exit 1"), sh("echo never")], stop_on_failure=True))
        tar = await ws.get_archive("dir")
        return put, batch, stopped, tar

    put, batch, stopped, tar = in_workspace(go)
    assert put.failure == FailureKind.OK
    assert [r.stdout_text for r in batch.results] == ["alpha", "beta", "", "after\n"]
    assert batch.results[2].exit_code == 3
    assert len(stopped.results) == 1
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        assert archive.extractfile("dir/b.txt").read() == b"beta"


def test_artifacts_are_copied_out_before_removal(tmp_path):
    async def main():
        async with WorkspacePool(small_config()) as pool:
            async with pool.acquire("pytest", artifacts_dir=tmp_path / "art") as ws:
                await ws.write_file("result.txt", b"kept")
                await ws.exec(sh("echo hi"))

    trio.run(main)
    calls = [json.loads(line) for line in (tmp_path / "art/calls.jsonl").read_text().splitlines()]
    assert [c["op"] for c in calls] == ["write_file", "exec"]
    with tarfile.open(tmp_path / "art/workspace.tar") as archive:
        assert archive.extractfile("workspace/result.txt").read() == b"kept"


def test_no_process_survives_a_call():
    async def go(ws):
        await ws.exec(sh("(setsid sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & sleep 0.1; echo started"))
        return await ws.exec(sh("ps -e -o user=,args= | grep -v -e 'ps -e' -e 'bash -c' -e grep || true"))

    result = in_workspace(go)
    sandbox_lines = [line for line in result.stdout_text.splitlines() if line.startswith("sandbox")]
    assert sandbox_lines == [], f"processes of an earlier call survived: {sandbox_lines}"


def test_runner_holds_no_supplementary_groups():
    async def go(ws):
        return await ws.exec(sh("grep -E '^(Uid|Groups):' /proc/$(pgrep -f '^python3 .*sandbox/runner')/status"))

    lines = dict(line.split(":", 1) for line in in_workspace(go).stdout_text.splitlines())
    assert lines["Uid"].split()[0] == "0"  # the runner is uid 0 (with four capabilities only)
    assert lines["Groups"].strip() == ""
