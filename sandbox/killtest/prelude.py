"""Prepended to every Python attack program: the report line, raw syscalls, process lookup.

This file is source text shipped into the workspace (stdlib only, Python 3.9+);
the host never imports it. Syscall numbers are x86_64: on another architecture
``syscall`` reports ``error`` rather than calling the wrong number.
"""

import ctypes
import errno
import json
import os
import platform
import sys

LIBC = ctypes.CDLL(None, use_errno=True)
NR = {
    "ptrace": 101,
    "syslog": 103,
    "mknod": 133,
    "chroot": 161,
    "mount": 165,
    "umount2": 166,
    "clock_settime": 227,
    "add_key": 248,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
}


def report(observed, evidence="", **facts):
    """The one line the host reads: what happened, in one token, and why."""
    facts.update(observed=observed, evidence=evidence)
    sys.stdout.write("\nKILLTEST " + json.dumps(facts, sort_keys=True) + "\n")
    sys.stdout.flush()


def errname(number):
    return errno.errorcode.get(number, "E%d" % number)


def syscall(name, *args):
    """Call ``name`` raw; returns "ok" or the errno name."""
    if platform.machine() != "x86_64":
        return "error: x86_64 syscall numbers on %s" % platform.machine()
    ctypes.set_errno(0)
    argv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    rc = LIBC.syscall(ctypes.c_long(NR[name]), *argv)
    return "ok" if rc >= 0 else errname(ctypes.get_errno())


def attempt(fn, *args, **kwargs):
    """Run ``fn``; returns "ok" or the errno name of the OSError it raised."""
    try:
        fn(*args, **kwargs)
    except OSError as exc:
        return errname(exc.errno) if exc.errno else type(exc).__name__
    return "ok"


def denied(results):
    """Report ``denied`` when every attempt failed, else which one got through."""
    through = [label for label, outcome in results.items() if outcome == "ok"]
    evidence = ", ".join("%s=%s" % item for item in results.items())
    report("succeeded: " + ", ".join(through) if through else "denied", evidence)


def in_child(fn, *args):
    """Run ``fn(*args)`` in a forked child (so it cannot change this process); returns its string result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            outcome = str(fn(*args))
        except BaseException as exc:  # the child must always exit here
            outcome = "error: %r" % exc
        os.write(write_end, outcome.encode()[:512])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        outcome = handle.read().decode()
    os.waitpid(pid, 0)
    return outcome or "error: child died"


def pid_of(marker):
    """Pid of the first process, other than init and this one, whose command line contains ``marker`` (bytes).

    Init (tini) is skipped: its own command line names the runner it started.
    """
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, os.getpid()):
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    if marker in handle.read():
                        return int(entry)
            except OSError:
                continue
    return None


def sibling():
    """A forked child that sleeps (same uid): the target of same-user attacks. Returns its pid."""
    pid = os.fork()
    if pid == 0:
        import time

        time.sleep(30)
        os._exit(0)
    return pid


RUNNER = b"/opt/gym/sandbox/runner"  # in the runner's command line (sandbox.docker_engine.RUNNER_COMMAND)
FORK_SERVER = b"# gym-fork-server"  # the first line of the fork server's program (sandbox.wire.FORK_SERVER_TAG)
