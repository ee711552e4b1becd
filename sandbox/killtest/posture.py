"""The posture snapshot: how a workspace looks from inside, compared with the expected posture in the repo.

A program run as the sandbox user reports identity, capabilities (its own,
the runner's, its fork server's and init's), NoNewPrivs, seccomp mode, namespaces, mounts and their flags,
rlimits, cgroup limits, environment keys, open descriptors, network
interfaces and routes, visible processes. The host normalises away what
varies between runs or machines (namespace inode numbers become
``private``/``host`` by comparison with the host's own; overlay layer paths,
host device names and host-derived rlimits are dropped), flattens the result
to dotted keys and reports every key that differs from the expected file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EXPECTED_PATH = Path(__file__).with_name("posture.json")
MOUNT_FLAGS = ("ro", "rw", "nosuid", "nodev", "noexec")
TMPFS_OPTIONS = ("size=", "nr_inodes=", "mode=", "uid=", "gid=")
VIRTUAL_FS = ("overlay", "proc", "tmpfs", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue")

PROGRAM = """
import resource, socket, time


def status(pid):
    with open("/proc/%s/status" % pid) as handle:
        return dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)


def read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def default_route(path, v6):  # a usable one: not the kernel's reject route on lo
    try:
        with open(path) as handle:
            rows = [line.split() for line in handle.read().splitlines()[0 if v6 else 1:]]
    except OSError:
        return False
    if v6:
        return any(r[0] == "0" * 32 and r[1] == "00" and not int(r[8], 16) & 0x200 and r[9] != "lo" for r in rows)
    return any(r[1] == "00000000" and r[0] != "lo" for r in rows)


CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def privileges(st):
    return {"uid": st.get("Uid", "?").split()[:1], "groups": st.get("Groups", "").split(),
            "no_new_privs": st.get("NoNewPrivs", "?").strip(),
            "seccomp": st.get("Seccomp", "?").strip(), "capabilities": {cap: st.get(cap, "?").strip() for cap in CAPS}}


me = status("self")
runner_pid = pid_of(RUNNER)
runner = status(runner_pid) if runner_pid else {}
fork_server_pid = pid_of(FORK_SERVER)
fork_server = status(fork_server_pid) if fork_server_pid else {}
for _ in range(200):  # its steady state: it empties its bounding set once its interpreter is up (before any fork)
    if not fork_server or fork_server.get("CapBnd", "").strip().strip("0") == "":
        break
    time.sleep(0.01)
    fork_server = status(fork_server_pid)
mounts = {}
with open("/proc/self/mounts") as handle:
    for line in handle:
        source, target, fstype, options = line.split()[:4]
        mounts[target] = {"source": source, "type": fstype, "options": options.split(",")}
processes = []
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        processes.append(read("/proc/%s/comm" % entry) or "?")
limits = {name[len("RLIMIT_"):].lower(): list(resource.getrlimit(getattr(resource, name)))
          for name in ("RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_DATA")}
cgroup = {
    "memory": read("/sys/fs/cgroup/memory/memory.limit_in_bytes") or read("/sys/fs/cgroup/memory.max"),
    "memory_swap": read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes") or read("/sys/fs/cgroup/memory.swap.max"),
    "pids": read("/sys/fs/cgroup/pids/pids.max") or read("/sys/fs/cgroup/pids.max"),
    "cpu": read("/sys/fs/cgroup/cpu.max") or "%s %s" % (read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                                                        read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")),
}
report("posture", posture={
    "identity": {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": sorted(os.getgroups())},
    "capabilities": {cap: me[cap].strip() for cap in CAPS},
    "no_new_privs": me["NoNewPrivs"].strip(),
    "seccomp": me["Seccomp"].strip(),
    "runner": privileges(runner),
    "fork_server": privileges(fork_server),
    "init": privileges(status(1)),
    "namespaces": {ns: os.readlink("/proc/self/ns/" + ns) for ns in sorted(os.listdir("/proc/self/ns"))},
    "mounts": mounts,
    "rlimits": limits,
    "cgroup": cgroup,
    "environment": sorted(os.environ),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))[:-1],
    "network": {"interfaces": sorted(os.listdir("/sys/class/net")),
                "ipv4_default_route": default_route("/proc/net/route", False),
                "ipv6_default_route": default_route("/proc/net/ipv6_route", True)},
    "processes": sorted(processes),
    "hostname": socket.gethostname(),
})
"""


def normalise(raw: dict[str, Any], host_namespaces: dict[str, str]) -> dict[str, Any]:
    """Drop what varies between runs and machines; keep every security-relevant fact."""
    posture = dict(raw)
    posture["namespaces"] = {
        ns: "host" if host_namespaces.get(ns) == ident else "private" for ns, ident in raw["namespaces"].items()
    }
    posture["mounts"] = {target: _mount(m) for target, m in raw["mounts"].items()}
    return posture


def _mount(mount: dict[str, Any]) -> dict[str, Any]:
    fstype = mount["type"]
    options = [o for o in mount["options"] if o in MOUNT_FLAGS]
    if fstype == "tmpfs":
        options += [o for o in mount["options"] if o.startswith(TMPFS_OPTIONS)]
    if fstype not in VIRTUAL_FS:
        fstype = "host-bind"  # a file the engine binds in from the host's own filesystem (ext4, xfs, ...)
    return {"type": fstype, "options": options}


def host_namespaces() -> dict[str, str]:
    """The namespace identities of this (host-side) process, to tell private from shared."""
    found = {}
    for ns in os.listdir("/proc/self/ns"):
        try:
            found[ns] = os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            continue
    return found


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a.b.c": leaf}; lists are leaves."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key in sorted(value):
        flat.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    return flat


def drift(expected: dict[str, Any], observed: dict[str, Any]) -> list[dict[str, Any]]:
    """Every key whose value differs, is missing or is new."""
    want, have = flatten(expected), flatten(observed)
    return [
        {"key": key, "expected": want.get(key, "<absent>"), "observed": have.get(key, "<absent>")}
        for key in sorted(set(want) | set(have))
        if want.get(key, "<absent>") != have.get(key, "<absent>")
    ]


def load(path: Path = EXPECTED_PATH) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def save(posture: dict[str, Any], path: Path = EXPECTED_PATH) -> None:
    Path(path).write_text(json.dumps(posture, indent=2, sort_keys=True) + "\n")
