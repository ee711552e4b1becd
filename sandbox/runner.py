"""The in-container runner: one persistent supervisor per workspace container.

Stdlib only: this file is copied into the runner image and started by tini as
``python3 -I -S -B /opt/gym/runner.py``. It speaks length-prefixed JSON frames
on stdin/stdout (the container's attached stream) and handles one request at a
time. Field names match ``sandbox.protocol`` exactly.

Privilege model (why the runner is uid 0): the runner must stay out of reach
of the code it supervises. It runs as uid 0 holding only CAP_KILL, CAP_SETUID,
CAP_SETGID and CAP_SETPCAP (granted by the container), drops the whole
capability bounding set at start, and runs every sandboxed command as uid/gid
SANDBOX_UID with every capability set empty and no_new_privs set. A different
uid means sandboxed code cannot signal it, ptrace it (also denied by seccomp),
read its /proc entries or write into its stdout, so nothing a candidate does can
forge what the runner reports. File operations run with the effective uid of
the sandbox user, so a path trick can reach nothing the sandbox user could not
reach with ``cat`` anyway; and after every call every process of the sandbox
user is killed, so no attacker process is alive during a file operation (and
every System V IPC object is removed, so no memory outlives the call either).
"""

import base64
import ctypes
import io
import json
import os
import selectors
import signal
import stat
import struct
import subprocess
import sys
import time

SANDBOX_UID = 1000
SANDBOX_GID = 1000
PROTOCOL_VERSION = 1
HEADER = struct.Struct(">I")
MAX_FRAME = 256 << 20
# Every reply is bounded where it is produced, so none can pass the host's frame bound (a lost stream
# masks the episode: the candidate would hide its own failure): bytes of data an operation returns
# (base64 makes them 4/3 as many), and entries a listing returns (a name of 255 bytes that are all
# control characters is 1,530 bytes of JSON). Past a bound the reply says output_truncated.
MAX_DATA = 96 << 20
MAX_LIST_ENTRIES = 20000
LIST_SCAN_ENTRIES = 1000000  # a listing stops counting here (the total it reports is then a floor)
PR_CAPBSET_DROP = 24
IPC_RMID = 0
LAST_CAP = 40
SWEEP_DEADLINE_S = 3.0
ARCHIVE_MEMORY_FACTOR = 5  # copies of an archive alive at once while it is sent (see op_get_archive)
ARCHIVE_MEMORY_MARGIN = 16 << 20
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


class Denied(Exception):
    """A path or cwd outside the allowlist."""


class HostGone(Exception):
    """The host's end of the stream is closed."""


# ---------------------------------------------------------------- framing


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:  # skip it whole so the stream stays in step, then say why
        while size:
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                return None
            size -= len(chunk)
        raise ValueError("frame exceeds the limit of %d bytes" % MAX_FRAME)
    body = read_exact(fd, size)
    return None if body is None else json.loads(body)


def encode_reply(message):
    # Text from the workspace (a file name that is not UTF-8 comes back from the OS with lone surrogates)
    # is sent as valid UTF-8, lone surrogates as "?": the host refuses JSON that is not.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", errors="replace")


def write_frame(fd, message):
    body = encode_reply(message)
    if len(body) > MAX_FRAME:  # the operations' own bounds keep every reply far below: a last guard
        inner = message.get("body") if isinstance(message.get("body"), dict) else {}
        if "item" in inner:
            inner = {"item": inner["item"], "result": _result(failure="output_truncated", truncated=True)}
        else:
            inner = {"failure": "output_truncated", "truncated": True}
        if "detail" not in inner:
            inner["detail"] = "the reply (%d bytes) passed the frame bound of %d bytes" % (len(body), MAX_FRAME)
        body = encode_reply(dict(message, body=inner))
    os.write(fd, HEADER.pack(len(body)))
    view = memoryview(body)  # no copies of a large body: its memory is the container's budget
    while view:
        view = view[os.write(fd, view) :]


def b64(data):
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------- privileges


def drop_bounding_set():
    """Empty the capability bounding set so no child can ever regain a capability."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


class SandboxIdentity:
    """Run a block with the effective uid/gid of the sandbox user (saved uid stays 0)."""

    def __enter__(self):
        os.setresgid(-1, SANDBOX_GID, -1)
        os.setresuid(-1, SANDBOX_UID, -1)

    def __exit__(self, *exc):
        os.setresuid(-1, 0, -1)
        os.setresgid(-1, 0, -1)


def resolve(path, allow):
    """Resolve ``path`` (symlinks followed) and require it inside one of ``allow``.

    Runs under SandboxIdentity so resolution sees exactly what the sandbox user sees.
    """
    if "\x00" in path:
        raise Denied("path contains a NUL byte")
    if not os.path.isabs(path):
        raise Denied("path must be absolute after normalisation: %r" % path)
    real = os.path.realpath(path)
    for root in allow:
        root_real = os.path.realpath(root)
        if real == root_real or real.startswith(root_real.rstrip("/") + "/"):
            return real
    raise Denied("%r resolves to %r, outside the allowlist %r" % (path, real, list(allow)))


# ---------------------------------------------------------------- counters


def _read_counter(paths, key):
    for path in paths:
        try:
            with open(path) as handle:
                for line in handle:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except OSError:
            continue
    return 0


def memory_headroom():
    """Bytes the container can still use before its OOM killer runs (reclaimable page cache counted free)."""
    v1 = "/sys/fs/cgroup/memory/"
    limit = _read_int((v1 + "memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"))
    usage = _read_int((v1 + "memory.usage_in_bytes", "/sys/fs/cgroup/memory.current"))
    if limit is None or usage is None:
        return None
    stat_files = (v1 + "memory.stat", "/sys/fs/cgroup/memory.stat")
    reclaimable = _read_counter(stat_files, "total_inactive_file") or _read_counter(stat_files, "inactive_file")
    return limit - usage + reclaimable


def _read_int(paths):
    for path in paths:
        try:
            with open(path) as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):  # "max" in cgroup v2: no limit
            continue
    return None


def counters(fs_paths):
    """Kernel counters that classify a call: OOM kills, pids-limit hits, full filesystems."""
    full = []
    for path in fs_paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        if st.f_bavail == 0 or (st.f_files and st.f_favail == 0):
            full.append(path)
    return {
        "oom_kill": _read_counter(
            ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"), "oom_kill"
        ),
        "pids_max": _read_counter(("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"), "max"),
        "full": full,
    }


# ---------------------------------------------------------------- processes


def live_processes():
    """Pids of processes other than init and the runner that are not zombies."""
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in (1, me):
            continue
        try:
            with open("/proc/%d/stat" % pid, "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            pids.append(pid)
    return pids


def sweep():
    """Kill every process except init and the runner (all belong to the sandbox user).

    kill(-1) skips init and the caller; repeating it outpaces a fork bomb because
    a killed process forks no more. Returns the number that survived (0 expected).
    """
    deadline = time.monotonic() + SWEEP_DEADLINE_S
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        left = live_processes()
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.002)


def remove_ipc():
    """Remove every System V IPC object: like processes, none outlives the call that made it.

    Message queues and shared memory segments live on without any process and are
    charged to the container's memory: kept across calls they could fill it until
    the runner itself is OOM-killed. All belong to the sandbox user, so its identity
    may remove them (no CAP_IPC_OWNER needed). Returns how many were removed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    removers = {
        "shm": lambda ident: libc.shmctl(ident, IPC_RMID, None),
        "msg": lambda ident: libc.msgctl(ident, IPC_RMID, None),
        "sem": lambda ident: libc.semctl(ident, 0, IPC_RMID),
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


OOM_SCORE_ADJ = "/proc/self/oom_score_adj"


def _set_oom_score_adj(value):
    """Raising one's own score needs no privilege; lowering it back to 0 (the minimum) neither."""
    try:
        with open(OOM_SCORE_ADJ, "w") as handle:
            handle.write(str(value))
    except OSError:
        pass


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


def _child_setup(memory_limit, cpu_limit):
    def setup():
        import resource

        if memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        if cpu_limit:  # a backstop for the command's own process when the cgroup cannot be read
            seconds = int(cpu_limit) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))

    return setup


# ---------------------------------------------------------------- CPU time of a command's process tree

CPU_POLL_S = 0.02


def container_cpu_s():
    """CPU seconds the container's cgroup has used (v1 cpuacct.usage, v2 cpu.stat usage_usec); None if unreadable."""
    try:
        with open("/sys/fs/cgroup/cpuacct/cpuacct.usage") as handle:
            return int(handle.read()) / 1e9
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu.stat") as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    return None


def own_cpu_s():
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TreeClock:
    """CPU seconds of a command's whole process tree (every fork, reaped or not): the container cgroup's
    usage since the command started, less the runner's own. Commands of a container run one at a time
    and every process of the sandbox user is killed after each, so the rest of the cgroup is the runner."""

    def __init__(self):
        self.cgroup_start = container_cpu_s()
        self.own_start = own_cpu_s()

    def used(self):
        """Seconds so far, or None when the cgroup cannot be read."""
        if self.cgroup_start is None:
            return None
        now = container_cpu_s()
        if now is None:
            return None
        return max(0.0, (now - self.cgroup_start) - (own_cpu_s() - self.own_start))


# ---------------------------------------------------------------- starvation: the host's failure, not the program's

# A command whose wall-clock deadline arrives while the host keeps it from a CPU (many busy containers beside
# it) has not slept or blocked: what it did is judged from the kernel's per-task scheduler statistics, not from
# the clock. /proc/PID/task/TID/schedstat holds "cpu_ns run_delay_ns timeslices"; run_delay is the time the
# task spent runnable but waiting for a CPU, added when the wait ends (when the task next runs), so a wait
# still going on is seen only as a runnable task whose CPU time and timeslices stand still between readings.
# /proc/PID/task/TID/status counts voluntary context switches: a task that is runnable ("R") at two readings
# and made none in between never slept or blocked, so it waited for a CPU whenever it did not run.
STARVED_SHARE = 0.5  # a task waited for a CPU at least this share of the wall time, beyond what the tree explains
STARVED_SAMPLE_S = 0.5  # the tree is read this often while a watched command runs, and after its deadline
SCHED_OTHER = 0


class Thread:
    """One thread of the command's tree, as the scheduler sees it."""

    __slots__ = ("tid", "state", "cpu_ns", "delay_ns", "slices", "voluntary", "nice", "policy", "pinned")

    def __init__(self, tid, state, cpu_ns, delay_ns, slices, voluntary=0, nice=0, policy=SCHED_OTHER, pinned=False):
        self.tid, self.state, self.cpu_ns, self.delay_ns, self.slices = tid, state, cpu_ns, delay_ns, slices
        self.voluntary, self.nice, self.policy, self.pinned = voluntary, nice, policy, pinned


def parse_schedstat(text):
    """``(cpu_ns, run_delay_ns, timeslices)`` from a schedstat line."""
    cpu, delay, slices = text.split()[:3]
    return int(cpu), int(delay), int(slices)


def parse_stat(data):
    """``(state, nice, policy)`` from a /proc stat line (fields 3, 19 and 41; the name in parentheses may
    hold spaces and parentheses, so fields are counted from its last ')')."""
    fields = data.rsplit(b")", 1)[1].split()
    return fields[0].decode("ascii", "replace"), int(fields[16]), int(fields[38])


def parse_voluntary(text):
    """Voluntary context switches from a /proc status file."""
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise ValueError("no voluntary_ctxt_switches line")


def read_task(pid, tid, affinity):
    """The Thread ``tid`` of ``pid``, or None when it is gone or a zombie."""
    base = "/proc/%d/task/%d/" % (pid, tid)
    try:
        with open(base + "stat", "rb") as handle:
            state, nice, policy = parse_stat(handle.read())
        with open(base + "schedstat") as handle:
            cpu, delay, slices = parse_schedstat(handle.read())
        with open(base + "status") as handle:
            voluntary = parse_voluntary(handle.read())
        pinned = os.sched_getaffinity(tid) != affinity
    except (OSError, ValueError, IndexError):
        return None
    if state in ("Z", "X"):
        return None
    return Thread(tid, state, cpu, delay, slices, voluntary, nice, policy, pinned)


def tree_tasks(affinity):
    """Every live thread of the command's tree: every process but init and the runner (all the sandbox user's)."""
    tasks = []
    for pid in live_processes():
        try:
            tids = [int(tid) for tid in os.listdir("/proc/%d/task" % pid)]
        except OSError:
            continue
        tasks += [task for task in (read_task(pid, tid, affinity) for tid in tids) if task is not None]
    return tasks


def deprioritized(tasks):
    """Why the tree waits by its own choice, or "": a task niced, not SCHED_OTHER (SCHED_IDLE, SCHED_BATCH) or
    pinned to fewer CPUs than the container has. Unprivileged code can make itself wait but never undo it."""
    for task in tasks:
        if task.nice != 0:
            return "task %d runs at nice %d" % (task.tid, task.nice)
        if task.policy != SCHED_OTHER:
            return "task %d runs under scheduling policy %d" % (task.tid, task.policy)
        if task.pinned:
            return "task %d is pinned to fewer CPUs than the container has" % task.tid
    return ""


def starved(wait_s, cpu_s, wall_s, cpu_limit, throttle, idle_s=0.0):
    """Whether the host kept the tree from a CPU: under its CPU limit, its most-delayed task waited for a CPU
    (``wait_s``) at least STARVED_SHARE of ``wall_s`` beyond what the tree's own CPU use can explain.

    The most-delayed task, not the sum over tasks: 100 processes woken at once on one core wait ~50x their CPU
    time in sum. One task's wait the tree causes itself is bounded by its CPU use: while a task waits, its CPU
    runs a sibling (counted in ``cpu_s``), or the container's quota is spent (at most 1/quota of ``cpu_s``),
    hence ``throttle`` = 1 + 1/quota cores. The host is to blame only while every CPU the tree may use is busy:
    ``idle_s`` (the idle seconds of those CPUs, summed: at least the time any of them sat idle) is taken off the
    wait, since a task waiting beside an idle CPU waits where it was put (by itself, pinned then unpinned)."""
    return cpu_s < cpu_limit and wait_s - idle_s - throttle * cpu_s >= STARVED_SHARE * wall_s


class Waits:
    """Each task's wait for a CPU so far, at least: its run_delay, plus the wait still going on since the first
    of the readings in a row where it was runnable with CPU time and timeslices standing still (it did not run
    in between: running adds both, and only a running task can go to sleep)."""

    def __init__(self):
        self.seen = {}  # tid -> (state, cpu_ns, slices, time of the first reading of the row)

    def update(self, tasks, now):
        """``{tid: wait_ns}`` of ``tasks``, read at ``now``. A task asleep at the last reading and runnable now was
        woken in between: it slept until then, so its row starts now (else a wake-up timed to a reading would be
        credited the whole interval)."""
        seen, waits = {}, {}
        for task in tasks:
            before = self.seen.get(task.tid)
            same = task.state == "R" and before is not None and before[:3] == ("R", task.cpu_ns, task.slices)
            since = before[3] if same else now
            seen[task.tid] = (task.state, task.cpu_ns, task.slices, since)
            waits[task.tid] = task.delay_ns + int((now - since) * 1e9)
        self.seen = seen
        return waits


def window_of(before, after, seconds):
    """``{tid: (cpu_ns, wait_ns)}`` each task spent running and waiting for a CPU between two readings
    (``{tid: (Thread, wait_ns)}``, ``seconds`` apart): a task runnable at both that made no voluntary context
    switch waited whenever it did not run; any other, what its waits (`Waits`) grew by."""
    spans = {}
    for tid, (task, wait) in after.items():
        then, wait_then = before.get(tid, (None, 0))
        if then is not None and (
            task.cpu_ns < then.cpu_ns or task.slices < then.slices or task.delay_ns < then.delay_ns
        ):
            then, wait_then = None, 0  # counters went back: the id was reused by a task born in the window
        cpu = task.cpu_ns - (then.cpu_ns if then is not None else 0)
        runnable = then is not None and then.state == task.state == "R" and then.voluntary == task.voluntary
        spans[tid] = (cpu, max(0, int(seconds * 1e9) - cpu) if runnable else wait - wait_then)
    return spans


def wants_cpu(spans, seconds):
    """Some task ran or waited for a CPU at least STARVED_SHARE of the window: a computing or starved tree,
    not a sleeper."""
    return any(cpu + wait >= STARVED_SHARE * seconds * 1e9 for cpu, wait in spans.values())


def idle_cpu_s(cpus):
    """Seconds the host CPUs ``cpus`` have sat idle since boot, summed (``/proc/stat``, which a container reads
    host-wide), or None when it cannot be read."""
    try:
        with open("/proc/stat") as handle:
            lines = handle.read().splitlines()
        ticks = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                fields = rest.split()
                ticks += int(fields[3]) + int(fields[4])  # idle, iowait
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def quota_cores():
    """The container's CPU quota in cores (0.0: no quota), or None when the cgroup cannot be read."""
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as handle:
            quota = int(handle.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as handle:
            period = int(handle.read())
        return quota / period if quota > 0 else 0.0
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu.max") as handle:
            quota, period = handle.read().split()[:2]
        return 0.0 if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


class StarvationWatch:
    """Decides, when a CPU-limited command's wall-clock deadline arrives, whether to kill it or let it run on.

    The tree's tasks are read every STARVED_SAMPLE_S from the start. At the deadline a tree the host starved
    since it was spawned (``starved``) that did not deprioritize itself runs on; it is read again every
    STARVED_SAMPLE_S and runs on while some task computes or waits for a CPU (``wants_cpu``), until it exits,
    hits its CPU limit, or reaches the cap (deadline + grace). At the cap a tree starved since it was spawned
    and still starved over the last reading's window, not deprioritized, is killed and marked ``starved``: the
    host's failure. Every other kill at the deadline is the program's (sleepers, blocked programs, self-niced
    ones, one whose start-up was starved and which sleeps now, and one that waited while a CPU it may use sat idle:
    a pin undone between readings leaves no trace in its affinity, but the idle CPU beside it does, ``_sat_idle``)."""

    def __init__(self, clock, spawned, cap, cpu_limit, throttle):
        self.clock, self.cpu_limit, self.throttle = clock, cpu_limit, throttle
        self.spawned = spawned  # the tree's wall clock starts here: the runner's own (starved) Popen is not its time
        self.cap = cap
        self.affinity = os.sched_getaffinity(0)
        self.waits = Waits()
        self.history = []  # the last readings, oldest first: (time, {tid: (Thread, wait_ns)}, tree CPU seconds, idle)
        self.first = None  # the first reading: (time, idle seconds of the container's CPUs)
        self.next_sample = spawned
        self.past_deadline = False
        self.wait_s = None  # seconds the most-delayed task waited for a CPU, at the last reading
        self.wall_s = 0.0
        self.starved = False
        self.why = ""  # how the tree deprioritized itself

    @classmethod
    def of(cls, clock, started, timeout, grace, cpu_limit):
        """A watch, or None where the old deadline holds: no grace asked, no CPU limit, or a cgroup not read."""
        if grace is None or not cpu_limit or clock.cgroup_start is None:
            return None
        quota = quota_cores()
        if quota is None:
            return None
        throttle = 1.0 + (1.0 / quota if quota else 0.0)
        return cls(clock, time.monotonic(), started + timeout + float(grace), cpu_limit, throttle)

    def sample(self, now):
        """Read the tree's tasks if STARVED_SAMPLE_S has passed since the last reading (before the deadline;
        past it, `later` reads them)."""
        if not self.past_deadline and now >= self.next_sample:
            self._read(now)

    def _read(self, now):
        tasks = tree_tasks(self.affinity)
        cpu = self.clock.used()
        waits = self.waits.update(tasks, now)
        idle = idle_cpu_s(self.affinity)
        self.history = self.history[-3:] + [(now, {task.tid: (task, waits[task.tid]) for task in tasks}, cpu, idle)]
        self.first = self.first or (now, idle)
        self.next_sample = now + STARVED_SAMPLE_S
        self.wait_s = max(list(waits.values()) or [0]) / 1e9
        self.wall_s = now - self.spawned
        return tasks, cpu

    def _window(self):
        """``(seconds, {tid: (cpu_ns, wait_ns)}, tree CPU seconds, idle seconds of its CPUs)`` since the latest earlier
        reading at least STARVED_SAMPLE_S / 2 old (shorter windows are all noise), or None."""
        now, after, cpu, idle = self.history[-1]
        earlier = [reading for reading in self.history[:-1] if now - reading[0] >= STARVED_SAMPLE_S / 2]
        if not earlier or earlier[-1][2] is None:
            return None
        then, before, cpu_then, idle_then = earlier[-1]
        self.why = self.why or _sat_idle(idle_then, idle, now - then)
        return now - then, window_of(before, after, now - then), cpu - cpu_then, _idle_between(idle_then, idle)

    def later(self, now):
        """The new deadline, or None: kill now (``starved`` says whether the host is to blame)."""
        tasks, cpu = self._read(now)
        self.why = deprioritized(tasks) or _sat_idle(self.first[1], self.history[-1][3], now - self.first[0])
        if self.why or cpu is None:
            return None
        idle = _idle_between(self.first[1], self.history[-1][3])
        so_far = starved(self.wait_s, cpu, self.wall_s, self.cpu_limit, self.throttle, idle)
        window = self._window()
        if now >= self.cap:
            if so_far and window is not None and not self.why:
                seconds, spans, window_cpu, window_idle = window
                longest = max([wait for _, wait in spans.values()] or [0]) / 1e9
                self.starved = starved(longest, window_cpu, seconds, self.cpu_limit, self.throttle, window_idle)
            return None
        if self.past_deadline:
            go_on = window is not None and wants_cpu(window[1], window[0])
        else:
            self.past_deadline, go_on = True, so_far
        return min(now + STARVED_SAMPLE_S, self.cap) if go_on else None


def _idle_between(idle_then, idle_now):
    """Idle seconds of the container's CPUs between two readings (0.0 when /proc/stat could not be read)."""
    return 0.0 if idle_then is None or idle_now is None else max(0.0, idle_now - idle_then)


def _sat_idle(idle_then, idle_now, seconds):
    """Why a wait is not the host's, or "": a CPU the tree may run on sat idle at least STARVED_SHARE of the span.
    The host starves a tree only while every CPU it may use is busy; a task waiting beside an idle CPU waits where it
    put itself (pinned to a busy CPU, then unpinned between readings: the balancer need not move it back) or the
    balancer left it, and a program must not be able to choose that."""
    if idle_then is None or idle_now is None or seconds <= 0:
        return ""
    idle = idle_now - idle_then
    if idle < STARVED_SHARE * seconds:
        return ""
    return "its CPUs sat idle %.2fs in %.2fs: it waited beside an idle CPU, not for one" % (idle, seconds)


def run_command(body, fs_paths):
    """Run one command to completion under its deadline and output bound."""
    allow = body["allow"]
    try:
        with SandboxIdentity():
            cwd = resolve(body["cwd"], allow)
            if not os.path.isdir(cwd):
                raise Denied("cwd %r is not a directory" % body["cwd"])
    except (Denied, OSError) as exc:
        return _result(failure="sandbox_denied", detail=str(exc))

    env = dict(SANDBOX_ENV)
    env.update(body.get("env") or {})
    limit = min(int(body["output_limit_bytes"]), MAX_DATA)
    timeout = float(body["timeout_s"])
    memory_limit = body.get("memory_limit_bytes")
    cpu_limit = body.get("cpu_limit_s")
    stdin_data = base64.b64decode(body.get("stdin") or "")
    before = counters(fs_paths)
    clock = TreeClock()
    started = time.monotonic()
    # The command (and all it forks) inherits an OOM score of 1000: when the container runs out of
    # memory the kernel kills the candidate's processes, not this supervisor. The command runs under
    # another uid, non-dumpable, so it cannot write its score back down.
    _set_oom_score_adj(1000)
    try:
        proc = subprocess.Popen(
            body["argv"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            user=SANDBOX_UID,
            group=SANDBOX_GID,
            extra_groups=[],
            process_group=0,
            close_fds=True,
            restore_signals=True,  # SIGPIPE and SIGXFSZ back at their defaults in the command
            preexec_fn=_child_setup(memory_limit, cpu_limit) if memory_limit or cpu_limit else None,
        )
    except OSError as exc:
        return _result(exit_code=127, failure="nonzero_exit", detail="cannot start %r: %s" % (body["argv"][0], exc))
    finally:
        _set_oom_score_adj(0)

    watch = StarvationWatch.of(clock, started, timeout, body.get("starved_grace_s"), cpu_limit)
    out, err, timed_out, truncated, status, rusage, cpu_out = _supervise(
        proc, stdin_data, timeout, limit, started, cpu_limit, clock, watch
    )
    wall = time.monotonic() - started
    tree_cpu = clock.used()
    survivors = sweep()
    reap()
    remove_ipc()
    after = counters(fs_paths)
    exit_code = os.waitstatus_to_exitcode(status)
    sig = -exit_code if exit_code < 0 else None
    cpu_out = cpu_out or bool(cpu_limit) and sig == signal.SIGXCPU  # the RLIMIT_CPU backstop fired
    failure = _classify(before, after, exit_code, sig, timed_out or cpu_out, truncated)
    detail = "" if not survivors else "%d processes survived the sweep" % survivors
    if cpu_out:
        detail = ("CPU limit of %.3fs passed; process group killed. " % cpu_limit) + detail
    elif timed_out:
        detail = _deadline_detail(timeout, watch) + detail
    return _result(
        exit_code=None if sig else exit_code,
        signal=sig,
        stdout=out,
        stderr=err,
        wall_s=wall,
        cpu_s=tree_cpu if tree_cpu is not None else rusage.ru_utime + rusage.ru_stime,
        max_rss_kb=rusage.ru_maxrss,
        failure=failure,
        truncated=truncated,
        detail=detail.strip(),
        run_delay_s=None if watch is None else watch.wait_s,
        starved=bool(timed_out and not cpu_out and watch is not None and watch.starved),
    )


def _deadline_detail(timeout, watch):
    if watch is None:
        return "deadline of %.3fs passed; process group killed. " % timeout
    waited = "its most-delayed task waited %.2fs for a CPU in %.2fs of wall time" % (watch.wait_s, watch.wall_s)
    if watch.starved:
        return "starved of CPU by the host: %s; process group killed at the deadline of %.3fs plus its grace. " % (
            waited,
            timeout,
        )
    why = "; not extended: %s" % watch.why if watch.why else ""
    return "deadline of %.3fs passed (%s%s); process group killed. " % (timeout, waited, why)


def _supervise(proc, stdin_data, timeout, limit, started, cpu_limit=None, clock=None, watch=None):
    """Feed stdin, read stdout/stderr through a bounded reader, enforce the deadline (and the CPU limit
    of the process tree, polled every CPU_POLL_S; past the deadline, ``watch`` may let a starved tree run on)."""
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    for name in buffers:
        stream = getattr(proc, name)
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, name)
    if stdin_data:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
    else:
        proc.stdin.close()
    pending = memoryview(stdin_data)
    total = 0
    timed_out = truncated = exited = cpu_out = False
    deadline = started + timeout
    while not exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            later = None if watch is None else watch.later(time.monotonic())
            if later is None:
                timed_out = True
                break
            deadline = later
            continue
        if cpu_limit:
            used = clock.used()
            if used is not None and used > cpu_limit:
                timed_out = cpu_out = True
                break
            remaining = min(remaining, CPU_POLL_S)
        if watch is not None:
            watch.sample(time.monotonic())
        for key, _ in sel.select(remaining):
            if key.data == "exit":
                exited = True
            elif key.data == "stdin":
                try:
                    pending = pending[os.write(key.fd, pending[: 1 << 16]) :]
                except (BrokenPipeError, BlockingIOError) as exc:
                    if isinstance(exc, BrokenPipeError):
                        pending = pending[:0]
                if not pending:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
            else:
                chunk = _read_some(key.fd)
                if chunk is None:
                    continue
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                room = limit - total
                buffers[key.data] += chunk[: max(room, 0)]
                total += len(chunk)
                if total > limit:
                    truncated = True
        if truncated:
            break
    if timed_out or truncated:
        _killpg(proc.pid)
        sweep()  # children that left the group die too, before we block in wait4
    # Leftover holders of the pipes (background children) die in the sweep that
    # follows; read what is already buffered without waiting for them.
    for name in ("stdout", "stderr"):
        stream = getattr(proc, name)
        while total <= limit:
            chunk = _read_some(stream.fileno())
            if not chunk:
                break
            room = limit - total
            buffers[name] += chunk[: max(room, 0)]
            total += len(chunk)
            truncated = truncated or total > limit
        stream.close()
    if proc.stdin and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except OSError:
            pass
    sel.close()
    os.close(pidfd)
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return bytes(buffers["stdout"]), bytes(buffers["stderr"]), timed_out, truncated, status, rusage, cpu_out


def _read_some(fd):
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _classify(before, after, exit_code, sig, timed_out, truncated):
    """One FailureKind per call, from counters and exit status (never from output text)."""
    if after["oom_kill"] > before["oom_kill"]:
        return "oom"
    if after["pids_max"] > before["pids_max"]:
        return "pids_limit"
    became_full = set(after["full"]) - set(before["full"])
    # SIGXFSZ directly, or as a shell reports a child's death by it (128 + signal).
    if sig == signal.SIGXFSZ or exit_code == 128 + signal.SIGXFSZ or (became_full or after["full"]) and exit_code != 0:
        return "disk_full"
    if timed_out:
        return "timeout"
    if truncated:
        return "output_truncated"
    if exit_code != 0:
        return "nonzero_exit"
    return "ok"


def _result(**fields):
    result = {
        "exit_code": None,
        "signal": None,
        "stdout": b"",
        "stderr": b"",
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "max_rss_kb": 0,
        "failure": "ok",
        "truncated": False,
        "detail": "",
        "run_delay_s": None,
        "starved": False,
    }
    result.update(fields)
    result["stdout"] = b64(result["stdout"])
    result["stderr"] = b64(result["stderr"])
    return result


# ---------------------------------------------------------------- operations


def op_exec(body, fs_paths, emit):
    return run_command(body, fs_paths)


def op_exec_batch(body, fs_paths, emit):
    """Run the items one after another; each item's result goes out in a frame of its own as soon as
    it is known, so the host holds every finished result even if a later item takes the runner down,
    and bounds each item by its own deadline rather than the sum of all."""
    for index, item in enumerate(body["items"]):
        result = run_command(dict(item, allow=body["allow"]), fs_paths)
        emit({"item": index, "result": result})
        if body.get("stop_on_failure") and result["failure"] != "ok":
            break
        cpu_limit = item.get("cpu_limit_s")
        killed_at_deadline = (
            result["failure"] == "timeout"
            and result["wall_s"] >= float(item["timeout_s"] or 0)
            and not (cpu_limit and result["cpu_s"] > cpu_limit)  # a starved test run on to its CPU limit
        )
        if body.get("stop_on_deadline") and killed_at_deadline:
            break
    return {"results": []}


def _file_result(failure="ok", detail="", **fields):
    fields.update(failure=failure, detail=detail)
    return fields


def op_read_file(body, fs_paths, emit):
    limit = min(int(body["max_bytes"]), MAX_DATA)
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except Denied as exc:
        return _file_result("sandbox_denied", str(exc), data="")
    except OSError as exc:
        return _file_result("tool_error", "%s: %s" % (body["path"], exc.strerror or exc), data="")
    truncated = len(data) > limit
    return _file_result("output_truncated" if truncated else "ok", data=b64(data[:limit]), truncated=truncated)


def op_write_file(body, fs_paths, emit):
    data = base64.b64decode(body["data"])
    try:
        with SandboxIdentity():
            parent = resolve(os.path.dirname(body["path"]) or "/", body["allow"])
            target = os.path.join(parent, os.path.basename(body["path"]))
            if os.path.islink(target):
                resolve(target, body["allow"])
            if body.get("mkdir", True):
                os.makedirs(parent, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(body.get("mode", 0o644)))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
    except Denied as exc:
        return _file_result("sandbox_denied", str(exc))
    except OSError as exc:
        failure = "disk_full" if exc.errno in (28, 27, 122) else "tool_error"
        return _file_result(failure, "%s: %s" % (body["path"], exc.strerror or exc))
    return _file_result(bytes_written=len(data))


def op_list_dir(body, fs_paths, emit):
    """The directory's entries, the first ``max_entries`` by name (a bounded heap: however many
    entries the candidate made, the reply and the runner's memory stay bounded); past the bound the
    reply says output_truncated and how many entries there are (a floor past LIST_SCAN_ENTRIES)."""
    import heapq

    limit = max(1, min(int(body.get("max_entries") or MAX_LIST_ENTRIES), MAX_LIST_ENTRIES))
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            names, total = [], 0
            with os.scandir(path) as it:
                for entry in it:
                    total += 1
                    key = os.fsencode(entry.name)
                    if len(names) < limit:
                        heapq.heappush(names, _Desc(key))
                    elif key < names[0].key:
                        heapq.heapreplace(names, _Desc(key))
                    if total >= LIST_SCAN_ENTRIES:
                        break
            entries = []
            for item in sorted(names, key=lambda d: d.key):
                name = os.fsdecode(item.key)
                try:
                    st = os.stat(os.path.join(path, name), follow_symlinks=False)
                except OSError:  # removed meanwhile (nothing of the sandbox user runs now, but a listing is data)
                    continue
                kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"
                entries.append({"name": name, "kind": kind, "size": st.st_size})
    except Denied as exc:
        return _file_result("sandbox_denied", str(exc), entries=[])
    except OSError as exc:
        return _file_result("tool_error", "%s: %s" % (body["path"], exc.strerror or exc), entries=[])
    if total <= limit:
        return _file_result(entries=entries, total=total)
    more = "at least %d" % total if total >= LIST_SCAN_ENTRIES else "%d" % total
    detail = "%s entries; the first %d by name are listed" % (more, limit)
    return _file_result("output_truncated", detail, entries=entries, total=total, truncated=True)


class _Desc:
    """A heap item ordered backwards, so heapq's min-heap keeps the largest of the smallest names on top."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other):
        return self.key > other.key


def op_put_archive(body, fs_paths, emit):
    """Extract a tar into ``dest`` as the sandbox user: regular files and directories only."""
    import tarfile

    try:
        with SandboxIdentity():
            dest = resolve(body["dest"], body["allow"])
            with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["tar"])), mode="r:*") as tar:
                for member in tar.getmembers():
                    _extract_member(tar, member, dest, body["allow"])
    except Denied as exc:
        return _file_result("sandbox_denied", str(exc))
    except (OSError, tarfile.TarError) as exc:
        failure = "disk_full" if getattr(exc, "errno", None) in (28, 27, 122) else "tool_error"
        return _file_result(failure, "put_archive into %s: %s" % (body["dest"], exc))
    return _file_result()


def _extract_member(tar, member, dest, allow):
    name = os.path.normpath(member.name)
    if name.startswith("/") or name == ".." or name.startswith("../"):
        raise Denied("archive member %r escapes the destination" % member.name)
    target = os.path.join(dest, name)
    resolve(os.path.dirname(target), allow)
    mode = (member.mode or 0o644) & 0o777
    if member.isdir():
        os.makedirs(target, mode=mode | 0o700, exist_ok=True)
    elif member.isfile():
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(target):
            os.unlink(target)
        source = tar.extractfile(member)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as handle:
            while True:
                chunk = source.read(1 << 20)
                if not chunk:
                    break
                handle.write(chunk)
    else:
        raise Denied("archive member %r is not a regular file or directory" % member.name)


class BoundedBuffer(io.BytesIO):
    """An archive buffer that refuses to grow past ``limit`` while it is written.

    Sparse files cost no disk but archive at their full size: unbounded, a workspace
    could make the runner build gigabytes and be OOM-killed in the middle of a copy-out.
    """

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def write(self, data):
        if self.tell() + len(data) > self.limit:
            raise OSError(27, "archive larger than %d bytes" % self.limit)
        return super().write(data)


def tree_size(path, limit):
    """The size an archive of ``path`` will have (a header per entry plus file sizes), counted up to ``limit``."""
    st = os.lstat(path)
    total = 512 + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
    for root, dirs, files in os.walk(path):  # symlinks are archived as links, never followed
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += 512 + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
            if total > limit:
                return total
    return total


def op_get_archive(body, fs_paths, emit):
    import tarfile

    limit = min(int(body["max_bytes"]), MAX_DATA)
    buffer = BoundedBuffer(limit)
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            size = tree_size(path, limit)
            if size > limit:
                raise OSError(27, "archive larger than %d bytes" % limit)
            # The tar, its base64 and the reply's JSON text and bytes are alive at once, inside the
            # container's memory limit next to the workspace's tmpfs pages: refuse rather than be OOM-killed.
            headroom = memory_headroom()
            if headroom is not None and ARCHIVE_MEMORY_FACTOR * size + ARCHIVE_MEMORY_MARGIN > headroom:
                raise OSError(12, "workspace memory too full to copy out %d bytes (%d free)" % (size, headroom))
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(path, arcname=os.path.basename(path) or ".", recursive=True)
    except Denied as exc:
        return _file_result("sandbox_denied", str(exc), tar="")
    except OSError as exc:
        return _file_result("tool_error", "get_archive %s: %s" % (body["path"], exc.strerror or exc), tar="")
    return _file_result(tar=b64(buffer.getbuffer()))


def op_ping(body, fs_paths, emit):
    return {"pid": os.getpid(), "processes": len(live_processes())}


OPS = {
    "exec": op_exec,
    "exec_batch": op_exec_batch,
    "read_file": op_read_file,
    "write_file": op_write_file,
    "list_dir": op_list_dir,
    "put_archive": op_put_archive,
    "get_archive": op_get_archive,
    "ping": op_ping,
}


def failed_op(exc):
    """The reply body of an operation that raised (the workspace's content made it fail, e.g. a
    directory tree too deep to archive): the candidate's ``tool_error``, after the same sweep as any
    call so nothing it started outlives it."""
    sweep()
    reap()
    remove_ipc()
    return {"failure": "tool_error", "detail": ("%s: %s" % (type(exc).__name__, exc))[:2000]}


def serve(stdin, stdout):
    """Answer requests until the host closes the stream. Nothing a request or the workspace's content
    does may end this loop: every failure becomes a reply."""
    fs_paths = [p for p in os.environ.get("GYM_FS_PATHS", "/workspace:/tmp").split(":") if p]
    while True:
        try:
            request = read_frame(stdin)
        except ValueError as exc:  # JSON the host never sends: answer it, the stream stays in step
            write_frame(stdout, {"id": None, "ok": False, "error": "bad frame: %s" % exc})
            continue
        if request is None:
            return 0
        request_id = request.get("id") if isinstance(request, dict) else None
        op = OPS.get(request.get("op")) if isinstance(request, dict) else None
        if op is None:
            write_frame(stdout, {"id": request_id, "ok": False, "error": "unknown op in %.200r" % (request,)})
            continue

        def emit(body, request_id=request_id):
            try:
                write_frame(stdout, {"id": request_id, "ok": True, "partial": True, "body": body})
            except OSError as exc:
                raise HostGone(exc) from exc

        try:
            body = op(request.get("body") or {}, fs_paths, emit)
        except HostGone:
            raise
        except Exception as exc:  # RecursionError, MemoryError, OSError from the workspace's content
            body = failed_op(exc)
        write_frame(stdout, {"id": request_id, "ok": True, "body": body})


def main():
    drop_bounding_set()
    # No supplementary groups: file operations under SandboxIdentity must carry the sandbox
    # user's credentials only (group 0 would open root-group-readable files).
    os.setgroups([])
    # A command that exits without reading all of its stdin closes the pipe under our writes: that
    # must be an EPIPE we handle, never a SIGPIPE that kills the supervisor (and masks the call).
    # Children get SIGPIPE back at its default (subprocess restores it before exec).
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    write_frame(stdout, {"id": 0, "ok": True, "body": {"hello": "gym-runner", "version": PROTOCOL_VERSION}})
    try:
        return serve(stdin, stdout)
    except (HostGone, OSError):  # the host closed the stream: nothing left to answer
        return 0


if __name__ == "__main__":
    sys.exit(main())
