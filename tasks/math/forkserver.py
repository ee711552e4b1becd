"""A process that imported the math check once and forks one child per check (`tasks.math.grader` asks it).

Why by hand: a fresh interpreter per check spends most of its time importing ``math_verify`` and sympy before it
reads a single character (`python -m gym bench math` measures a check both ways). ``multiprocessing``'s forkserver
would fork from a pre-imported process too, but it hands results back through pickled pipes of its own, reaps
children itself and offers no way to give a child our stdin, stdout and stderr files, read its CPU time in
``/proc`` while it runs, or kill it at a deadline; the grader's whole blame logic rests on those
(`tasks.math.grader`).

The shape (the server is this file run as a script, ``python -I tasks/math/forkserver.py FD``, FD its end of the
control socket):

* The grader's process starts one server (`ForkServer`, lazily, again after it died) and keeps the control end of
  a ``SOCK_SEQPACKET`` pair. Each check is one message on it carrying four descriptors (SCM_RIGHTS): the check's
  own connection, and its stdin, stdout and stderr files; the message's bytes are the address-space limit and the
  path of the check script.
* The server forks; the child takes the files as fds 0-2, closes every other descriptor, sets the limit, asks the
  kernel to kill it if the server dies, and runs the check (the imported module's ``main``, or another script by
  path: `runpy`). The server never parses a request's text: the policy's answer is read by the child only, from
  its stdin, so no answer can reach the process every later check is forked from. Each child starts from the same
  untouched imports.
* On the check's connection the server writes ``P`` and the child's pid, then ``X`` and its exit code (negative:
  the signal, as ``subprocess`` has it) once it reaped it (a pidfd says when). A byte from the grader, or the
  connection closing, kills the child (through its pidfd: never a reused pid).
* The server ends when the control socket closes (the grader's process ended), killing its children.

The grader reads the child's CPU time and run delay in ``/proc/PID`` as it did for a process of its own; the
server's death mid-check ends the check's connection, which the grader reports as the host's failure (masked).
"""

from __future__ import annotations

import errno
import os
import resource
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
import weakref
from pathlib import Path

SERVER = Path(__file__)
_HEADER = struct.Struct("<q")  # the child's address-space limit in bytes; the check script's path follows
_CODE = struct.Struct("<ci")  # b"P" + pid, then b"X" + exit code
_KILL_WAIT_S = 10.0  # how long a cancelled check waits for the server to report its child gone
_STDERR_TAIL = 2000  # characters of the server's own stderr quoted when it died
_LIBC = None  # the server's C library (prctl), loaded before any fork


class ForkServerError(OSError):
    """The server could not take a check or died during one: the host's failure, never the answer's."""


class ForkServer:
    """The grader's side: one server per process, started on first use and again after it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # graders in several threads (trio runs) share the process's server
        self._owner = 0  # the pid that started the server: a forked copy of this process starts its own
        self._process: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._stderr = None
        self._live: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # checks' connections still open
        self._hooked = False  # the fork hook is registered by the first start, not on import

    def _forget_in_child(self) -> None:
        """In a forked copy of this process: close its copies of the parent's sockets, so the parent's server still
        ends with the parent and a check the parent cancels is still killed; the copy starts its own server."""
        self._lock = threading.Lock()  # another thread may have held the parent's at the fork
        for connection in list(self._live):
            connection.close()
        if self._control is not None:
            self._control.close()
        self._process = self._control = self._stderr = None
        self._owner = 0

    def _started(self) -> socket.socket:
        """The control socket of a running server, starting one when there is none (or it died)."""
        with self._lock:
            if self._owner != os.getpid() or self._process is None or self._process.poll() is not None:
                self._start()
            assert self._control is not None
            return self._control

    def _start(self) -> None:
        self._stop()
        if not self._hooked:
            os.register_at_fork(after_in_child=self._forget_in_child)
            self._hooked = True
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._stderr = tempfile.TemporaryFile()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", str(SERVER), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        mine.settimeout(10)  # a send blocks only while the server's queue is full: a hung server
        self._control, self._owner = mine, os.getpid()

    def _stop(self) -> None:
        """Forget the current server (closing its control socket ends it)."""
        if self._control is not None and self._owner == os.getpid():
            self._control.close()
        if self._process is not None and self._owner == os.getpid():
            self._process.kill()
            self._process.wait()
        if self._stderr is not None:
            self._stderr.close()
        self._process = self._control = self._stderr = None

    @property
    def pid(self) -> int | None:
        """The running server's pid (None before the first check and after it died)."""
        with self._lock:
            running = self._process is not None and self._process.poll() is None and self._owner == os.getpid()
            return self._process.pid if running else None

    def died(self) -> str:
        """How the server ended, with the tail of its stderr ("" while it runs)."""
        with self._lock:
            process, stderr = self._process, self._stderr
            if process is None or process.poll() is None or stderr is None:
                return ""
            tail = os.pread(stderr.fileno(), 1 << 16, 0).decode("utf-8", errors="replace").strip()[-_STDERR_TAIL:]
            return f"the math check server exited ({process.returncode}): {tail}"

    async def run(self, script: Path, files: tuple, memory_bytes: int, task_status) -> int:
        """Run ``script`` in a child with ``files`` (stdin, stdout, stderr) as its fds 0-2 and ``memory_bytes`` of
        address space: calls ``task_status.started(pid)`` once it runs and returns its exit code; cancelled, it
        has the child killed and waits (shielded, bounded) until the server reports it gone."""
        import trio  # here, not at the top: the server process runs this module and never needs trio (14 MB)

        mine, theirs = socket.socketpair()
        self._live.update((mine, theirs))  # a fork from here on closes its copies of both (`_forget_in_child`)
        with mine:
            try:
                message = _HEADER.pack(memory_bytes) + str(script).encode()
                descriptors = [theirs.fileno(), *(file.fileno() for file in files)]
                for attempt in (1, 2):  # a server that died between checks is started again once
                    control = self._started()
                    try:
                        socket.send_fds(control, [message], descriptors)
                        break
                    except OSError as exc:
                        if attempt == 2:
                            raise ForkServerError(f"the math check server takes no check: {exc}") from exc
                        with self._lock:
                            if self._control is control:  # not one another thread started meanwhile
                                self._stop()
            finally:
                theirs.close()
            connection = trio.socket.from_stdlib_socket(mine)
            pid = await self._code(connection, b"P")
            task_status.started(pid)
            try:
                return await self._code(connection, b"X")
            except trio.Cancelled:
                with trio.CancelScope(shield=True), trio.move_on_after(_KILL_WAIT_S):
                    try:
                        await connection.send(b"k")
                        await self._code(connection, b"X")
                    except OSError:  # the server is gone, and its children with it (their death signal)
                        pass
                raise

    async def _code(self, connection, kind: bytes) -> int:
        data = b""
        while len(data) < _CODE.size:
            chunk = await connection.recv(_CODE.size - len(data))
            if not chunk:
                raise ForkServerError(self.died() or "the math check server closed the check's connection")
            data += chunk
        got, value = _CODE.unpack(data)
        if got != kind:
            raise ForkServerError(f"the math check server wrote {got!r} where {kind!r} was due")
        return value


# The server (run as a script). Nothing below runs in the grader's process.


def serve(control: socket.socket) -> None:
    """Fork one child per check received on ``control`` until it closes (see the module docstring)."""
    import ctypes
    import gc

    from tasks.math import check

    global _LIBC
    _LIBC = ctypes.CDLL(None, use_errno=True)
    check.judge_read(check.read_gold("\\frac{1}{2}")[0], "0.5", 512, 8)  # load math-verify's lazy imports once
    gc.collect()
    gc.freeze()  # the children inherit these objects untouched: no copy-on-write of the pages holding them
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    children: dict[int, _Child] = {}
    while True:
        for key, _ in selector.select():
            if key.data is None:
                if not _take(control, check, selector, children):
                    for child in children.values():
                        child.kill()
                    return
            else:
                try:
                    key.data(selector, children)
                except OSError as exc:  # one check's bookkeeping failed: the others go on
                    print(f"math check server: {exc!r}", file=sys.stderr, flush=True)


class _Child:
    """A forked check: its pid, the pidfd it is killed and waited through, and the grader's connection."""

    def __init__(self, pid: int, connection: socket.socket | None) -> None:
        self.pid, self.pidfd, self.connection = pid, os.pidfd_open(pid), connection

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def ended(self, selector: selectors.BaseSelector, children: dict) -> None:
        """The pidfd is readable: reap the child and tell the grader its exit code."""
        selector.unregister(self.pidfd)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.pidfd)
        del children[self.pid]
        if self.connection is not None:
            try:
                self.connection.sendall(_CODE.pack(b"X", os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            self._forget(selector)

    def asked(self, selector: selectors.BaseSelector, children: dict) -> None:
        """The grader wrote (a kill) or closed the connection: kill the child; its end is reported as usual."""
        self.kill()
        try:
            closed = not self.connection.recv(16)
        except OSError:
            closed = True
        if closed:
            self._forget(selector)
        else:  # a kill asked for: the connection stays for the exit code, no longer watched
            selector.unregister(self.connection)

    def _forget(self, selector: selectors.BaseSelector) -> None:
        try:
            selector.unregister(self.connection)
        except KeyError:
            pass
        self.connection.close()
        self.connection = None


def _take(control: socket.socket, check, selector: selectors.BaseSelector, children: dict) -> bool:
    """Receive one check and fork its child; False once the control socket closed (the grader's process ended).
    A check the server cannot take (a malformed message, a fork or a pidfd the host refuses) is dropped alone: its
    descriptors are closed, so its grader sees the connection end (the host's failure), and the other checks go
    on."""
    try:
        message, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)
    except OSError as exc:
        if isinstance(exc, ConnectionError) or exc.errno in (errno.EBADF, errno.ENOTCONN, errno.ENOTSOCK):
            return False
        print(f"math check server: {exc!r}", file=sys.stderr, flush=True)
        return True
    if not message and not fds:
        return False
    if len(fds) != 4 or len(message) <= _HEADER.size:
        _close(fds)
        return True
    (memory_bytes,) = _HEADER.unpack_from(message)
    script = message[_HEADER.size :].decode("utf-8", errors="replace")
    server = os.getpid()
    for stream in (sys.stdout, sys.stderr):  # nothing of the server's buffers may reach a child's files
        stream.flush()
    try:
        connection = socket.socket(fileno=fds[0])
    except OSError as exc:
        print(f"math check server: a check without its connection: {exc!r}", file=sys.stderr, flush=True)
        _close(fds)
        return True
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"math check server: fork: {exc!r}", file=sys.stderr, flush=True)
        _close(fds[1:])
        connection.close()
        return True
    if pid == 0:
        _child(check, script, fds[1:], memory_bytes, server)
    _close(fds[1:])
    try:
        child = _Child(pid, connection)
    except OSError as exc:  # no pidfd (EMFILE): the child cannot be watched, so it does not run
        print(f"math check server: pidfd: {exc!r}", file=sys.stderr, flush=True)
        os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still this child's
        os.waitpid(pid, 0)
        connection.close()
        return True
    children[pid] = child
    selector.register(child.pidfd, selectors.EVENT_READ, child.ended)
    try:
        connection.sendall(_CODE.pack(b"P", pid))
        selector.register(connection, selectors.EVENT_READ, child.asked)
    except OSError:  # the grader gave up before the child ran
        child.kill()
        connection.close()
        child.connection = None
    return True


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _child(check, script: str, files: list[int], memory_bytes: int, server: int) -> None:
    """In the forked child: take the files, drop every other descriptor, bound memory, run the check, exit.
    Everything it calls was imported by the server (an import here could fail on the host's limits and run the
    server's loop in the child)."""
    code = 1
    try:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the server's death kills it
        if os.getppid() != server:  # the server died before the request above took effect
            os._exit(code)
        for target, fd in enumerate(files):
            os.dup2(fd, target)
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        sys.argv = [script]
        if Path(script).resolve() == Path(check.__file__).resolve():
            check.main()
        else:
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever the check raised is printed, as an interpreter would
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - out of memory even for the traceback: the exit code says enough
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a stream the check closed or broke
                pass
        os._exit(code)


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a script: the repository root is not on sys.path
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    serve(socket.socket(fileno=int(sys.argv[1])))
