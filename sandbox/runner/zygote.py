"""The fork server's program: ``python3 -I -c <this file's text> FD``, started by the runner (as root, before it
empties its capability bounding set) once per container. Never imported: it runs as its own interpreter.

Why it exists: a grader's test is ``python3 -I`` running a short program, and an interpreter's start-up
(~8 ms) is most of such a test. This interpreter starts once, imports nothing of the candidate's, never runs
any of the candidate's code, and forks one child per command; the child takes the command's identity and
limits exactly as the runner's spawn does (process group, OOM score, no groups, uid/gid 1000, RLIMIT_AS and
RLIMIT_CPU, the command's stdin/stdout/stderr on fds 0-2, nothing else open) and then runs the program in
itself as a fresh ``python3 -I`` would: its own ``__main__``, ``sys.argv``, the modules this server imported
for itself forgotten, its streams' buffers never used. Anything else (a directory or archive as the script)
is handed to a real ``python3 -I`` by ``exec`` from the child, already in its identity and limits.

Wire, on the ``SOCK_SEQPACKET`` socket ``FD`` shared with the runner only: first ``{"ready": True}`` once the
server's start-up (its probe of a fresh interpreter included) is over; then one request at a time, each a
`marshal` dict: ``{"argv": [...after "python3 -I"], "cwd": str, "env": {...}, "memory": int | None, "cpu":
float | None}`` with the command's three descriptors (SCM_RIGHTS); the replies ``{"pid": int}`` (or ``{"error":
str}`` when the fork failed); then the runner's ``reap`` once it has seen the child exit, answered, after the
child is reaped, with ``{"status": int, "utime": float, "stime": float, "maxrss": int}``. The runner's end
closing ends this program.

Written for every ``python3`` an image may hold (no f-strings, standard library only).
"""

import sys

BASELINE = set(sys.modules)  # what a fresh `python3 -I` holds: the child forgets every module imported below
MAIN = {k: v for k, v in vars(sys.modules["__main__"]).items() if k.startswith("__")}


def vm_bytes():
    """This process's address space (VmSize), or 0 when it cannot be read."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


TAG = "# gym-fork-server"  # sandbox.wire.FORK_SERVER_TAG: the probe below is the server's, for a process listing
VM_PROBE = (
    TAG
    + "\n"
    + ("import sys\nfor line in open('/proc/self/status'):\n    if line.startswith('VmSize:'): sys.stdout.write(line)")
)
FRESH_VM = []  # a fresh interpreter's address space when its program starts, measured once at the server's start


def fresh_vm():
    """VmSize of a real fresh ``python3 -I`` running a small program, in bytes (0 when it cannot be measured)."""
    if not FRESH_VM:
        FRESH_VM.append(0)
        try:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(write, 1)
                    os.execv(sys.executable, ["python3", "-I", "-c", VM_PROBE])
                finally:
                    os._exit(127)
            os.close(write)
            with os.fdopen(read, "rb") as handle:
                line = handle.read(200)
            os.waitpid(pid, 0)
            FRESH_VM[0] = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
    return FRESH_VM[0]


import _socket  # noqa: E402  (after BASELINE on purpose)
import ctypes  # noqa: E402
import gc  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402

SANDBOX_UID = 1000
SANDBOX_GID = 1000
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
LAST_CAP = 40
MAX_REQUEST = 1 << 20
FD_SLOTS = 3


def drop_bounding_set(libc):
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


def receive(sock):
    """The next request and its descriptors; None when the runner's end is closed."""
    space = _socket.CMSG_SPACE(FD_SLOTS * 4)
    data, ancillary, _, _ = sock.recvmsg(MAX_REQUEST, space)
    if not data:
        return None
    fds = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds += [int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True) for i in range(0, usable, 4)]
    return marshal.loads(data), fds


def serve(sock, libc):
    """Fork a child per request; return only in a child, with what it must run."""
    while True:
        got = receive(sock)
        if got is None:
            os._exit(0)
        request, fds = got
        fresh = fresh_vm() if request["memory"] else 0
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(marshal.dumps({"error": str(exc)}))
            continue
        if pid == 0:
            return become(request, fds, sock, libc, fresh)
        for fd in fds:
            os.close(fd)
        sock.send(marshal.dumps({"pid": pid}))
        # The child stays unreaped (a zombie once it exits) until the runner asks: until then its pid is neither
        # gone for the runner's pidfd nor free for another process the runner's signals could reach.
        if not sock.recv(16):
            os._exit(0)
        _, status, usage = os.wait4(pid, 0)
        sock.send(
            marshal.dumps(
                {"status": status, "utime": usage.ru_utime, "stime": usage.ru_stime, "maxrss": usage.ru_maxrss}
            )
        )


def become(request, fds, sock, libc, fresh):
    """In the child: the command's identity, limits and descriptors, as the runner's spawn sets them."""
    try:
        stdin, stdout, stderr = fds
        os.setpgid(0, 0)
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
        os.chdir(request["cwd"])
        os.setgroups([])
        os.setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after the exec of the runner's spawn
        if request["memory"]:  # the same room as a fresh interpreter's: what this server mapped beyond one is added
            memory = request["memory"] + max(0, vm_bytes() - fresh) if fresh else request["memory"]
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if request["cpu"]:
            seconds = int(request["cpu"]) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        sock.close()
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.environ.clear()
        os.environ.update(request["env"])
    except BaseException:
        os._exit(127)
    argv = request["argv"]
    if argv[0] == "-c":
        return "-c", argv[1], ["-c", *argv[2:]], argv
    try:
        with open(argv[0], "rb") as handle:
            source = handle.read()
    except IsADirectoryError:
        os.execv(sys.executable, ["python3", "-I", *argv])
    except OSError as exc:
        os.write(
            2, ("%s: can't open file %r: [Errno %d] %s\n" % ("python3", argv[0], exc.errno, exc.strerror)).encode()
        )
        os._exit(2)
    if source[:4] == b"PK\x03\x04":  # a zip archive: Python's own runner for it
        os.execv(sys.executable, ["python3", "-I", *argv])
    return argv[0], source, argv, argv


def run(job):
    """Run the command's program as the ``__main__`` of a fresh interpreter."""
    filename, source, argv, given = job
    for name in set(sys.modules) - BASELINE:
        del sys.modules[name]
    main = type(sys)("__main__")
    vars(main).update(MAIN)
    vars(main)["__doc__"] = None
    if filename != "-c":
        vars(main).update(__file__=filename, __cached__=None)
    sys.modules["__main__"] = main
    sys.argv = list(argv)
    sys.orig_argv = ["python3", "-I", *given]
    try:
        code = compile(source, "<string>" if filename == "-c" else filename, "exec")
        exec(code, vars(main))
    except SystemExit:
        raise
    except BaseException as exc:  # printed as the interpreter prints it, without this file's frame
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        if isinstance(exc, KeyboardInterrupt):  # the interpreter leaves by SIGINT then
            sys.stdout.flush()
            sys.stderr.flush()
            import _signal

            _signal.signal(2, 0)
            os.kill(os.getpid(), 2)
        raise SystemExit(1) from None


def start():
    # Measured now, at the container's start: measured at the first request it ran inside that command's time (a
    # host that starves the container turned it into seconds of the command's deadline); before the bounding set
    # is emptied, so a server that shows an empty one (the kill-test's posture waits for it) has no probe left
    fresh_vm()
    libc = ctypes.CDLL(None, use_errno=True)
    os.setgroups([])
    drop_bounding_set(libc)  # before the first request: every child is forked without a capability to regain
    sock = _socket.socket(fileno=int(sys.argv[1]))
    gc.freeze()  # the server's objects out of every collection a child makes (its finalisation's included)
    sock.send(marshal.dumps({"ready": True}))  # its probe is over: no process of the server's but itself is left
    return serve(sock, libc)


if __name__ == "__main__":
    run(start())
