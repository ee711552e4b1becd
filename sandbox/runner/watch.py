"""Starvation: the host's failure, not the program's. `StarvationWatch` decides, at a CPU-limited command's
wall-clock deadline, whether the host kept its tree from a CPU (it runs on) or the program is to blame (killed).

A command whose wall-clock deadline arrives while the host keeps it from a CPU (many busy containers beside
it) has not slept or blocked: what it did is judged from the kernel's per-task scheduler statistics, not from
the clock. /proc/PID/task/TID/schedstat holds "cpu_ns run_delay_ns timeslices"; run_delay is the time the
task spent runnable but waiting for a CPU, added when the wait ends (when the task next runs), so a wait
still going on is seen only as a runnable task whose CPU time and timeslices stand still between readings.
/proc/PID/task/TID/status counts voluntary context switches: a task that is runnable ("R") at two readings
and made none in between never slept or blocked, so it waited for a CPU whenever it did not run.
"""

import os
import time

from sandbox.runner.cgroup import quota_cores
from sandbox.runner.sweep import live_processes

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
