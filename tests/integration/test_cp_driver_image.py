"""The runner image's compiled copy of the CP driver, in the real sandbox: it is this checkout's driver, root's and
read-only, the grader's tests load it instead of compiling the driver, and a candidate that tries to replace,
shadow or plant a compiled driver changes nothing of what is graded (the honest controls beside it pass).

The fallback paths (another source, another interpreter, damaged files) are in tests/unit/test_cp_driver_program.py."""

from __future__ import annotations

import marshal

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.encoding import parse_report
from tasks.grader import PRECOMPILED_DRIVER, GraderConfig, driver_program, driver_source, grade_pairs
from tasks.submission import Submission
from tests.task_support import assert_task, call_task

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 1}, "episode": {"wall_s": 3600.0}})
NONCE = "0123456789abcdef"
AUDIT = (
    "import sys\n"
    "sys.addaudithook(lambda e, a: e == 'compile' and a[1] == '<string>' and print('COMPILED', file=sys.stderr))\n"
)
SOURCE, COMPILED = PRECOMPILED_DRIVER
TAMPER = (
    "import os, shutil\n"
    "tried = []\n"
    "for step in (\n"
    "    lambda: open('/opt/gym/tasks/driver.pyc', 'wb').write(b'x'),\n"
    "    lambda: open('/opt/gym/tasks/driver.py', 'a').write('x'),\n"
    "    lambda: os.rename('/opt/gym/tasks/driver.pyc', '/tmp/d.pyc'),\n"
    "    lambda: os.chmod('/opt/gym/tasks/driver.pyc', 0o666),\n"
    "    lambda: os.symlink('/tmp/fake.pyc', '/opt/gym/tasks/fake.pyc'),\n"
    "):\n"
    "    try:\n"
    "        step()\n"
    "        tried.append('done')\n"
    "    except OSError:\n"
    "        tried.append('refused')\n"
    "os.makedirs('/tmp/opt/gym/tasks', exist_ok=True)\n"  # a planted copy where a relative path would look
    "shutil.copyfile('/opt/gym/tasks/driver.py', '/tmp/opt/gym/tasks/driver.py')\n"
    "open('/tmp/opt/gym/tasks/driver.pyc', 'wb').write(open('/opt/gym/tasks/driver.pyc', 'rb').read()[:16])\n"
)


def in_workspace(*requests: ExecRequest):
    async def main():
        async with WorkspacePool(SANDBOX) as pool:
            async with pool.acquire(owner="pytest-cp-driver") as ws:
                await ws.write_file("/workspace/solution.py", b"def f(a, b):\n    return a + b\n")
                return [await ws.exec(request) for request in requests]

    return trio.run(main)


def test_the_image_holds_this_driver_compiled_and_root_owned_read_only():
    stat = ExecRequest(argv=["stat", "-c", "%u %g %a %n", SOURCE, COMPILED, "/opt/gym/tasks"], timeout_s=30)
    read = ExecRequest(argv=["cat", SOURCE], timeout_s=30)
    load = ExecRequest(
        argv=[
            "python3",
            "-I",
            "-c",
            f"import marshal; c = marshal.loads(open({COMPILED!r}, 'rb').read()[16:]); "
            f"print(c == compile(open({SOURCE!r}, 'rb').read(), '<string>', 'exec'), c.co_filename)",
        ],
        timeout_s=30,
    )
    write = ExecRequest(
        argv=["sh", "-c", f"echo x > {COMPILED}; echo x >> {SOURCE}; touch /opt/gym/tasks/new"], timeout_s=30
    )
    stat_r, read_r, load_r, write_r = in_workspace(stat, read, load, write)
    assert stat_r.stdout_text.split("\n")[:3] == [
        f"0 0 444 {SOURCE}",
        f"0 0 444 {COMPILED}",
        "0 0 755 /opt/gym/tasks",
    ], stat_r
    assert read_r.stdout == driver_source().encode()  # this checkout's driver, byte for byte
    assert load_r.stdout_text == "True <string>\n", load_r
    refusals = [
        line
        for line in write_r.stderr_text.splitlines()
        if line.endswith(("Read-only file system", "Permission denied"))
    ]
    assert write_r.exit_code != 0 and len(refusals) == 3, write_r


def test_a_test_loads_the_compiled_driver_and_the_source_fallback_agrees():
    payload = marshal.dumps(
        {"nonce": NONCE, "program": "/workspace/solution.py", "mode": "call", "fn_name": "f", "args": [1, 2]}, 4
    )
    requests = [
        ExecRequest(argv=["python3", "-I", "-c", AUDIT + program], stdin=payload, fork_server=fork, timeout_s=30)
        for program in (driver_program(), driver_source())
        for fork in (True, False)
    ]
    results = in_workspace(*requests)
    for result in results:
        report = parse_report(result.stdout, NONCE)
        assert result.exit_code == 0 and report.kind == "value" and report.payload == 3, result
    # the program compiled nothing named <string> past itself: the driver came compiled (where the files do not
    # match, the same hook sees the fallback's compile: tests/unit/test_cp_driver_program.py)
    assert [result.stderr for result in results[:2]] == [b"", b""], results[:2]


def test_a_candidate_that_tampers_with_the_compiled_driver_changes_no_verdict():
    config = GraderConfig(default_time_s=4.0, min_time_s=4.0)
    call = call_task("driver-call", [([x], 2 * x) for x in (2, 5, 7)])
    asserted = assert_task("driver-assert", [f"assert candidate({x}) == {2 * x}" for x in (2, 5, 7)])
    tamper_call = TAMPER + "def solve(x):\n    return 3 * x\n"
    tamper_assert = "    return 3 * x\n" + TAMPER  # the body, then the tampering at the module's level
    pairs = [
        (call, "def solve(x):\n    return 2 * x\n"),  # honest controls
        (asserted, "    return 2 * x\n"),
        (call, tamper_call),  # wrong answers that tamper: still wrong on every test
        (asserted, tamper_assert),
        (call, TAMPER + "def solve(x):\n    return 2 * x\n"),  # right answers that tamper: still right
    ]
    results = grade_pairs([(t, Submission(task_id=t.task_id, completion=c)) for t, c in pairs], config, SANDBOX)
    assert [r.fraction for r in results] == [1.0, 1.0, 0.0, 0.0, 1.0], [
        [(t.verdict, t.detail) for t in r.tests] for r in results
    ]
    assert not any(r.infra_error for r in results)
