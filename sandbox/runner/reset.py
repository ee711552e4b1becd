"""Reset: the container made as it was when the runner started, or a reply saying it is not (the host then
destroys it instead of handing it out again: `sandbox.pool`'s recycling, by default only for the grader and only
between tasks of other problems and inputs, ``pool.disjoint_uses``).

What a call leaves behind lives in processes (swept), System V IPC objects (removed) and writable filesystems:
the workspace, /tmp, /dev/shm and the POSIX message queues of /dev/mqueue, emptied here as the sandbox user (its
files are its own; the runner has no CAP_DAC_OVERRIDE); the mount roots get their modes and times back. Then the
result is checked, not the list that was emptied: no process but init, the runner and its fork server (alive if it
was at start), not even a zombie; no System V object, and none made since the start (the ids the namespace hands
out next); no OOM kill since the start (the engine's OOMKilled mark, which blames a lost runner, lasts the
container's life); the network namespace's and the cgroup's counters a candidate steers (packets, sockets, limits
hit) as they were; the mount roots' modes, times and inode flags as they were; and every writable mount of the
container (read from /proc/self/mountinfo, wherever it is) listing exactly what it listed at the runner's start:
each entry's path, type, mode, owner, extended attributes, and a file's size and mtime. A directory it may not
read, a tree too deep to walk, more than MAX_ENTRIES entries, and a reset that raises all read as a difference.

What it cannot put back, and why recycling is only between tasks of other problems and inputs by default: counters
only a new container resets, which every task moves and a later one can read (the pid namespace's last pid, the
tmpfs inode numbers, the cgroup's CPU time and memory high-water mark, the mount roots' ctime): a candidate can pass
a few dozen bits through them to the next task of the container (docs/sandbox.md, "Recycling").
"""

import array
import fcntl
import os
import re
import stat

from sandbox.runner import forkserver
from sandbox.runner.cgroup import counters
from sandbox.runner.privileges import SANDBOX_UID, SandboxIdentity
from sandbox.runner.sweep import IPC_RMID, clean_up, libc, other_processes, stat_fields, zombies_left

EMPTIED = ("/dev/shm", "/dev/mqueue")  # besides the file paths the host gives the runner (workspace, /tmp)
KERNEL_TYPES = {"proc", "sysfs", "cgroup", "cgroup2"}
KERNEL_ROOTS = ("/proc", "/sys")
MAX_ENTRIES = 20000
MAX_DEPTH = 64
MAX_REMOVALS = 200000
FS_IOC_GETFLAGS = 0x80086601
BOOT = {}
"""The runner's start: {"tree": snapshot(points), "fork_server": bool}, set by `remember_boot`."""


def _unescape(field):
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def writable_mounts():
    """Mount points of every filesystem mounted read-write, but the kernel's own (proc, sysfs, cgroups)."""
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            try:
                fstype = fields[fields.index("-", 6) + 1]
            except (ValueError, IndexError):
                continue
            point = _unescape(fields[4])
            if "rw" not in fields[5].split(",") or fstype in KERNEL_TYPES:
                continue
            if any(point == root or point.startswith(root + "/") for root in KERNEL_ROOTS):
                continue
            points.append(point)
    return sorted(set(points))


def _xattrs(path):
    try:
        return tuple(sorted(os.listxattr(path, follow_symlinks=False)))
    except OSError as exc:
        return ("?%d" % exc.errno,)


def _entry(path, st):
    kind = stat.S_IFMT(st.st_mode)
    row = (path, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, _xattrs(path))
    if kind in (stat.S_IFREG, stat.S_IFLNK):  # a directory's listing is compared, not its mtime (entries come and go)
        return row + (st.st_size, st.st_mtime_ns)
    if kind in (stat.S_IFCHR, stat.S_IFBLK):  # a device's times move as it is used: which device it is counts
        return row + (st.st_rdev,)
    return row


def _row(path, rows):
    """Add ``path``'s row to ``rows``; its stat, or None (an unreadable row added instead)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        rows.add((path, "unreadable", exc.errno))
        return None
    rows.add(_entry(path, st))
    return st


def snapshot(points):
    """Every entry of the writable mounts ``points``, as a set of rows; mount points below one another are walked
    once each (a walk does not cross into another filesystem)."""
    rows = set()
    for point in points:
        top = _row(point, rows)
        if top is None:
            continue
        stack = [(point, 0)]
        while stack:
            directory, depth = stack.pop()
            if depth >= MAX_DEPTH:
                rows.add((directory, "too deep"))
                continue
            try:
                names = os.listdir(directory)
            except OSError as exc:
                rows.add((directory, "unreadable", exc.errno))
                continue
            for name in names:
                path = os.path.join(directory, name)
                st = _row(path, rows)
                if st is None:
                    continue
                if len(rows) > MAX_ENTRIES:
                    rows.add(("", "too many entries"))
                    return frozenset(rows)
                if stat.S_ISDIR(st.st_mode) and st.st_dev == top.st_dev:
                    stack.append((path, depth + 1))
    return frozenset(rows)


def _flags(path):
    """A directory's inode flags (``FS_IOC_GETFLAGS``: its owner may set no-dump, no-atime, ...), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        buffer = array.array("l", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buffer, True)
        return buffer[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def _roots(points):
    """Each writable mount root of ``points``: ``{path: (owner, mode, atime_ns, mtime_ns, flags)}``."""
    roots = {}
    for point in points:
        try:
            st = os.lstat(point)
        except OSError:
            continue
        roots[point] = (st.st_uid, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns, _flags(point))
    return roots


KERNEL_COUNTERS = (
    "/proc/net/snmp",
    "/proc/net/snmp6",
    "/proc/net/netstat",
    "/proc/net/dev",
    "/proc/net/udp",
    "/proc/net/udp6",
    "/proc/net/unix",
    "/sys/fs/cgroup/memory/memory.failcnt",
    "/sys/fs/cgroup/pids/pids.events",
    "/sys/fs/cgroup/memory.events",
    "/sys/fs/cgroup/pids.events",
)
"""Counters of the container's network namespace and cgroup that outlive every process, that a candidate steers
(packets sent, sockets left, limits hit) and a later one could read: unchanged since the start, or the
container is not recycled."""

TCP_SOCKETS = (("/proc/net/sockstat", "TCP:", ("inuse", "tw")), ("/proc/net/sockstat6", "TCP6:", ("inuse",)))
"""Where the namespace's TCP sockets are counted: every socket in its hash tables (listening, connected, or
closed and still closing) is in ``inuse``, every one in TIME_WAIT (IPv4 and IPv6 alike) in ``tw``; these two
fields are the namespace's own (on the kernels tested, 6.x: a host-wide count would only refuse resets, never let
one through), the line's others (orphan, alloc, mem) are the host's. Neither counts a half-open connection's
request socket, which the tables list and which can outlive its listener until its timer fires: it exists only
after segments, which ``/proc/net/snmp`` counts. Read instead of the socket tables /proc/net/tcp and tcp6: those
list the same sockets but cost ~4 ms each to read, the kernel walking the host's whole connection hash table
(262,144 buckets on a 23.5 GiB host) for a namespace that holds none."""


def tcp_fields(text, label, names):
    """The fields ``names`` of the line of ``text`` (a sockstat file) that starts with ``label``, as a tuple of
    ``(name, value)``; None for a file without that line or those fields."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == label:
            pairs = dict(zip(words[1::2], words[2::2]))
            if not all(name in pairs for name in names):
                return None
            return tuple((name, pairs[name]) for name in names)
    return None


def _read(path):
    """A file's text, or None where it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _kernel_counters():
    texts = {path: _read(path) for path in KERNEL_COUNTERS}
    for path, label, names in TCP_SOCKETS:
        text = _read(path)
        texts[path] = None if text is None else tcp_fields(text, label, names)
    return texts


def _ipc_probe():
    """The ids the namespace hands out next for a System V message queue, segment and semaphore set (each made
    and removed at once): they move with every object made, so a candidate that made any shows in them."""
    c = libc()
    made = []
    for create, remove in (
        (lambda: c.msgget(0, 0o1600), lambda ident: c.msgctl(ident, IPC_RMID, None)),
        (lambda: c.shmget(0, 4096, 0o1600), lambda ident: c.shmctl(ident, IPC_RMID, None)),
        (lambda: c.semget(0, 1, 0o1600), lambda ident: c.semctl(ident, 0, IPC_RMID)),
    ):
        ident = create()
        made.append(ident)
        if ident >= 0:
            remove(ident)
    return tuple(made)


def remember_boot():
    """Record the container's start (call once the fork server is up and before the first request)."""
    points = writable_mounts()
    BOOT["tree"] = snapshot(points)
    BOOT["fork_server"] = forkserver.SERVER.alive
    BOOT["oom_kill"] = counters([])["oom_kill"]
    BOOT["roots"] = _roots(points)
    BOOT["kernel"] = _kernel_counters()
    first, second = _ipc_probe(), _ipc_probe()
    BOOT["ipc_step"] = tuple(b - a for a, b in zip(first, second))  # what one probe moves the ids by
    BOOT["ipc_last"] = second


def _put_back_roots():
    """The mount roots' modes and times as at the start, each set by its owner (the sandbox user's own roots
    under its identity): an owner may set any time, so a candidate could leave a number in them."""
    for point, (owner, mode, atime, mtime, _) in BOOT["roots"].items():
        try:
            if owner == SANDBOX_UID:
                with SandboxIdentity():
                    os.chmod(point, mode)
                    os.utime(point, ns=(atime, mtime), follow_symlinks=False)
            elif owner == os.geteuid():
                os.utime(point, ns=(atime, mtime), follow_symlinks=False)
        except OSError:
            pass


def _empty(root):
    """Remove what ``root`` holds, as far as the sandbox user can (the check after says whether it did). Iterative
    (a tree as deep as its path bound allows is no recursion), and bounded: past MAX_REMOVALS entries it stops, and
    what is left fails the check."""
    try:
        os.chmod(root, 0o700 | stat.S_IMODE(os.lstat(root).st_mode))
    except OSError:
        pass
    stack, order, budget = [root], [], MAX_REMOVALS
    while stack and budget > 0:
        directory = stack.pop()
        order.append(directory)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            budget -= 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.path, 0o700)  # a real directory (no symlink is followed): opened for its owner
                    stack.append(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass
    for directory in reversed(order[1:]):  # every directory after everything under it
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _described(pids):
    """``pid (state, parent pid)`` of each of ``pids``, as /proc reads them (gone: ``pid (gone)``)."""
    described = []
    for pid in pids:
        fields = stat_fields("/proc/%d/stat" % pid)
        if fields is None or len(fields) < 2:
            described.append("%d (gone)" % pid)
        else:
            described.append("%d (%s, parent %s)" % (pid, fields[0].decode("ascii", "replace"), int(fields[1])))
    return ", ".join(described)


def _difference(now):
    before = BOOT.get("tree", frozenset())
    added, gone = sorted(now - before, key=repr), sorted(before - now, key=repr)
    if not added and not gone:
        return ""
    return "the writable filesystems differ from the start: %d entries added or changed (%.300s), %d gone (%.300s)" % (
        len(added),
        ", ".join(str(row[0]) for row in added[:8]),
        len(gone),
        ", ".join(str(row[0]) for row in gone[:8]),
    )


def op_reset(body, fs_paths, emit):
    """Empty what the sandbox user could write and check the container is as it started: ``{clean, detail}``.
    Never raises: whatever goes wrong is a reset that is not clean (the container is destroyed)."""
    try:
        problems = _reset(fs_paths)
    except Exception as exc:  # RecursionError, MemoryError, OSError from what the candidate left
        problems = ["the reset failed: %s: %s" % (type(exc).__name__, exc)]
    return {"clean": not problems, "detail": "; ".join(problems)[:2000]}


def _reset(fs_paths):
    if "tree" not in BOOT:
        return ["the runner recorded no start to reset to"]
    survivors = clean_up()
    with SandboxIdentity():
        for root in list(fs_paths) + list(EMPTIED):
            if os.path.isdir(root):
                _empty(root)
    _put_back_roots()
    problems = []
    left = other_processes() if survivors else zombies_left()
    if left:  # a zombie too: one no process reaps holds a pid of the budget
        problems.append("processes left after the sweep: %s" % _described(left[:8]))
    # The engine marks a container OOMKilled for any OOM kill in its life, and a lost runner's blame reads that
    # mark (sandbox.workspace.classify_loss): a container that saw one would blame the next task for it.
    if counters([])["oom_kill"] != BOOT["oom_kill"]:
        problems.append("an OOM kill happened in the container")
    if BOOT["fork_server"] and not forkserver.SERVER.alive:
        problems.append("the fork server is gone")
    changed = [path for path, text in _kernel_counters().items() if text != BOOT["kernel"][path]]
    if changed:
        problems.append("kernel counters a later task could read changed: %s" % ", ".join(changed))
    try:
        with open("/proc/sysvipc/shm") as a, open("/proc/sysvipc/msg") as b, open("/proc/sysvipc/sem") as c:
            left = sum(len(handle.read().splitlines()[1:]) for handle in (a, b, c))
    except OSError:
        left = 0
    if left:
        problems.append("%d System V IPC objects left" % left)
    probe = _ipc_probe()
    expected = tuple(last + step for last, step in zip(BOOT["ipc_last"], BOOT["ipc_step"]))
    BOOT["ipc_last"] = probe
    if probe != expected:
        problems.append("System V objects were made since the start (ids %s, expected %s)" % (probe, expected))
    points = writable_mounts()  # read once: the roots and the walk see the same mounts
    roots = _roots(points)
    moved = [point for point, row in BOOT["roots"].items() if roots.get(point) != row]
    if moved:
        problems.append("mount roots differ from the start (mode, times or flags): %s" % ", ".join(moved))
    difference = _difference(snapshot(points))
    if difference:
        problems.append(difference)
    return problems
