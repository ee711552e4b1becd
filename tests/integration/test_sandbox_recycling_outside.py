"""Recycled workspaces, attacked from outside the list the reset empties (an outside review of sandbox/pool.py's
recycling and sandbox/runner/reset.py).

The reset empties the writable filesystems, kills processes, removes System V objects and compares the writable
mounts' entries with the runner's start. These attacks go after state that is not one of those: kernel state of the
container's namespaces and cgroups that outlives every process (ID counters, network counters and sockets, cgroup
counters), metadata the comparison leaves out (a mount root's own timestamps, inode numbers), the fork server's
children, and the reset's own code (a tree its walk cannot take).

Each attack runs as the candidate of one task (A) in a one-container pool; the next task (B) then reads what a
candidate can read. The safe outcome is the one the pool promises: either B runs in a new container (the reset said
no: ``resets_refused``), or in the recycled one and it shows B nothing of A (what a new container shows). The
channel tests plant a value (a "secret") through the channel and assert that B, in the recycled container, cannot
read that value back; each has an honest control (the same reading in a new container, the same honest program in a
new container).

Not closed by a reset, so not tested here as closed: the pid namespace's last pid, the tmpfs inode numbers, the
cgroup's CPU time and memory high-water mark (each moves with any use and only a new container resets it). They are
why recycling is off by default (``pool.recycle_uses`` 0; docs/sandbox.md, "Recycling").
"""

from __future__ import annotations

import functools
import json

import pytest
import trio

from sandbox.failure import FailureKind, Verdict
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.grader import Grader, GraderConfig
from tasks.submission import Submission
from tests.recycling_support import FINGERPRINT, TASK, ZOMBIE_COUNT, fenced, grade_in_one_container, one_container

pytestmark = pytest.mark.docker


async def run(ws, program: str, fork_server: bool = False, timeout_s: float = 30.0):
    return await ws.exec(
        ExecRequest(argv=["python3", "-I", "-c", program], timeout_s=timeout_s, fork_server=fork_server)
    )


async def fingerprint(ws) -> dict:
    result = await run(ws, FINGERPRINT)
    assert result.failure == FailureKind.OK, result
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------------------------------- channels
#
# One pool: a new container first shows what it shows (the control), then task A plants a secret in each channel,
# then task B reads every channel back. Each channel is its own test below.

TS_SECRET = 4242424242424242424  # ns: a date in 2104, so relatime never moves the atime again
IPC_SECRET = (3 << 15) | 42  # the id of the next System V message queue (seq 3, index 42)
INO_SECRET = 4242  # the inode number of the next file made in /tmp
PID_SECRET = 1777  # the pid of the next process
UDP_SECRET = 42  # datagrams sent on the loopback
PIDS_EVENTS_SECRET = 7  # forks refused by the pids limit
PORT = 4242  # a port left in TIME_WAIT
MEMORY_SECRET_MB = 200  # the memory cgroup's high-water mark

PLANT_IPC = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
while True:  # each queue made and removed moves the namespace's id counter on
    q = libc.msgget(0, 0o600)
    assert q >= 0, ctypes.get_errno()
    libc.msgctl(q, 0, None)
    if q >= {IPC_SECRET} - 1:
        break
print(q)
"""

PLANT_INO = f"""
import os
while True:  # each file made and removed moves the tmpfs's inode counter on
    fd = os.open("/tmp/x", os.O_CREAT | os.O_WRONLY, 0o600)
    ino = os.fstat(fd).st_ino
    os.close(fd)
    os.unlink("/tmp/x")
    if ino >= {INO_SECRET} - 1:
        break
print(ino)
"""

PLANT_TIMESTAMPS = f"""
import os
for root in ("/tmp", "/workspace"):  # the sandbox user owns these mount roots: it may set any time on them
    os.utime(root, ns=({TS_SECRET}, {TS_SECRET}))
print(os.stat("/tmp").st_mtime_ns)
"""

PLANT_UDP = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range({UDP_SECRET}):
    s.sendto(b"x", ("127.0.0.1", 9))
"""


def plant_time_wait(family: str, host: str) -> str:
    """A connection the server's side closes first, so its end waits in TIME_WAIT for 60 s; the server's socket of
    ``family`` bound to ``host`` (IPv6: "::", an IPv4-mapped connection, the workspace having no IPv6 address,
    which /proc/net/tcp6 lists)."""
    return f"""
import socket, time
server = socket.socket({family})
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("{host}", {PORT}))
server.listen()
client = socket.create_connection(("127.0.0.1", {PORT}))
conn, _ = server.accept()
conn.close()
client.recv(1)
client.close()
server.close()
time.sleep(0.05)
"""


PLANT_TIME_WAIT = plant_time_wait("socket.AF_INET", "127.0.0.1")
PLANT_TIME_WAIT6 = plant_time_wait("socket.AF_INET6", "::")

# A listener no process holds: its descriptor in flight in a unix socket that holds itself (a cycle only the
# kernel's garbage collector frees), so killing every process does not close it.
PLANT_LISTENER_IN_FLIGHT = f"""
import array, socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", {PORT}))
server.listen()
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
fds = array.array("i", [server.fileno(), a.fileno(), b.fileno()])
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
"""

PLANT_MEMORY = f"""
block = bytearray({MEMORY_SECRET_MB} << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
"""

PLANT_PIDS_EVENTS = f"""
import threading
stop, threads, refused = threading.Event(), [], 0
while refused < {PIDS_EVENTS_SECRET}:
    try:
        thread = threading.Thread(target=stop.wait)
        thread.start()
        threads.append(thread)
    except RuntimeError:  # the pids limit: each refusal counts in pids.events
        refused += 1
stop.set()
for thread in threads:
    thread.join()
"""

PLANT_PID = f"""
import threading
while True:  # each thread takes the next pid of the container's pid namespace
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    if thread.native_id >= {PID_SECRET} - 1:
        break
print(thread.native_id)
"""

PLANT_FLAGS = """
import array, fcntl, os
for root in ("/tmp", "/workspace"):  # FS_NODUMP_FL | FS_NOATIME_FL: an owner's inode flags, no capability needed
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    flags = array.array("i", [0])
    fcntl.ioctl(fd, 0x80086601, flags, True)
    flags[0] |= 0x40 | 0x80
    fcntl.ioctl(fd, 0x40086602, flags, True)
    os.close(fd)
"""

PLANTS = {  # in order: the pid last (every process moves it), the timestamps after the inode counter (files in /tmp)
    "honest": "print(sum(range(10)))\n",
    "ipc": PLANT_IPC,
    "ino": PLANT_INO,
    "timestamps": PLANT_TIMESTAMPS,
    "flags": PLANT_FLAGS,
    "udp": PLANT_UDP,
    "time_wait": PLANT_TIME_WAIT,
    "time_wait6": PLANT_TIME_WAIT6,
    "listener_in_flight": PLANT_LISTENER_IN_FLIGHT,
    "memory": PLANT_MEMORY,
    "pids_events": PLANT_PIDS_EVENTS,
    "pid": PLANT_PID,
}

OBSERVE = f"""
import ctypes, json, os, socket
seen = {{"pid": os.getpid()}}
try:
    seen["ns_last_pid"] = int(open("/proc/sys/kernel/ns_last_pid").read())
except OSError as exc:
    seen["ns_last_pid"] = str(exc)
for root in ("/tmp", "/workspace"):
    st = os.stat(root)
    seen[root] = [st.st_atime_ns, st.st_mtime_ns]
import array, fcntl
for root in ("/tmp", "/workspace"):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    flags = array.array("i", [0])
    try:
        fcntl.ioctl(fd, 0x80086601, flags, True)
        seen["flags " + root] = flags[0]
    except OSError as exc:
        seen["flags " + root] = exc.strerror
    os.close(fd)
libc = ctypes.CDLL(None, use_errno=True)
seen["msgid"] = libc.msgget(0, 0o600)
libc.msgctl(seen["msgid"], 0, None)
fd = os.open("/tmp/probe", os.O_CREAT | os.O_WRONLY, 0o600)
seen["ino"] = os.fstat(fd).st_ino
os.close(fd)
os.unlink("/tmp/probe")
snmp = [line.split()[1:] for line in open("/proc/net/snmp") if line.startswith("Udp:")]
seen["udp"] = dict(zip(snmp[0], map(int, snmp[1])))["OutDatagrams"]
for table in ("tcp", "tcp6"):
    rows = [line.split() for line in open("/proc/net/" + table).read().splitlines()[1:]]
    seen[table] = sorted([int(row[1].split(":")[1], 16), row[3]] for row in rows)
def counter(paths, key):
    for path in paths:
        try:
            for line in open(path):
                if line.split()[0] == key:
                    return int(line.split()[1])
        except OSError:
            continue
    return None
seen["pids_events"] = counter(["/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"], "max")
for path in ("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", "/sys/fs/cgroup/memory.peak"):
    try:
        seen["memory_peak"] = int(open(path).read())
        break
    except (OSError, ValueError):
        seen["memory_peak"] = None
server = socket.socket()  # an honest program's server on a fixed port (no SO_REUSEADDR, as socket() makes it)
try:
    server.bind(("127.0.0.1", {PORT}))
    server.listen()
    seen["bind"] = "ok"
except OSError as exc:
    seen["bind"] = exc.strerror
print(json.dumps(seen))
"""


@functools.cache
def channel(name: str) -> dict:
    """A new container's view (control), then one task planting ``name`` in a container of a one-container pool,
    then the next task's view there. The control runs in a pool of its own: its reading makes a System V queue,
    which alone would keep its container from being recycled (and every channel from being tested)."""

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("control") as ws:
                control = await run(ws, OBSERVE)
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("A") as ws:
                first = ws.id
                planted = await run(ws, PLANTS[name])
            async with pool.acquire("B") as ws:
                again = ws.id
                stats = pool.stats()
                seen = await run(ws, OBSERVE)
            return first, again, control, planted, seen, stats

    first, again, control, planted, seen, stats = trio.run(main)
    assert control.failure == FailureKind.OK, control
    assert seen.failure == FailureKind.OK, seen
    return {
        "recycled": again == first and stats["recycled"] == 1,
        "stats": stats,
        "control": json.loads(control.stdout),
        "planted": {name: planted},
        "seen": json.loads(seen.stdout),
    }


def test_channels_an_honest_task_leaves_its_container_recycled_so_each_channel_test_can_fail():
    channels = channel("honest")
    assert channels["recycled"] and channels["stats"]["resets_refused"] == 0, channels["stats"]
    counters = ("udp", "tcp", "tcp6", "bind", "pids_events")
    assert [channels["seen"][key] for key in counters] == [channels["control"][key] for key in counters], channels


@pytest.mark.parametrize("name", list(PLANTS))
def test_channels_control_a_new_container_shows_none_of_the_secrets_and_the_plants_ran(name):
    channels = channel(name)
    control, planted = channels["control"], channels["planted"]
    assert control["bind"] == "ok", control  # the honest server binds its port in a new container
    assert control["/tmp"][1] != TS_SECRET and control["msgid"] != IPC_SECRET and control["ino"] != INO_SECRET
    assert control["pid"] != PID_SECRET and control["udp"] == 0 and control["pids_events"] == 0, control
    assert control["tcp"] == [] and control["tcp6"] == [], control
    for name, result in planted.items():
        if name not in ("pids_events", "flags"):  # refused forks by design; inode flags: the kernel may refuse them
            assert result.failure == FailureKind.OK, (name, result)


def _leak(channels, name, secret_seen):
    """What B read of A in a recycled container, for the failure message."""
    return f"recycled={channels['recycled']} stats={channels['stats']} control={channels['control'][name]!r} " + (
        f"B saw {channels['seen'][name]!r} (A's secret read back: {secret_seen})"
    )


def test_a_mount_roots_timestamps_carry_nothing_to_the_next_task():
    """/tmp and /workspace are the sandbox user's: it sets their atime and mtime to any value. The reset compares a
    directory's listing, not its times, and removes nothing from an empty root, so the times reach B exactly."""
    channels = channel("timestamps")
    for root in ("/tmp", "/workspace"):
        read_back = TS_SECRET in channels["seen"][root]
        assert not (channels["recycled"] and read_back), _leak(channels, root, read_back)


def test_a_mount_roots_inode_flags_carry_nothing_to_the_next_task():
    """FS_NODUMP_FL and FS_NOATIME_FL are the owner's to set (no capability) and no part of the reset's rows."""
    channels = channel("flags")
    if channels["planted"]["flags"].failure != FailureKind.OK:
        pytest.skip(f"this kernel refused the flags: {channels['planted']['flags'].stderr[-200:]!r}")
    for root in ("/tmp", "/workspace"):
        seen, control = channels["seen"]["flags " + root], channels["control"]["flags " + root]
        assert not channels["recycled"] or seen == control, _leak(channels, "flags " + root, seen != control)


def test_the_system_v_id_counter_carries_nothing_to_the_next_task():
    """Removed objects leave the IPC namespace's id counter where A put it: B's first queue id is A's choice."""
    channels = channel("ipc")
    read_back = channels["seen"]["msgid"] == IPC_SECRET
    assert not (channels["recycled"] and read_back), _leak(channels, "msgid", read_back)


def test_the_loopback_counters_carry_nothing_to_the_next_task():
    """The network namespace's SNMP counters count A's datagrams: B reads the number A sent."""
    channels = channel("udp")
    seen, control = channels["seen"]["udp"], channels["control"]["udp"]
    assert not channels["recycled"] or seen == control, _leak(channels, "udp", seen == UDP_SECRET)


def test_a_time_wait_socket_does_not_make_an_honest_next_task_fail_to_bind_its_port():
    """A connection A closed first waits 60 s in TIME_WAIT in the network namespace: B sees it in /proc/net/tcp,
    and an honest B that binds that port (a test server, no SO_REUSEADDR) fails with EADDRINUSE."""
    channels = channel("time_wait")
    assert not channels["recycled"] or channels["seen"]["bind"] == "ok", _leak(channels, "bind", False)


def test_a_time_wait_socket_does_not_show_in_the_next_tasks_proc_net_tcp():
    channels = channel("time_wait")
    assert not channels["recycled"] or channels["seen"]["tcp"] == channels["control"]["tcp"], _leak(
        channels, "tcp", True
    )


def test_a_time_wait_socket_over_ipv6_does_not_show_in_the_next_tasks_proc_net_tcp6():
    channels = channel("time_wait6")
    seen, control = channels["seen"], channels["control"]
    assert not channels["recycled"] or (seen["tcp6"], seen["bind"]) == (control["tcp6"], "ok"), _leak(
        channels, "tcp6", True
    )


def test_a_listener_kept_alive_in_flight_does_not_reach_the_next_task():
    """Killing every process leaves a listener whose descriptor is in flight in a unix socket cycle: B would see it
    in /proc/net/tcp and fail to bind its port. The kernel's collector frees the cycle 0.05-0.5 s after the exit, so
    the reset either refuses the container (the cycle's unix sockets and the listener's count are still there) or
    recycles a clean one: which of the two, the timing decides; both are safe."""
    channels = channel("listener_in_flight")
    seen, control = channels["seen"], channels["control"]
    assert not channels["recycled"] or (seen["tcp"], seen["bind"]) == (control["tcp"], "ok"), _leak(
        channels, "tcp", True
    )


# The reset's own reading of the namespace's TCP sockets, run by a candidate in a workspace (the image's runner
# modules are readable): the channel tests above pass whichever reading refuses a reset (a TIME_WAIT socket moves
# /proc/net/snmp too), so this shows the socket counts themselves see each socket, where nothing else does.
READ_TCP_COUNTS = """
import json, socket, sys
sys.path.append("/opt/gym")
from sandbox.runner.reset import _kernel_counters
def changed(before):
    after = _kernel_counters()
    return sorted(path for path in after if after[path] != before[path])
seen = {}
for name, family, host in (("listener", socket.AF_INET, "127.0.0.1"), ("listener6", socket.AF_INET6, "::")):
    before = _kernel_counters()
    server = socket.socket(family)
    server.bind((host, 4243))
    server.listen()
    seen[name] = changed(before)
    server.close()
    seen[name + " closed"] = changed(before)
before = _kernel_counters()
"""
READ_TCP_COUNTS += PLANT_TIME_WAIT + 'seen["time_wait"] = changed(before)\nprint(json.dumps(seen))\n'


def test_the_resets_socket_counts_see_a_listener_over_either_family_and_a_time_wait_socket():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            async with pool.acquire("reader") as ws:
                return await run(ws, READ_TCP_COUNTS)

    result = trio.run(main)
    assert result.failure == FailureKind.OK, result
    seen = json.loads(result.stdout)
    # a listener sends no segment: only its count moves, and moves back when it closes
    assert seen["listener"] == ["/proc/net/sockstat"] and seen["listener closed"] == [], seen
    assert seen["listener6"] == ["/proc/net/sockstat6"] and seen["listener6 closed"] == [], seen
    assert "/proc/net/sockstat" in seen["time_wait"], seen  # beside the segment counters


def test_the_pids_cgroup_events_carry_nothing_to_the_next_task():
    """pids.events counts every fork the limit refused, for the container's life: B reads A's count."""
    channels = channel("pids_events")
    seen, control = channels["seen"]["pids_events"], channels["control"]["pids_events"]
    assert not channels["recycled"] or seen == control, _leak(channels, "pids_events", seen == PIDS_EVENTS_SECRET)


# ------------------------------------------------------------------------------------------- reward faking


# Correct, and it stores each answer in /tmp's own mtime (6 bits a test, under a 20-bit mark): no file is left.
LEAKER = """
import os
n = int(input())
MARK, BITS = 0xABCDE, 20
ns = os.stat("/tmp").st_mtime_ns
table = ns >> BITS if ns & ((1 << BITS) - 1) == MARK else 0
table |= (n * 7) << (6 * (n - 1))
stamp = (table << BITS) | MARK
os.utime("/tmp", ns=(stamp, stamp))
print(n * 7)
"""
# Computes nothing: it prints what /tmp's mtime holds for its input.
CHEAT = """
import os
n = int(input())
ns = os.stat("/tmp").st_mtime_ns
print((ns >> (20 + 6 * (n - 1))) & 63 if ns & ((1 << 20) - 1) == 0xABCDE else 0)
"""


def test_a_cheat_cannot_pass_on_answers_an_earlier_candidate_left_in_a_mount_roots_mtime():
    (control, leaker, cheat), stats = grade_in_one_container(CHEAT, LEAKER, CHEAT)
    assert all(t.verdict == Verdict.WRONG_ANSWER for t in control.tests), control  # the cheat alone is wrong
    assert leaker.passed, leaker
    assert stats["recycled"] >= 2 or stats["resets_refused"] >= 1, stats
    assert all(t.verdict == Verdict.WRONG_ANSWER for t in cheat.tests), (stats, cheat)


# ------------------------------------------------------------------------------ the fork server's zombies

# The fork server's child clones siblings (CLONE_PARENT): their parent is the fork server, which reaps only the
# child it forked. They exit at once, zombies nobody reaps, each holding a pid of the pids limit. A takes every
# pid the limit leaves (no fork is refused: A's own call is "ok").
ZOMBIES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def read(name):
    for path in ("/sys/fs/cgroup/pids/" + name, "/sys/fs/cgroup/" + name):
        try:
            return int(open(path).read())
        except (OSError, ValueError):
            pass
free = read("pids.max") - read("pids.current")
for _ in range(free):
    if libc.syscall(56, 0x00008000 | 17, 0, 0, 0, 0) == 0:  # clone(CLONE_PARENT | SIGCHLD)
        os._exit(0)
"""
# An honest program that starts a thread (the usual way to get a deep stack in Python contest solutions).
THREADED = """
import threading
threading.Thread(target=print, args=("ok",)).start()
"""


def test_zombies_of_the_fork_server_neither_stay_nor_starve_the_next_task():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("A") as ws:
                first = ws.id
                control = await run(ws, THREADED, fork_server=True)  # honest, in a new container
                planted = await run(ws, ZOMBIES, fork_server=True)
            released = pool.stats()
            async with pool.acquire("B") as ws:
                again = ws.id
                zombies = await run(ws, ZOMBIE_COUNT)
                honest = await run(ws, THREADED, fork_server=True)
            return first, again, control, planted, zombies, honest, released

    first, again, control, planted, zombies, honest, stats = trio.run(main)
    assert control.failure == FailureKind.OK and control.stdout == b"ok\n", control
    assert planted.failure == FailureKind.OK, planted
    if again != first:
        assert stats["resets_refused"] == 1, stats
        return
    assert stats["recycled"] == 1, stats
    assert zombies.stdout == b"0\n", (stats, zombies)  # B sees A's zombies in /proc
    assert honest.failure == FailureKind.OK and honest.stdout == b"ok\n", (stats, honest)  # and cannot start a thread


THREADED_SOLUTION = """
import threading
def main():
    n = int(input())
    print(n * 7)
threading.Thread(target=main).start()
"""
# Correct on every test; on its last one it also takes every free pid with zombies of the fork server.
SABOTEUR = (
    """
n = int(input())
print(n * 7, flush=True)
if n == 6:
"""
    + "\n".join("    " + line for line in ZOMBIES.strip().splitlines())
    + "\n"
)


def test_an_honest_candidate_is_not_failed_by_zombies_an_earlier_candidate_left():
    (control, saboteur, honest), stats = grade_in_one_container(THREADED_SOLUTION, SABOTEUR, THREADED_SOLUTION)
    assert control.passed, control  # the honest program passes in a new container
    assert saboteur.passed, saboteur  # the saboteur passes its own tests
    assert honest.passed, (stats, honest)


# ------------------------------------------------------------------------- the reset's own walk

# A tree deeper than the runner's recursion limit: os.walk (Python 3.11 in the runner image) recurses per level.
DEEP = """
import os
os.chdir("/tmp")
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
"""


def test_a_tree_too_deep_for_the_resets_walk_is_refused_not_raised():
    """op_reset raises RecursionError; the runner answers its generic tool_error body, which ResetResult (extra
    fields forbidden) cannot parse: the ValidationError escapes _recycle (it catches InfraError only) and the
    release's finally, so the container is neither recycled nor destroyed and the pool's lent count never drops."""

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            raised = None
            try:
                async with pool.acquire("A") as ws:
                    first = ws.id
                    planted = await run(ws, DEEP)
            except Exception as exc:  # noqa: BLE001  (what escapes the release is the finding)
                raised = exc
            stats, lent, leaked = pool.stats(), pool._lent, first in pool.live
            async with pool.acquire("B") as ws:
                again = ws.id
                seen = await fingerprint(ws)
            return first, again, planted, raised, stats, lent, leaked, seen

    first, again, planted, raised, stats, lent, leaked, seen = trio.run(main)
    assert planted.failure == FailureKind.OK, planted
    assert raised is None, f"the release raised {type(raised).__name__}: {str(raised)[:300]}"
    assert lent == 0, "the pool still counts the released container as lent: the warm pool never refills"
    assert again != first or stats["recycled"] == 1, stats
    assert again == first or stats["resets_refused"] == 1, stats
    assert not leaked or again == first, "the refused container was never destroyed"
    assert seen["/tmp"][3] == [], seen


WRONG_AND_DEEP = """
import os
n = int(input())
print(0)
if n == 6:
    os.chdir("/tmp")
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
"""


def test_a_wrong_candidate_cannot_mask_its_failure_as_infra_error_with_a_deep_tree():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            grader = Grader(pool, GraderConfig(concurrency=1))
            return await grader.grade(TASK, Submission(task_id=TASK.task_id, completion=fenced(WRONG_AND_DEEP)))

    result = trio.run(main)
    assert not result.infra_error, result
    assert all(t.verdict == Verdict.WRONG_ANSWER for t in result.tests), result


# ------------------------------------------------------------------------------ attacks the reset held

ODD = r"""
import ctypes, os, socket, struct
for root in (b"/tmp", b"/workspace", b"/dev/shm"):
    for name in (b"new\nline", b"\xff\xfe", b" ", b"-", b"..."):
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(b"42")
os.mkdir("/tmp/sticky"); os.chmod("/tmp/sticky", 0o1777)
os.mkdir("/tmp/setgid"); os.chmod("/tmp/setgid", 0o2775)
open("/tmp/setgid/f", "w").write("x")
listener = socket.socket(socket.AF_UNIX)
listener.bind("/tmp/sock")
listener.listen()
os.mkfifo("/dev/shm/fifo")
os.symlink("/opt/gym/sandbox", "/tmp/runner")
os.symlink("/etc", "/workspace/etc")
os.symlink("/nowhere", "/workspace/dangling")
os.mkdir("/workspace/self")
os.symlink("..", "/workspace/self/up")
os.chmod("/workspace/self", 0o500)
open("/workspace/future", "w").write("x")
os.utime("/workspace/future", ns=(2**62, 2**62))
os.makedirs("/tmp/many")
for i in range(21000):  # past the reset's MAX_ENTRIES before it empties them
    open("/tmp/many/%d" % i, "w").close()
rt = ctypes.CDLL("librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
for name in (b"/new\nline", b"/\xff", b"/" + b"q" * 200):
    assert rt.mq_open(name, os.O_CREAT | os.O_RDWR, 0, None) >= 0, ctypes.get_errno()
libc = ctypes.CDLL(None, use_errno=True)
queue = libc.msgget(0x4242, 0o1000 | 0o600)
buf = ctypes.create_string_buffer(512)
assert libc.msgctl(queue, 2, buf) == 0, ctypes.get_errno()  # IPC_STAT
struct.pack_into("II", buf, 4, 0, 0)  # owner and group: root
struct.pack_into("H", buf, 20, 0)  # mode 0
assert libc.msgctl(queue, 1, buf) == 0, ctypes.get_errno()  # IPC_SET: handed to root, unreadable
print("planted")
"""


def test_held_odd_names_sockets_links_sticky_setgid_many_entries_and_ipc_handed_to_root():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("A") as ws:
                first, new = ws.id, await fingerprint(ws)
                planted = await run(ws, ODD)
            released = pool.stats()
            async with pool.acquire("B") as ws:
                again, seen = ws.id, await fingerprint(ws)
            return first, again, new, seen, planted, released

    first, again, new, seen, planted, stats = trio.run(main)
    assert planted.failure == FailureKind.OK and planted.stdout == b"planted\n", planted
    assert seen == new
    assert (again == first and stats["recycled"] == 1) or (again != first and stats["resets_refused"] == 1), stats


CHILD_STATE = """
import json, os, resource, signal, sys
mask = os.umask(0)
os.umask(mask)
print(json.dumps({
    "umask": mask,
    "env": dict(os.environ),
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "nice": os.nice(0),
    "sigterm": str(signal.getsignal(signal.SIGTERM)),
    "print": print.__module__,
    "modules": sorted(sys.modules)[:400],
    "path": sys.path,
    "cwd": os.getcwd(),
    "oom": open("/proc/self/oom_score_adj").read(),
    "fds": sorted(os.listdir("/proc/self/fd")),
}))
"""
POISON_CHILD = """
import builtins, os, resource, signal, sys
os.umask(0)
os.environ["PYTHONPATH"] = "/tmp/evil"
resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
os.nice(19)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
builtins.print = lambda *args, **kwargs: None
sys.modules["json"] = None
sys.path.insert(0, "/tmp")
os.chdir("/tmp")
"""


def test_held_a_fork_server_child_cannot_change_what_the_next_tasks_children_start_with():
    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("A") as ws:
                first = ws.id
                control = await run(ws, CHILD_STATE, fork_server=True)
                poisoned = await run(ws, POISON_CHILD, fork_server=True)
            async with pool.acquire("B") as ws:
                again = ws.id
                seen = await run(ws, CHILD_STATE, fork_server=True)
            return first, again, control, poisoned, seen, pool.stats()

    first, again, control, poisoned, seen, stats = trio.run(main)
    assert control.failure == FailureKind.OK and poisoned.failure == FailureKind.OK, (control, poisoned)
    assert seen.failure == FailureKind.OK, seen
    assert json.loads(seen.stdout) == json.loads(control.stdout)
    assert again == first or stats["resets_refused"] == 1, stats


# ------------------------------------------------------------------- an OOM event that kills nobody

# cgroup v1: the engine marks a container OOMKilled on the memory cgroup's OOM *notification* (containerd's
# eventfd on memory.oom_control), which the kernel sends before it decides whom to kill; the reset only compares
# the oom_kill counter. A task that is already dying when its charge fails gets the notification sent and no kill
# (mem_cgroup_out_of_memory: task_is_dying()). Here: a thread blocked (uninterruptibly) on a pipe's mutex, held by a
# splice into a full socket, is let go by the process's own SIGKILL and then allocates the pipe's pages, dying, with
# the container's memory at its limit (the tmpfs mounts filled, anonymous memory up to the limit).
OOM_EVENT = r"""
import fcntl, mmap, os, signal, socket, sys, threading, time
M = "/sys/fs/cgroup/memory/"
def value(name):
    return int(open(M + name).read())
def spare():
    stat = dict(line.split() for line in open(M + "memory.stat"))
    reclaimable = int(stat["total_inactive_file"]) + int(stat["total_active_file"])
    return value("memory.limit_in_bytes") - value("memory.usage_in_bytes") + reclaimable
chunk = b"\1" * (1 << 20)
for path, mb in (("/workspace/fill", 250), ("/tmp/fill", 62), ("/dev/shm/fill", 15)):
    with open(path, "wb") as handle:
        for _ in range(mb):
            try:
                handle.write(chunk)
            except OSError:
                break
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
r, w = os.pipe()
fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"x" * 4096)
except BlockingIOError:
    pass
threading.Thread(target=lambda: os.splice(r, a.fileno(), 1 << 20), daemon=True).start()
time.sleep(0.3)  # the splice waits for room in the socket, holding the pipe's mutex
target = mmap.mmap(-1, 1 << 20)  # not yet touched: the read faults its pages in, each one charged
reader = threading.Thread(target=lambda: os.readv(r, [target]), daemon=True)
reader.start()
time.sleep(0.3)  # the reader waits for the mutex, uninterruptibly
state = open("/proc/self/task/%d/stat" % reader.native_id).read().rsplit(")", 1)[1].split()[0]
held = []
while spare() > (8 << 20):
    step = min(spare() - (4 << 20), 32 << 20)
    block = mmap.mmap(-1, step)
    for i in range(0, step, 4096):
        block[i] = 1
    held.append(block)
while spare() > (192 << 10):
    block = mmap.mmap(-1, 32 << 10)
    for i in range(0, 32 << 10, 4096):
        block[i] = 1
    held.append(block)
print("reader", state, "spare", spare(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

OOM_CONTROL = "print(open('/sys/fs/cgroup/memory/memory.oom_control').read())"


def test_an_oom_event_that_killed_nobody_does_not_leave_the_engines_oom_mark_on_a_recycled_container():
    from sandbox.workspace import classify_loss

    async def inspect(pool, container_id):
        info = await pool.engine.call("inspect", pool.engine.client.api.inspect_container, container_id)
        return info["State"]

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            async with pool.acquire("A") as ws:
                first = ws.id
                before = await run(ws, OOM_CONTROL)
                attack = await run(ws, OOM_EVENT, timeout_s=120.0)
                await trio.sleep(0.5)  # the engine's event
                after = await run(ws, OOM_CONTROL)
                state_a = await inspect(pool, ws.id)
            released = pool.stats()
            async with pool.acquire("B") as ws:
                again = ws.id
                state_b = await inspect(pool, ws.id)
            return first, again, before, attack, after, state_a, state_b, released

    first, again, before, attack, after, state_a, state_b, stats = trio.run(main)
    if not state_a.get("OOMKilled"):
        pytest.skip(f"no OOM mark this time: {attack.stdout!r} {attack.detail!r} {after.stdout!r}")
    if again != first:
        assert stats["resets_refused"] == 1, stats
        return
    # Recycled with the engine's mark on: a later task whose container is killed from outside is blamed (OOM).
    blamed, why = classify_loss({**state_b, "Running": False, "ExitCode": 137}, answered=True)
    assert not state_b.get("OOMKilled"), (
        f"recycled with OOMKilled set: oom_control before {before.stdout!r} after {after.stdout!r}; "
        f"attack {attack.stdout!r}; a later infra kill is classified {blamed.value}: {why}"
    )
