"""The runner's side of the fork server (`sandbox/runner/zygote.py`): one ``python3 -I`` started with the
container that forks a child per command asking for it (``fork_server`` of an exec request), so a grader's
test skips the interpreter's start-up.

The server is root and holds CAP_SETUID/CAP_SETGID (it is started before the runner empties its bounding set,
and empties its own); it never runs the candidate's code, its children drop to the sandbox user before they
do. The sweep spares it (`sandbox.runner.sweep.KEEP`) while it kills every process of the sandbox user; a
sweep that cannot clear the container with it spared kills it too, and the runner's own spawn takes over.
Whatever goes wrong with the server (it never started, died, or answers out of turn), the command runs
through the runner's own spawn instead; only a server lost while its child runs fails that command, as
``infra_error`` (the candidate cannot reach a root process).
"""

import array
import marshal
import os
import select
import signal
import socket
import subprocess

from sandbox import wire
from sandbox.runner.sweep import KEEP

INTERPRETER = ["python3", "-I"]
REPLY_TIMEOUT_S = 10.0
REAP_PATIENCE_S = 0.5
READY_TIMEOUT_S = 2.0  # the first request waits this long at most for the server's start-up (then runs without it)
MAX_REQUEST = 1 << 20  # the server's receive buffer: a larger request runs through the runner's spawn
ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")


class Lost(Exception):
    """The server died or stopped answering."""


class Child:
    """A command's process forked by the server, shaped as the part of `subprocess.Popen` the runner uses."""

    def __init__(self, server, pid, stdin, stdout, stderr):
        self.server = server
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb", buffering=0)
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.returncode = None

    def wait4(self, killed=False):
        """``(status, rusage)`` once the child has exited (its parent, the server, reaps it when asked); Lost if
        the server cannot say. ``killed``: the runner killed the command (its deadline, its output bound) and swept
        before this; a sweep that cannot spare the server within its SPARING_S (processes slow to die on a starved
        host, or made slow by the candidate) kills every process, the server too. The command's end is then the
        runner's SIGKILL, whatever the server could have said: never the server's loss (that would mask the
        candidate's own timeout as infra_error). Its CPU time is the tree's, from the cgroup."""
        if killed and not self.server.alive:
            self.server.close()
            return int(signal.SIGKILL), Usage({"utime": 0.0, "stime": 0.0, "maxrss": 0})
        return self.server.reaped(self.pid)

    def abandon(self):
        """The runner gave up on this child between spawn and reap: the server is out of step, never asked again."""
        self.server.close()


class Usage:
    """The fields of a ``resource.struct_rusage`` the runner reads."""

    def __init__(self, reply):
        self.ru_utime = reply["utime"]
        self.ru_stime = reply["stime"]
        self.ru_maxrss = reply["maxrss"]


class ForkServer:
    """The runner's handle on its server (None of its methods raises on the server's failures)."""

    def __init__(self):
        self.sock = None
        self.process = None
        self.settled = False

    def start(self, env):
        """Start the server with the sandbox's environment (its interpreter reads it at start-up, as a command's
        does); on any failure there is simply no server."""
        try:
            with open(ZYGOTE) as handle:
                source = "%s\n%s" % (wire.FORK_SERVER_TAG, handle.read())
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_REQUEST + 4096)
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MAX_REQUEST + 4096)
            try:
                # stdin, stdout and stderr are pipes, as a command's are: the interpreter sizes its streams'
                # buffers from them at start-up, and the children inherit those streams
                self.process = subprocess.Popen(
                    [*INTERPRETER, "-c", source, str(theirs.fileno())],
                    cwd="/",
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    restore_signals=True,
                )
            finally:
                theirs.close()
            self.process.stdin.close()
            self.sock = ours
            KEEP.add(self.process.pid)
        except (OSError, ValueError):
            self.close()

    def settle(self):
        """Wait, once, for the server's ``{"ready": True}``: until then its probe of a fresh interpreter may run, a
        root process that is neither the server nor the sandbox user's (a sweep would kill it, and a reset count
        it). A server that does not say so within READY_TIMEOUT_S is closed (the first request's time is the
        candidate's: it must not wait out a server starting on a starved host)."""
        if self.settled:
            return
        self.settled = True
        if not self.alive:
            return
        try:
            if self._reply(READY_TIMEOUT_S).get("ready") is not True:
                self.close()
        except (OSError, Lost):
            self.close()

    @property
    def alive(self):
        return self.sock is not None and self.process is not None and self.process.pid in KEEP

    def spawn(self, argv, cwd, env, memory, cpu):
        """A `Child` running ``argv`` (what follows ``python3 -I``); a string (why) when the fork failed as a
        spawn's fork fails (the pids limit); None when the server cannot take it (run it the runner's way)."""
        if not self.alive:
            if self.sock is not None:
                self.close()
            return None
        request = marshal.dumps({"argv": argv, "cwd": cwd, "env": env, "memory": memory, "cpu": cpu})
        if len(request) > MAX_REQUEST:
            return None
        pipes = [os.pipe() for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            fds = array.array("i", theirs)
            self.sock.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
            reply = self._reply()
        except (OSError, Lost):
            self.close()
            reply = None
        finally:
            for fd in theirs:
                os.close(fd)
        if reply is None or "pid" not in reply:
            for fd in ours:
                os.close(fd)
            return None if reply is None else str(reply.get("error"))
        return Child(self, reply["pid"], *ours)

    def reaped(self, pid):
        """``(status, rusage)`` of child ``pid`` once it has exited (the server reaps it only now). A reply slow to
        come means a thread of the child still runs (its main thread may have exited alone): the child is killed,
        as a command past its deadline is, and the reply awaited again; only a server that still does not answer
        is Lost (it cannot be the candidate's doing: the child, unreaped, keeps its pid)."""
        try:
            self.sock.send(b"reap")
            try:
                reply = self._reply(REAP_PATIENCE_S)
            except Lost:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                reply = self._reply()
        except (OSError, Lost) as exc:
            self.close()
            raise Lost(str(exc)) from exc
        if "status" not in reply:
            self.close()
            raise Lost("the fork server answered %.200r" % (reply,))
        return reply["status"], Usage(reply)

    def _reply(self, timeout_s=REPLY_TIMEOUT_S):
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            raise Lost("no reply within %.1f s" % timeout_s)
        data = self.sock.recv(4096)
        if not data:
            raise Lost("the fork server closed its socket")
        try:
            reply = marshal.loads(data)
        except (EOFError, ValueError, TypeError) as exc:
            raise Lost("unreadable reply: %s" % exc) from exc
        if not isinstance(reply, dict):
            raise Lost("the fork server answered %.200r" % (reply,))
        return reply

    def close(self):
        """Stop using the server (and kill it: a server out of step is never asked again)."""
        if self.process is not None:
            KEEP.discard(self.process.pid)
            try:
                if self.process.poll() is None:  # never a pid that `reap` already collected (it may be reused)
                    self.process.kill()
            except OSError:
                pass
            if self.process.stdout is not None:
                self.process.stdout.close()
        if self.sock is not None:
            self.sock.close()
        self.sock = None


SERVER = ForkServer()


def takes(body):
    """``argv`` after ``python3 -I`` when the fork server may run ``body`` exactly as a fresh ``python3 -I``
    would: asked for, the interpreter's own argv, a ``-c`` program or a script path (no other option), and no
    environment of its own (the interpreter reads it at start-up). None otherwise."""
    argv = body["argv"]
    if not body.get("fork_server") or body.get("env") or argv[:2] != INTERPRETER or len(argv) < 3:
        return None
    rest = argv[2:]
    if rest[0] == "-c":
        return rest if len(rest) >= 2 else None
    return None if rest[0].startswith("-") else rest
