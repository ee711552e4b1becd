"""What the kernel says of the container: its cgroup's counters (OOM kills, pids-limit hits, memory
headroom, full filesystems) and CPU (usage, quota), and `TreeClock`, the CPU time of a command's tree.

cgroup v1 and v2 paths are both read; an unreadable counter is 0, an unreadable figure None.
"""

import os


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
