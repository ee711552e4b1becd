"""After every call nothing of the sandbox user outlives it (`clean_up`): its processes are killed (`sweep`),
the zombies that are the runner's own children reaped (`reap`), its System V IPC objects removed (`remove_ipc`).

Every process in the container but init, the runner and the runner's fork server (`KEEP`) belongs to the
sandbox user.
"""

import ctypes
import os
import signal
import time

from sandbox.runner.privileges import SandboxIdentity

IPC_RMID = 0
SWEEP_DEADLINE_S = 3.0
SPARING_S = 1.0
ORPHAN_WAIT_S = 0.5
KEEP = set()
"""Pids of the runner's own helpers (its fork server, root): a sweep spares them while it can."""


def stat_fields(path):
    """The fields of a ``/proc/.../stat`` file after the command name (state first, then the parent's pid), or
    None when it is gone."""
    try:
        with open(path, "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split() or None
    except (OSError, IndexError):
        return None


def _state(path):
    fields = stat_fields(path)
    return fields[0] if fields else None


def _alive(pid):
    """Whether any thread of ``pid`` still runs: a process whose main thread alone exited shows ``Z`` while its
    other threads go on."""
    state = _state("/proc/%d/stat" % pid)
    if state is None:
        return False
    if state not in (b"Z", b"X"):
        return True
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    return any(
        _state("/proc/%d/task/%s/stat" % (pid, tid)) not in (None, b"Z", b"X") for tid in tids if tid != str(pid)
    )


def other_processes():
    """Pids of every process but init, the runner and its helpers, whatever their state."""
    skip = {1, os.getpid()} | KEEP
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) not in skip]


def live_processes():
    """Pids of processes other than init, the runner and its helpers with a thread that has not exited."""
    return [pid for pid in other_processes() if _alive(pid)]


def zombies_left(wait_s=ORPHAN_WAIT_S):
    """Pids other than init, the runner and its helpers once the zombies the sweep made had ``wait_s`` to be reaped.

    A killed process whose parent was killed first is reparented to init (docker-init, pid 1), which reaps it in
    its own time: on a busy host it is still a zombie just after the sweep, through no doing of the candidate.
    Only zombies are waited for (a live process is returned at once), and only for ``wait_s``: one still there
    then is left behind (it holds a pid of the budget)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = other_processes()
        if not left or any(_alive(pid) for pid in left) or time.monotonic() > deadline:
            return left
        time.sleep(0.002)


def sweep():
    """Kill every process except init and the runner (all belong to the sandbox user).

    kill(-1) skips init and the caller; repeating it outpaces a fork bomb because
    a killed process forks no more. While the runner has helpers to spare (`KEEP`), each
    process is killed by its pid instead, round after round; a tree still alive after
    SPARING_S is killed with kill(-1), helpers and all (they are forgotten: the runner
    then spawns without them). Returns the number that survived (0 expected).
    """
    started = time.monotonic()
    deadline = started + SWEEP_DEADLINE_S
    while True:
        if KEEP and time.monotonic() - started > SPARING_S:
            KEEP.clear()
        if KEEP:  # every pid, whatever its state reads (a zombie main thread may lead live threads)
            for pid in other_processes():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        else:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = live_processes()
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.002)


_LIBC = []


def libc():
    """The C library, loaded once (this runs after every call: a dlopen each time is wasted work)."""
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def remove_ipc():
    """Remove every System V IPC object: like processes, none outlives the call that made it.

    Message queues and shared memory segments live on without any process and are
    charged to the container's memory: kept across calls they could fill it until
    the runner itself is OOM-killed. All belong to the sandbox user, so its identity
    may remove them (no CAP_IPC_OWNER needed). Returns how many were removed.
    """
    c = libc()
    removers = {
        "shm": lambda ident: c.shmctl(ident, IPC_RMID, None),
        "msg": lambda ident: c.msgctl(ident, IPC_RMID, None),
        "sem": lambda ident: c.semctl(ident, 0, IPC_RMID),
    }
    removed = 0
    with SandboxIdentity():
        for kind, remove in removers.items():
            try:
                with open("/proc/sysvipc/" + kind) as handle:
                    rows = handle.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                removed += remove(int(row.split()[1])) == 0
    return removed


def reap():
    """Reap every exited child: a ``clone(CLONE_PARENT)`` child of a command is ours, and a zombie
    left unreaped holds a pid of the budget until the pids limit is hit. Returns how many were reaped."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1


def clean_up():
    """What follows every call, however it ended: `sweep`, `reap`, `remove_ipc`. Returns the number of
    processes that survived the sweep (0 expected)."""
    survivors = sweep()
    reap()
    remove_ipc()
    return survivors
