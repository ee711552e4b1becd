"""Lifetime: whatever a call starts dies with the call.

Observed from the host: right after the call returns, the container must hold
nothing but its init (tini) and the runner (``docker top``). Each program
tries another way to outlive its call.
"""

from __future__ import annotations

from sandbox.killtest.attack import Attack, Program

SWEPT = ("swept",)


def _lifetime(name: str, goal: str, lang: str, source: str, **options) -> Attack:
    program = Program(lang=lang, source=source, expected=SWEPT, observe="processes", **options)
    return Attack(name=name, group="lifetime", goal=goal, program=program)


ATTACKS = (
    _lifetime(
        "daemon_double_fork",
        "double fork + setsid daemon with closed descriptors",
        "python",
        """
import signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        os.closerange(0, 256)
        time.sleep(1000)
    os._exit(0)
time.sleep(0.2)
""",
    ),
    _lifetime(
        "nohup_background",
        "nohup ... & plus setsid and disown",
        "bash",
        "nohup sleep 1000 >/dev/null 2>&1 &\ndisown\nsetsid sleep 1000 >/dev/null 2>&1 < /dev/null &\nsleep 0.2\n",
    ),
    _lifetime(
        "ignore_signals",
        "background processes that ignore every catchable signal",
        "bash",
        """
( trap '' TERM HUP INT QUIT USR1 USR2 PIPE ALRM; while :; do sleep 1; done ) &
python3 -c '
import os, signal, time
for sig in range(1, 65):
    try:
        signal.signal(sig, signal.SIG_IGN)
    except (OSError, ValueError, RuntimeError):
        pass
if os.fork() == 0:
    time.sleep(1000)
' &
sleep 0.3
""",
    ),
    _lifetime(
        "zombies",
        "leave zombies behind a detached parent that never reaps",
        "python",
        """
import time
if os.fork() == 0:
    os.setsid()
    for _ in range(20):
        if os.fork() == 0:
            os._exit(0)
    time.sleep(1000)
time.sleep(0.3)
""",
    ),
    _lifetime(
        "clone_parent_zombies",
        "children made with raw clone(CLONE_PARENT) belong to the runner and exit at once: zombies it must reap",
        "python",
        """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
CLONE_PARENT, SIGCHLD = 0x00008000, 17
for _ in range(40):
    if libc.syscall(56, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0) == 0:  # clone(): the child's parent is the runner
        os._exit(0)
time.sleep(0.3)
""",
    ),
    _lifetime(
        "respawner",
        "a process that keeps re-forking itself under a new pid",
        "python",
        """
import time
if os.fork() == 0:
    os.setsid()
    while True:
        if os.fork():
            os._exit(0)
        time.sleep(0.001)
time.sleep(0.3)
""",
    ),
    _lifetime(
        "stopped_process",
        "a detached process that stops itself (SIGSTOP) to dodge termination",
        "bash",
        "setsid bash -c 'kill -STOP $$; sleep 1000' &\nsleep 0.3\n",
    ),
    _lifetime(
        "deadline_escape",
        "overrun the call deadline while children in other sessions keep running",
        "bash",
        "setsid sleep 1000 &\n( trap '' TERM; sleep 1000 ) &\nsleep 1000\n",
        timeout_s=1.5,
    ),
    Attack(
        name="runner_kill",
        group="lifetime",
        goal="kill, stop or hijack the runner and init (signals, its stdout, its code)",
        program=Program(
            lang="python",
            source="""
import signal
runner = pid_of(RUNNER)
if runner is None:
    report("error", "runner process not visible")
else:
    results = {
        "SIGKILL runner": attempt(os.kill, runner, signal.SIGKILL),
        "SIGSTOP runner": attempt(os.kill, runner, signal.SIGSTOP),
        "SIGKILL init": attempt(os.kill, 1, signal.SIGKILL),
        "signal 0 runner": attempt(os.kill, runner, 0),
        "open runner stdout": attempt(lambda: os.close(os.open("/proc/%d/fd/1" % runner, os.O_WRONLY))),
        "open runner stdin": attempt(lambda: os.close(os.open("/proc/%d/fd/0" % runner, os.O_RDONLY))),
        "write the runner's entry": attempt(lambda: open("/opt/gym/sandbox/runner/__main__.py", "a").close()),
        "write a runner module": attempt(lambda: open("/opt/gym/sandbox/runner/serve.py", "a").close()),
        "write wire.py": attempt(lambda: open("/opt/gym/sandbox/wire.py", "a").close()),
        "plant a runner module": attempt(lambda: open("/opt/gym/sandbox/runner/kt_planted.py", "w").close()),
        "shadow a stdlib module": attempt(lambda: open("/opt/gym/heapq.py", "w").close()),
    }
    denied(results)
""",
            expected=("denied",),
        ),
        targets=(
            "/opt/gym/sandbox/runner/__main__.py",
            "/opt/gym/sandbox/runner/serve.py",
            "/opt/gym/sandbox/wire.py",
            "/opt/gym/sandbox/runner/kt_planted.py",
            "/opt/gym/heapq.py",
        ),
    ),
)
