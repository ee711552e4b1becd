"""Resources: bombs, floods and hogs end as a classified failure inside their budget.

The observation is the runner's ``FailureKind`` (kernel counters: pids.events,
oom_kill, statvfs, the deadline), never the program's own text. The bombs are
real but capped (about 6-8x the default pids limit): far above any sane
limit, so reaching the cap is an escape, yet a weakened run (no pids limit)
cannot exhaust this machine's pid space (pid_max may be 32768 and shared).
Bombs and hogs run alone, with a latency probe in a neighbour workspace; the CPU hog's
verdict rests on its container's own CPU time against its limit (``cpu_account``).
"""

from __future__ import annotations

from sandbox.killtest.attack import Attack, Program

PIDS = frozenset({"pids"})


def _memory_bomb(name: str, goal: str, source: str) -> Attack:
    # Near the limit the kernel reclaims page cache before it OOM-kills: that can take seconds.
    return _resource(name, goal, "python", source, ("oom",), timeout_s=20)


def _resource(name: str, goal: str, lang: str, source: str, expected: tuple[str, ...], **options) -> Attack:
    kept = {"neighbour": options.pop("neighbour", "none"), "accounting": options.pop("accounting", "none")}
    kept["breaks_without"] = options.pop("weak", frozenset())
    program = Program(lang=lang, source=source, expected=expected, observe=options.pop("observe", "failure"), **options)
    return Attack(name=name, group="resources", goal=goal, program=program, **kept)


ATTACKS = (
    _resource(
        "fork_bomb_shell",
        "bash fork bomb: a binary tree of subshells 8 levels deep (766 processes)",
        "bash",
        'bomb() { if [ "$1" -lt 8 ]; then bomb $(($1 + 1)) & bomb $(($1 + 1)) & wait; else sleep 3; fi; }\nbomb 0\n',
        ("pids_limit",),
        timeout_s=6,
        neighbour="probe",
        weak=PIDS,
    ),
    _resource(
        "fork_bomb_python",
        "python fork bomb: every process forks in a loop, 2^10 processes",
        "python",
        """
for _ in range(10):
    try:
        os.fork()
    except OSError:
        pass
os.execv("/bin/sleep", ["sleep", "3"])  # the bomb's leaves hold their pid, not 1024 copies of the interpreter
""",
        ("pids_limit",),
        timeout_s=6,
        neighbour="probe",
        weak=PIDS,
    ),
    _resource(
        "thread_bomb",
        "start 1000 threads in one process",
        "python",
        """
import threading, time
threading.stack_size(64 << 10)
started = 0
try:
    for _ in range(1000):
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
        started += 1
except RuntimeError as exc:
    report("bounded", "%d threads, then %s" % (started, exc))
    time.sleep(3)  # hold the threads: the neighbour probe measures a bomb at its limit
    sys.exit(1)
report("unbounded", "%d threads started" % started)
time.sleep(3)
""",
        ("pids_limit",),
        timeout_s=6,
        neighbour="probe",
        weak=PIDS,
    ),
    _memory_bomb(
        "memory_heap",
        "allocate heap until something stops it",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
    ),
    _memory_bomb(
        "memory_mmap",
        "map and touch anonymous memory until something stops it",
        """
import mmap
block = b"\\x01" * (32 << 20)
maps = []
while True:
    maps.append(mmap.mmap(-1, 32 << 20))
    maps[-1].write(block)  # touch every page of the mapping
""",
    ),
    _memory_bomb(
        "memory_memfd",
        "grow in-memory files (memfd), each kept under RLIMIT_FSIZE, until something stops it",
        """
block = b"x" * (8 << 20)
files = []
while True:
    files.append(os.memfd_create("bomb"))
    for _ in range(16):  # 128 MiB per file: below the file-size limit, so only memory can stop it
        os.write(files[-1], block)
""",
    ),
    _resource(
        "memory_shm",
        "fill /dev/shm (tmpfs pages outside the workspace)",
        "python",
        """
written = 0
block = b"x" * (1 << 20)
try:
    with open("/dev/shm/fill", "wb") as handle:
        while True:
            handle.write(block)
            handle.flush()
            written += 1
except OSError as exc:
    report("bounded", "%d MiB written, then %s" % (written, errname(exc.errno)))
""",
        ("bounded", "oom", "disk_full"),
        observe="report",
    ),
    Attack(
        name="ipc_memory",
        group="resources",
        goal="park 300 MiB in System V shared memory and message queues, then fill the tmpfs in a later call",
        program=Program(
            lang="python",
            source="""
LIBC.shmat.restype = ctypes.c_void_p
for _ in range(3):
    ctypes.memset(LIBC.shmat(LIBC.shmget(0, 90 << 20, 0o1600), None, 0), 1, 90 << 20)
message = ctypes.create_string_buffer(8 + 8000)
ctypes.c_long.from_buffer(message).value = 1
queues = [LIBC.msgget(0, 0o1600) for _ in range(1500)]
sent = sum(LIBC.msgsnd(q, message, 8000, 0o4000) == 0 for q in queues for _ in range(2))
report("planted", "3 x 90 MiB shared memory, %d messages of 8000 bytes" % sent)
""",
            expected=("planted",),
            timeout_s=30,
        ),
        after=Program(
            lang="bash",
            source="""
head -c 250M /dev/zero > /workspace/pad; head -c 64M /dev/zero > /tmp/pad
report alive "runner answered with the tmpfs full: $(cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null) bytes used"
""",
            expected=("alive",),
            timeout_s=30,
        ),
    ),
    _resource(
        "disk_fill",
        "fill the workspace disk with dd",
        "bash",
        "dd if=/dev/zero of=/workspace/fill bs=1M count=4096\n",
        ("disk_full",),
    ),
    _resource(
        "disk_fill_tmp",
        "fill /tmp with dd",
        "bash",
        "dd if=/dev/zero of=/tmp/fill bs=1M count=4096\n",
        ("disk_full",),
    ),
    _resource(
        "inode_exhaustion",
        "create empty files until the inode budget is spent",
        "bash",
        "mkdir -p /workspace/inodes && cd /workspace/inodes && for i in $(seq 1 200000); do : > f$i || exit 1; done\n",
        ("disk_full",),
        timeout_s=20,
    ),
    _resource(
        "file_size_limit",
        "write one file past RLIMIT_FSIZE (sparse: seek 1 GiB, then write)",
        "bash",
        "dd if=/dev/zero of=/workspace/huge bs=1M seek=1024 count=1\n",
        ("disk_full",),
    ),
    _resource(
        "fd_exhaustion",
        "open files until the descriptor table is full",
        "python",
        """
fds = []
try:
    while len(fds) < 1 << 20:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    report("bounded" if len(fds) < 1 << 16 else "unbounded", "%d descriptors, then %s" % (len(fds), errname(exc.errno)))
else:
    report("unbounded", "%d descriptors" % len(fds))
""",
        ("bounded",),
        observe="report",
    ),
    _resource("flood_lines", "print lines forever", "bash", "yes killtest\n", ("output_truncated",)),
    _resource(
        "flood_one_line",
        "print one endless line without a newline",
        "python",
        "block = 'x' * (1 << 16)\nwhile True:\n    sys.stdout.write(block)\n",
        ("output_truncated",),
    ),
    _resource("flood_binary", "print endless binary bytes with NULs", "bash", "cat /dev/zero\n", ("output_truncated",)),
    _resource("flood_stderr", "flood stderr instead of stdout", "bash", "yes killtest >&2\n", ("output_truncated",)),
    _resource(
        "cpu_hog",
        "busy-loop on twice as many processes as there are cores",
        "python",
        """
for _ in range(2 * (os.cpu_count() or 2) - 1):
    if os.fork() == 0:
        break
while True:
    pass
""",
        ("timeout",),
        timeout_s=4,
        neighbour="probe",
        accounting="cpu",
        weak=frozenset({"cpu"}),
    ),
    _resource(
        "endless_loop", "loop forever in one process", "python", "while True:\n    pass\n", ("timeout",), timeout_s=2
    ),
    _resource("sleep_forever", "sleep forever", "bash", "sleep infinity\n", ("timeout",), timeout_s=2),
    _resource(
        "stdin_block",
        "block reading stdin (the runner closes it: EOF, not a hang)",
        "bash",
        "read -r line; cat; python3 -c 'import sys; sys.stdin.buffer.read()'\n",
        ("ok", "timeout"),
        timeout_s=3,
    ),
    _memory_bomb(
        "runner_oom_shm",
        "park System V shared memory (it outlives processes, so killing the caller frees nothing) until 1 MiB "
        "is left, then print 1 MiB the runner must buffer: the OOM killer's next victim is the runner "
        "(a lost runner once meant infra_error: masked)",
        """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def read(names):
    for name in names:
        try:
            return int(open("/sys/fs/cgroup/" + name).read())
        except (OSError, ValueError):
            continue
    return None
limit = read(("memory/memory.limit_in_bytes", "memory.max"))
while limit - read(("memory/memory.usage_in_bytes", "memory.current")) > (1 << 20):
    ident = libc.shmget(0, 8 << 20, 0o1600)
    if ident < 0:
        break
    addr = libc.shmat(ident, None, 0)
    ctypes.memset(addr, 1, 8 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
os.write(1, b"x" * (1 << 20))
""",
    ),
    _resource(
        "ipc_id_flood",
        "create System V message queues, segments and semaphore sets until refused: their clean-up after "
        "the call must stay inside the call's bounds",
        "python",
        """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
counts = []
for make in (lambda: libc.msgget(0, 0o1600), lambda: libc.shmget(0, 4096, 0o1600), lambda: libc.semget(0, 1, 0o1600)):
    made = 0
    while made < 40000 and make() >= 0:
        made += 1
    counts.append(made)
report("bounded" if max(counts) <= 4096 else "unbounded", "msg/shm/sem identifiers: %s" % counts)
""",
        ("bounded",),
        observe="report",
        timeout_s=20,
    ),
)
