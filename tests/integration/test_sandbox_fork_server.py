"""The fork server (`sandbox/runner/zygote.py`) in real workspaces: a command it runs is what a fresh
``python3 -I`` would be, in every property a program can observe that matters (identity, limits, descriptors,
environment, modules, flags, exit status), and nothing a command does there reaches the server or the next
command. Each attack runs as a fork-server command beside an honest control in the same workspace."""

from __future__ import annotations

import json

import pytest

from sandbox.failure import FailureKind
from sandbox.protocol import BatchExecRequest, ExecRequest
from tests.sandbox_support import SANDBOX_USER_PIDS, in_workspace

pytestmark = pytest.mark.docker

PROBE = r"""
import json, os, resource, signal, sys
def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as exc:
        return type(exc).__name__
status = dict(line.split(":\t", 1) for line in read("/proc/self/status").splitlines() if ":\t" in line)
print(json.dumps({
    "argv": sys.argv, "name": __name__, "file": globals().get("__file__"), "doc": __doc__,
    "main": sorted(k for k in vars(sys.modules["__main__"]) if k not in ("json", "os", "resource", "signal", "sys", "read", "status")),
    "modules_at_start": sorted(START), "flags": list(sys.flags), "path": sys.path,
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    "pgrp_is_self": os.getpgrp() == os.getpid(), "cwd": os.getcwd(), "env": dict(os.environ),
    "fds": sorted(os.listdir("/proc/self/fd")), "oom": read("/proc/self/oom_score_adj").strip(),
    "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")},
    "cpu": resource.getrlimit(resource.RLIMIT_CPU),  # RLIMIT_AS: the room under it, in the held-out module
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGPIPE, signal.SIGINT, signal.SIGXFSZ, signal.SIGTERM)],
    "stdin": sys.stdin.read(), "streams": [s.isatty() for s in (sys.stdin, sys.stdout, sys.stderr)],
    "line_buffering": [sys.stdout.line_buffering, sys.stderr.line_buffering], "encoding": sys.stdout.encoding,
    "environ_readable": read("/proc/self/environ") != "PermissionError",
    "recursion": sys.getrecursionlimit(), "builtins": sorted(dir(__builtins__))[:5] + [hasattr(__builtins__, "exit")],
}))
"""
START = "import sys; START = set(sys.modules)\n"


def request(argv: list[str], fork_server: bool, **fields) -> ExecRequest:
    fields = {"memory_limit_bytes": 300 << 20, "cpu_limit_s": 1.0, "timeout_s": 20, **fields}
    return ExecRequest(argv=argv, fork_server=fork_server, **fields)


def both(go_commands):
    """Run each ``(argv, fields)`` fresh and through the fork server in one workspace: [(fresh, forked)]."""

    async def go(ws):
        await ws.write_file("/workspace/probe.py", (START + PROBE).encode())
        out = []
        for argv, fields in go_commands:
            fresh = await ws.exec(request(argv, False, **fields))
            forked = await ws.exec(request(argv, True, **fields))
            out.append((fresh, forked))
        return out

    return in_workspace(go)


def test_a_forked_command_is_what_a_fresh_interpreter_would_be():
    pairs = both(
        [
            (["python3", "-I", "-c", START + PROBE, "a", "b c"], {"stdin": b"input\n"}),
            (["python3", "-I", "/workspace/probe.py", "--x"], {"stdin": b""}),
        ]
    )
    for fresh, forked in pairs:
        assert fresh.failure == forked.failure == FailureKind.OK, (fresh.stderr_text, forked.stderr_text)
        seen, got = json.loads(fresh.stdout_text), json.loads(forked.stdout_text)
        assert got == seen
    assert json.loads(pairs[0][1].stdout_text)["argv"] == ["-c", "a", "b c"]
    assert json.loads(pairs[1][1].stdout_text)["file"] == "/workspace/probe.py"


EXITS = {
    "exit 3": "import sys; sys.exit(3)",
    "exit with a message": "import sys; sys.exit('bye')",
    "an exception": "print('partial'); raise ValueError('no')",
    "a syntax error": "def (:",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "os._exit": "import os; print('lost', end=''); os._exit(5)",
    "SIGKILL of itself": "import os; os.kill(os.getpid(), 9)",
    "atexit and a flush": "import atexit; atexit.register(print, 'at exit'); print('body', end='')",
    "a memory bomb": "x = bytearray(400 << 20)",
    "a CPU burner": "while True: pass",
}


def test_exit_status_output_and_failure_match_a_fresh_interpreter():
    names = list(EXITS)
    pairs = both([(["python3", "-I", "-c", EXITS[name]], {}) for name in names])
    for name, (fresh, forked) in zip(names, pairs):
        assert (forked.exit_code, forked.signal, forked.failure, forked.stdout) == (
            fresh.exit_code,
            fresh.signal,
            fresh.failure,
            fresh.stdout,
        ), name
        assert forked.stderr_text.splitlines()[-1:] == fresh.stderr_text.splitlines()[-1:], name
        assert forked.stderr_text.count("File ") == fresh.stderr_text.count("File "), name  # no frame of the server


def test_a_missing_script_and_a_directory_as_script():
    async def go(ws):
        await ws.exec(ExecRequest(argv=["mkdir", "-p", "/workspace/pkg"]))
        await ws.write_file("/workspace/pkg/__main__.py", b"print('from the package')")
        out = []
        for argv in (["python3", "-I", "/workspace/nope.py"], ["python3", "-I", "/workspace/pkg"]):
            out.append((await ws.exec(request(argv, False)), await ws.exec(request(argv, True))))
        return out

    (missing_fresh, missing_forked), (pkg_fresh, pkg_forked) = in_workspace(go)
    assert missing_forked.exit_code == missing_fresh.exit_code == 2
    assert missing_forked.stderr_text == missing_fresh.stderr_text
    assert pkg_forked.stdout_text == pkg_fresh.stdout_text == "from the package\n"


SERVER = r"""
import os
parent = os.getppid()
with open("/proc/%d/status" % parent) as handle:
    uid = [line.split()[1] for line in handle if line.startswith("Uid:")][0]
print(parent, uid)
"""

ATTACKS = {
    "kill the server": "import os, signal\nfor pid in [os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    try: os.kill(pid, signal.SIGKILL)\n    except OSError: pass",
    "stop the server": "import os, signal\ntry: os.kill(os.getppid(), signal.SIGSTOP)\nexcept OSError as e: print(e)",
    "read its memory": "import os\ntry: open('/proc/%d/mem' % os.getppid(), 'rb').read(16)\nexcept OSError as e: print(e)",
    "ptrace it": "import ctypes, os\nprint(ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0))",
    "patch the interpreter's state": "import builtins, os, sys\nbuiltins.print = None\nos.path.join = None\n"
    "sys.modules['json'] = None\nsys.setrecursionlimit(50)",
    "leave a child behind": "import subprocess\nsubprocess.Popen(['sleep', '60'], start_new_session=True)",
    "write to inherited descriptors": "import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'x')\n"
    "    except OSError: pass",
    "a fork bomb": "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
}

AFTER = (
    "import json, os, sys\n"
    + SANDBOX_USER_PIDS
    + r"""
print(json.dumps({"left": sandbox_user_pids(settle_s=5.0), "recursion": sys.getrecursionlimit(),
                  "json": sys.modules.get("json", 0) is not None, "path_join": os.path.join("a", "b")}))
"""
)


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_nothing_a_command_does_reaches_the_server_or_the_next_command(name, forked):
    """Each attack as a forked command and as a command of the runner's own spawn (any tool call)."""

    async def go(ws):
        before = await ws.exec(request(["python3", "-I", "-c", SERVER], True))
        attack = await ws.exec(request(["python3", "-I", "-c", ATTACKS[name]], forked, timeout_s=5))
        server = await ws.exec(request(["python3", "-I", "-c", SERVER], True))
        after = await ws.exec(request(["python3", "-I", "-c", AFTER], True))
        honest = await ws.exec(request(["python3", "-I", "-c", "print(sum(range(10)))"], True))
        return before, attack, server, after, honest

    before, attack, server, after, honest = in_workspace(go)
    parent, uid = before.stdout_text.split()
    assert uid == "0"  # the server: root, out of the sandbox user's reach
    assert attack.failure != FailureKind.INFRA_ERROR, attack
    if name != "a fork bomb":  # a fork bomb the sweep cannot clear with the server spared costs the server
        assert server.stdout_text.split() == [parent, "0"], (name, server)
    state = json.loads(after.stdout_text)
    # no process of the attack lives on; its zombies, orphans init reaps in its own time, are gone within 5 s
    assert state == {"left": [], "recursion": 1000, "json": True, "path_join": "a/b"}, (name, state, attack.detail)
    assert honest.failure == FailureKind.OK and honest.stdout_text == "45\n"


def test_commands_that_ask_for_it_are_children_of_one_server():
    """The fork server is taken at all (a server that never starts would leave every command on the fresh path,
    and the comparisons above would still pass)."""

    async def go(ws):
        out = []
        for fork_server in (False, True, False, True):
            result = await ws.exec(request(["python3", "-I", "-c", "import os; print(os.getppid())"], fork_server))
            out.append(int(result.stdout_text))
        return out

    fresh_a, forked_a, fresh_b, forked_b = in_workspace(go)
    assert forked_a == forked_b  # one server's children
    assert fresh_a == fresh_b != forked_a  # the runner's own children


def test_commands_that_exit_at_once_are_supervised_to_the_end():
    """The server reaps a child only when the runner asks: a child that exits before the runner watches it is still
    its own (a batch of them once came back ``tool_error`` when the server reaped first, and the reply left in the
    socket answered the next spawn)."""

    async def go(ws):
        items = [request(["python3", "-I", "-c", f"import os; os._exit({k % 3})"], True) for k in range(30)]
        batch = await ws.exec_batch(BatchExecRequest(items=items))
        after = await ws.exec(request(["python3", "-I", "-c", "print('next')"], True))
        return batch.results, after

    results, after = in_workspace(go)
    assert [r.exit_code for r in results] == [k % 3 for k in range(30)]
    assert after.failure == FailureKind.OK and after.stdout_text == "next\n"
