"""Reset: the container made as it was when the runner started, or a reply saying it is not (the host then
destroys it instead of handing it out again: `sandbox.pool`'s recycling).

What a call leaves behind lives in processes (swept), System V IPC objects (removed) and writable filesystems:
the workspace, /tmp, /dev/shm and the POSIX message queues of /dev/mqueue, emptied here as the sandbox user (its
files are its own; the runner has no CAP_DAC_OVERRIDE). Then the result is checked, not the list that was emptied:
no process but init, the runner and its fork server (alive if it was at start); no System V object; no OOM kill
since the start (the engine's OOMKilled mark, which blames a lost runner, lasts the container's life); and every
writable mount of the container (read from /proc/self/mountinfo, wherever it is) lists exactly what it listed at
the runner's start: each entry's path, type, mode, owner, extended attributes, and a file's size and mtime. A
directory it may not read, a tree too deep to walk and more than MAX_ENTRIES entries all read as a difference.
"""

import os
import re
import stat

from sandbox.runner import forkserver
from sandbox.runner.cgroup import counters
from sandbox.runner.privileges import SANDBOX_UID, SandboxIdentity
from sandbox.runner.sweep import live_processes, reap, remove_ipc, sweep

EMPTIED = ("/dev/shm", "/dev/mqueue")  # besides the file paths the host gives the runner (workspace, /tmp)
KERNEL_TYPES = {"proc", "sysfs", "cgroup", "cgroup2"}
KERNEL_ROOTS = ("/proc", "/sys")
MAX_ENTRIES = 20000
MAX_DEPTH = 64
BOOT = {}
"""The runner's start: {"tree": snapshot(), "fork_server": bool}, set by `remember_boot`."""


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


def snapshot():
    """Every entry of every writable mount, as a set of rows; mount points below one another are walked once
    each (a walk does not cross into another filesystem)."""
    rows = set()
    for point in writable_mounts():
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


def remember_boot():
    """Record the container's start (call once the fork server is up and before the first request)."""
    BOOT["tree"] = snapshot()
    BOOT["fork_server"] = forkserver.SERVER.alive
    BOOT["oom_kill"] = counters([])["oom_kill"]
    BOOT["modes"] = {}
    for point in writable_mounts():
        try:
            st = os.lstat(point)
        except OSError:
            continue
        if st.st_uid == SANDBOX_UID:  # the sandbox user may chmod its own mount roots: the reset puts them back
            BOOT["modes"][point] = stat.S_IMODE(st.st_mode)


def _open_up(root):
    """Give the owner full access to every directory under ``root`` (a tree chmod 000 cannot be emptied)."""
    for directory, names, _ in os.walk(root):
        for name in names:
            try:
                os.chmod(os.path.join(directory, name), 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass


def _empty(root):
    """Remove what ``root`` holds, as far as the sandbox user can (the check after says whether it did)."""
    try:
        os.chmod(root, 0o700 | stat.S_IMODE(os.lstat(root).st_mode))
    except OSError:
        pass
    _open_up(root)
    for directory, names, files in os.walk(root, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
        for name in names:
            path = os.path.join(directory, name)
            try:
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    os.rmdir(path)
            except OSError:
                pass


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
    """Empty what the sandbox user could write and check the container is as it started: ``{clean, detail}``."""
    if "tree" not in BOOT:
        return {"clean": False, "detail": "the runner recorded no start to reset to"}
    survivors = sweep()
    reap()
    remove_ipc()
    with SandboxIdentity():
        for root in list(fs_paths) + list(EMPTIED):
            if os.path.isdir(root):
                _empty(root)
        for point, mode in BOOT["modes"].items():
            try:
                os.chmod(point, mode)
            except OSError:
                pass
    problems = []
    if survivors or live_processes():
        problems.append("processes survived the sweep: %s" % live_processes()[:8])
    # The engine marks a container OOMKilled for any OOM kill in its life, and a lost runner's blame reads that
    # mark (sandbox.workspace.classify_loss): a container that saw one would blame the next task for it.
    if counters([])["oom_kill"] != BOOT["oom_kill"]:
        problems.append("an OOM kill happened in the container")
    if BOOT["fork_server"] and not forkserver.SERVER.alive:
        problems.append("the fork server is gone")
    try:
        with open("/proc/sysvipc/shm") as a, open("/proc/sysvipc/msg") as b, open("/proc/sysvipc/sem") as c:
            left = sum(len(handle.read().splitlines()[1:]) for handle in (a, b, c))
    except OSError:
        left = 0
    if left:
        problems.append("%d System V IPC objects left" % left)
    difference = _difference(snapshot())
    if difference:
        problems.append(difference)
    return {"clean": not problems, "detail": "; ".join(problems)[:2000]}
