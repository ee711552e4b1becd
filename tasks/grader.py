"""Grading competitive-programming submissions, one container per task in which no earlier candidate of the same
problem ran.

For one (task, submission):

1. the program is assembled (`tasks.submission.program`) and compiled on the
   host with `compile()` (no execution): a syntax error makes every test
   ``compile_error`` and no container is used;
2. a container is taken from the pool: a new one, or one reset and checked against its start after tasks of
   other problems and inputs (``pool.disjoint_uses``, on by default; `grading_keys`; `sandbox.pool`), the
   program is written to
   ``/workspace/solution.py``, and ALL tests go through ONE runner call
   (``exec_batch``; only a task whose test inputs total more than
   `MAX_BATCH_STDIN_BYTES` is cut into consecutive batches in the same
   container), one process per test, each with the task's time and
   memory limits. Stdin tests run the program; call tests and the assert tests
   the host splits run the grader's driver (`tasks/driver.py`, passed in argv)
   with a per-run nonce: their expected outputs, hidden expected values and
   comparison code never enter the container. Any other assert test runs the
   checker (`tasks/checker.py`): the test's code in a process of its own that
   reaches the candidate's process with plain data only;
3. each result is judged on the host (`tasks.judge`); the container is
   destroyed, or reset for tasks of other problems and inputs.

Timing (``GraderConfig.time_model``, default ``cpu``): a test's limit (the row's, x ``time_scale``,
x the machine's ``speed_factor``, within ``min_time_s``..``max_time_s``) applies to the CPU time (user + sys) of its whole process
tree, read by the runner from the container's cgroup, so a busy machine slows a program down
without failing it. The wall clock is only a backstop (``backstop_factor`` x limit +
``backstop_s``) that ends sleepers and blocked programs as ``time_limit``; after one such kill the
task's remaining tests are not run (each would wait out its own backstop). At the backstop the runner
judges what the kernel says the tree did, not the clock (``sandbox/runner/watch.py``, ``StarvationWatch``):
a tree the host starved of CPU (its most-delayed task waited for a CPU, per ``/proc/.../schedstat``, at
least half the wall time beyond what the tree's own CPU use explains) that did not deprioritize itself
(every task at nice 0, SCHED_OTHER, on all the container's CPUs) runs on, up to
``starved_grace_factor`` x backstop more (cut to its share of what the episode's wall clock leaves), while it
computes or waits for a CPU: it passes, or ends at its CPU limit (``time_limit``); one still starved at
the end of that grace is the host's failure, ``infra_error`` (masked; the detail says how long it waited
for a CPU in how much wall time), never ``time_limit``. A test that ends with
CPU time over its limit by at most ``rerun_margin`` is re-run once, in another workspace (nothing the
first run wrote can speed the second up: a recycled one is reset first), and judged by the re-run (one scheduler hiccup does not flip
a verdict; ``TaskResult.reruns`` counts them), against its limit times how much slower than at its fastest the
machine runs Python at that moment (`machine_slowdown`: CPU time grows on a busy machine), within the
margin; past the margin it is killed, ``time_limit``. ``time_model: wall`` restores a wall-clock deadline per test.

A sandbox failure or a crash of the grader itself marks the task
``infra_error``: reported and counted, never a failed sample. Several tasks
are graded concurrently (``GraderConfig.concurrency``), each in its own
container.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import marshal
import math
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Literal

import trio
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind, Verdict
from sandbox.fleet import FleetPool, open_pool
from sandbox.pool import WorkspacePool
from sandbox.protocol import MAX_DATA, BatchExecRequest, ExecRequest, ExecResult
from tasks.assertion import split as split_assert
from tasks.checking import checker_request, shadowed
from tasks.comparison import Tolerance
from tasks.judge import judge_call, judge_checked, judge_split_assert, judge_stdin
from tasks.result import NOT_RUN, TaskResult, TestResult, summarise
from tasks.submission import Submission, program
from tasks.task import AssertTest, CallTest, StdinTest, Task, TestCase

log = logging.getLogger(__name__)

PROGRAM_PATH = "/workspace/solution.py"
MAX_PROGRAM_BYTES = 1 << 20
# Stdin travels base64-encoded in one runner frame (256 MiB at most): past this total a task's tests go
# in several consecutive batches, still in the same container.
MAX_BATCH_STDIN_BYTES = 48 << 20
STARVED_DETAIL = "starved of CPU by the host"  # how the detail of a test masked for starvation begins


class GraderConfig(BaseModel):
    """How tests are run and compared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tolerance: Tolerance = Field(default_factory=Tolerance, description="float tolerance of output comparison")
    default_time_s: float = Field(4.0, gt=0, description="per-test time limit when the row has none")
    time_model: Literal["cpu", "wall"] = Field(
        "cpu",
        description="cpu: a test's limit is CPU time (user + sys) of its process tree, the wall clock only a "
        "backstop; wall: the limit is a wall-clock deadline (the machine's load counts against the program)",
    )
    backstop_factor: float = Field(
        10.0,
        ge=1,
        description="cpu model: wall-clock backstop = factor x limit + backstop_s "
        "(kills sleepers and blocked programs: time_limit); measured: a test got 1/7 of a core "
        "beside four busy containers on a 2-core machine",
    )
    backstop_s: float = Field(1.0, ge=0, description="cpu model: start-up allowance added to the backstop")
    starved_grace_factor: float | None = Field(
        2.0,
        ge=0,
        description="cpu model: a test the host starved of CPU at its backstop (it waited for a CPU, it did not "
        "sleep; not niced) runs on up to factor x backstop more (cut to its share of what the episode's wall clock leaves), "
        "and one still starved then is infra_error, not time_limit; 0: infra_error at the backstop; "
        "None: starvation is not judged (a starved test is time_limit)",
    )
    rerun_margin: float = Field(
        0.25,
        ge=0,
        description="cpu model: a test ending within (limit, limit x (1 + margin)] "
        "of CPU is re-run once and judged by the re-run; the process is killed past that",
    )
    time_scale: float = Field(1.0, gt=0, description="multiplier on the row's time limit (Python vs C++ limits)")
    speed_factor: float | Literal["auto"] = Field(
        "auto",
        description="multiplier for this machine's speed: auto measures a fixed workload once per process "
        "(`machine_speed_factor`: 1.0 on a machine as fast as the project's reference VM, more on slower ones)",
    )
    min_time_s: float = Field(1.0, gt=0, description="floor of a test's time limit (interpreter start-up counts)")
    max_time_s: float = Field(30.0, gt=0, description="ceiling of a test's time limit")
    default_memory_bytes: int = Field(512 << 20, gt=0, description="per-test RLIMIT_AS when the row has none")
    min_memory_bytes: int = Field(
        96 << 20, gt=0, description="floor of RLIMIT_AS: below this the interpreter itself cannot start"
    )
    output_limit_bytes: int = Field(
        1 << 20,
        gt=0,
        le=MAX_DATA,
        description="stdout+stderr bound per test (raised to twice the expected output when larger)",
    )
    early_stop: bool = Field(
        False, description="stop a task's batch at the first test that crashes or times out (the rest: not_run)"
    )
    concurrency: int = Field(2, ge=1, le=64, description="tasks graded at once, each in its own container")
    python: tuple[str, ...] = Field(("python3", "-I"), min_length=1, description="interpreter argv in the container")
    fork_server: bool = Field(
        True,
        description="run each test in a child of the workspace's fork server (a `python3 -I` started with the "
        "container) instead of a fresh interpreter; a test of another interpreter runs fresh either way",
    )

    @property
    def speed(self) -> float:
        """The speed factor limits are multiplied by (``auto``: measured once per process)."""
        return machine_speed_factor() if self.speed_factor == "auto" else self.speed_factor

    @model_validator(mode="after")
    def _bounds_in_order(self) -> GraderConfig:
        if self.min_time_s > self.max_time_s:
            raise ValueError(f"min_time_s ({self.min_time_s}) exceeds max_time_s ({self.max_time_s})")
        return self


class GradeReport(BaseModel):
    """Totals over submissions, in the shape ``python -m gym grade --json`` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int = Field(description="submissions graded (skipped ones are not counted here: see ``skipped``)")
    passed: int
    infra_errors: int
    tasks: tuple[TaskResult, ...]
    time_model: str = Field("cpu", description="how limits were enforced (GraderConfig.time_model)")
    time_scale: float = Field(1.0, description="multiplier on the rows' limits")
    speed_factor: float = Field(1.0, description="this machine's speed factor the limits were multiplied by")
    reruns: int = Field(0, description="borderline tests re-run, over all tasks")
    skipped: int = Field(0, ge=0, description="submissions not graded (``total`` counts only the graded ones)")
    skipped_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="skipped submissions by reason, e.g. {'unknown task id': 1, 'unparseable row': 1}",
    )

    @classmethod
    def of(
        cls, results: Sequence[TaskResult], config: GraderConfig | None = None, skipped: Mapping[str, int] | None = None
    ) -> GradeReport:
        """Totals of ``results``; ``skipped``: how many submissions were left out, by reason (zeros dropped)."""
        config = config or GraderConfig()
        reasons = {reason: n for reason, n in (skipped or {}).items() if n}
        return cls(
            total=len(results),
            passed=sum(r.passed for r in results),
            infra_errors=sum(r.infra_error for r in results),
            tasks=tuple(results),
            time_model=config.time_model,
            time_scale=config.time_scale,
            speed_factor=config.speed,
            reruns=sum(r.reruns for r in results),
            skipped=sum(reasons.values()),
            skipped_reasons=reasons,
        )


REFERENCE_WORKLOAD_S = 0.25
"""CPU seconds of `_speed_workload` on the project's reference machine (the 2-core VM the README's figures
come from): limits are read as written for a machine that fast."""
SPEED_DEAD_ZONE = 1.15
"""Measured factors under this count as 1.0: a busy machine's caches stretch CPU time a little."""
MAX_SPEED_FACTOR = 4.0


def _speed_workload() -> int:
    total = 0
    for i in range(2_000_000):
        total += i * i % 7
    return total


def _workload_cpu_s() -> float:
    """The least CPU time of three runs of `_speed_workload` in this thread, now: the thread's own CPU time, so
    that the process's other threads (a learner's, an engine's, another grading task's) do not count."""
    best = math.inf
    for _ in range(3):
        started = time.thread_time()
        _speed_workload()
        best = min(best, time.thread_time() - started)
    return best


@cache
def machine_speed_factor() -> float:
    """How much slower this machine runs Python than the reference machine, measured once per process: the
    least CPU time (not wall: load does not count) of three runs of a fixed pure-Python workload over
    REFERENCE_WORKLOAD_S, within [1, MAX_SPEED_FACTOR] (a faster machine never tightens a limit)."""
    best = _workload_cpu_s()
    fastest_reading(best)
    factor = best / REFERENCE_WORKLOAD_S
    factor = 1.0 if factor < SPEED_DEAD_ZONE else min(factor, MAX_SPEED_FACTOR)
    log.info("machine speed factor %.2f (workload %.3fs CPU, reference %.3fs)", factor, best, REFERENCE_WORKLOAD_S)
    return factor


SLOWDOWN_TTL_S = 10.0
"""How long one reading of `machine_slowdown` answers for (a reading costs ~0.5 s of the grader's CPU)."""
_slowdown: tuple[float, float] | None = None  # (monotonic time of the reading, the slowdown read)
_slowdown_lock = threading.Lock()
_fastest: float = math.inf  # the least workload time this process has read
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MIN_READING_S = 0.01
"""A kept reading under this is not believed (the workload is 2 million Python loop iterations)."""


def speed_record() -> Path:
    """Where the least workload time this machine has shown since it booted is kept (the user's cache)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "code-rl-gym" / "machine-speed.json"


def fastest_reading(reading: float) -> float:
    """The least workload time this machine has shown since it booted, ``reading`` included.

    Kept in `speed_record` beside the boot's id, so that a process that only ever runs on a busy machine (a
    trainer, a test worker) still knows how fast the machine runs idle; the record is the host's (no candidate
    reaches the host's files), read bounded, and rewritten only by a faster reading. Any trouble with it leaves
    this process's own least reading."""
    global _fastest
    _fastest = min(_fastest, reading)
    path = speed_record()
    try:
        boot = BOOT_ID.read_text()[:64].strip()
    except OSError:
        return _fastest
    kept = math.inf
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(4096))
        if isinstance(data, dict) and data.get("boot_id") == boot:
            kept = float(data["workload_s"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    if MIN_READING_S <= kept < _fastest:
        _fastest = kept
    elif _fastest < kept:
        spare = path.with_name(f"{path.name}.{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            spare.write_text(json.dumps({"boot_id": boot, "workload_s": _fastest}))
            os.replace(spare, path)
        except OSError:
            spare.unlink(missing_ok=True)
    return _fastest


def machine_slowdown() -> float:
    """How much slower the machine runs Python now than at its fastest since it booted: the workload's least CPU
    time now over `fastest_reading`, at least 1.

    CPU time is not free of load: on a busy machine the same program can need more CPU time (MBPP 123's canonical
    solution: 2.2 s in its container idle, 4.15-4.33 s inside a whole test suite; two busy loops beside it did not
    slow it, and this workload does not see every such load). A test still over its limit
    after its re-run is judged against the limit times this (within the re-run margin), so that an honest
    program near its limit does not fail for what ran beside it. The reading is taken in the grader's process
    after the candidate's processes are gone. One reading answers for SLOWDOWN_TTL_S."""
    global _slowdown
    with _slowdown_lock:  # one reading at a time: two at once would each slow the other
        now = time.monotonic()
        if _slowdown is None or now - _slowdown[0] > SLOWDOWN_TTL_S:
            reading = _workload_cpu_s()
            _slowdown = (now, reading / fastest_reading(reading))
            log.info(
                "machine slowdown %.2f (workload %.3fs CPU now, %.3fs at its fastest)", _slowdown[1], reading, _fastest
            )
        return max(1.0, _slowdown[1])


@cache
def driver_source() -> str:
    return (Path(__file__).parent / "driver.py").read_text()


PRECOMPILED_DRIVER = ("/opt/gym/tasks/driver.py", "/opt/gym/tasks/driver.pyc")
"""Where the runner image keeps this driver's source and its compiled code (images/runner/Dockerfile)."""


@cache
def driver_program(paths: tuple[str, str] = PRECOMPILED_DRIVER) -> str:
    """The ``-c`` program that runs the driver: the image's compiled copy when the image's source is this driver's,
    byte for byte, and the compiled code is of that source (the hash its header carries) and of the interpreter
    running it (the magic number); the driver compiled from the source this program carries otherwise (another
    image, another interpreter, a file missing, damaged or not a regular file).

    Why: compiling the driver is 1.5 ms of every call and assert test in the container (docs/performance.md), and
    loading its compiled code 0.02 ms. Both files are root's and read-only in the image; a candidate can change
    neither, and the checks keep an image built from another checkout from running a driver this host's judges do
    not read. The driver's module runs in a namespace of its own and its ``_main`` is called from this program's
    frame, so a candidate runs as many frames deep as under ``-c`` with the driver's source (recursion room
    unchanged). Written by hand (`importlib` would take the module's path and its caches): the checks are three
    comparisons. Cached: every call and assert test a grader plans takes it, and the file is read once."""
    return _driver_program((Path(__file__).parent / "driver.py").read_bytes(), paths)


@cache
def _driver_program(source: bytes, paths: tuple[str, str]) -> str:
    return (
        "def _load(source, paths):\n"
        "    try:\n"
        "        import _imp, marshal, os, _frozen_importlib_external as external\n"
        "        if any(os.stat(path).st_mode & 0o170000 != 0o100000 for path in paths):  # a FIFO would block\n"
        "            return compile(source, '<string>', 'exec')\n"
        "        with open(paths[0], 'rb') as handle:\n"
        "            same = handle.read(len(source) + 1) == source\n"
        "        with open(paths[1], 'rb') as handle:\n"
        "            compiled = handle.read(4 * len(source) + 65536)\n"
        "        header = external.MAGIC_NUMBER + bytes((1, 0, 0, 0))\n"
        "        header += _imp.source_hash(external._RAW_MAGIC_NUMBER, source)\n"
        "        if same and compiled[:16] == header:\n"
        "            code = marshal.loads(compiled[16:])\n"
        "            if type(code) is type(_load.__code__):\n"
        "                return code\n"
        "    except Exception:\n"
        "        pass\n"
        "    return compile(source, '<string>', 'exec')\n"
        "_driver = {'__name__': '__driver__', '__builtins__': __builtins__}\n"
        f"exec(_load({source!r}, {paths!r}), _driver)\n"
        "del _load\n"
        "_driver['_main']()\n"
    )


@cache
def checker_source() -> str:
    return (Path(__file__).parent / "checker.py").read_text()


def compile_problem(source: str) -> str | None:
    """Why ``source`` does not compile (host-side `compile()`, nothing executed), or None."""
    if len(source.encode("utf-8", errors="replace")) > MAX_PROGRAM_BYTES:
        return f"program larger than {MAX_PROGRAM_BYTES} bytes"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "solution.py", "exec", dont_inherit=True)
    except SyntaxError as err:
        return f"{type(err).__name__}: {err.msg} (line {err.lineno})"
    except (ValueError, RecursionError, MemoryError, OverflowError) as err:
        return f"{type(err).__name__}: {err}"[:200]
    return None


def grading_keys(task: Task) -> frozenset[str]:
    """What a task's grading shows a candidate, as keys: the pool hands a container that graded a task only to tasks
    that share no key with it (`sandbox.pool`, ``pool.disjoint_uses``), so what a candidate leaves in the counters a
    reset cannot put back reaches no later candidate of the same problem or of the same test inputs.

    The keys are coarse on purpose (a key too many only costs a reuse): the statement, whitespace collapsed (the same
    problem under other tests or another id); each stdin input, whitespace collapsed (a program that reads numbers
    meets ``"1\\n"`` and ``"1"`` alike); each call's arguments, canonical (``True``, ``1`` and ``1.0`` alike), whether
    a call test's or a literal call inside an assert (``assert f(1) == 5``, ``assert f(1)==5``, ``assert 5 == f(1)``
    and the call test ``f`` with ``[1]`` meet the candidate with the same call); and each assert's syntax tree
    (spacing and comments aside)."""
    keys = {"problem\0" + " ".join(task.prompt.split())}
    for test in task.tests:
        keys |= _test_keys(test)
    return frozenset(hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32] for key in keys)


def _test_keys(test: TestCase) -> set[str]:
    if isinstance(test, StdinTest):
        return {"input\0" + " ".join(test.input.split())}
    if isinstance(test, CallTest):
        return {"args\0" + _canonical(test.args)}
    try:
        tree = ast.parse(test.source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {"assert\0" + " ".join(test.source.split())}
    keys = {"assert\0" + ast.dump(tree)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            try:
                args = [ast.literal_eval(arg) for arg in node.args]
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                continue
            keys.add("args\0" + _canonical(args))
    return keys


def _canonical(value: object) -> str:
    """A call's arguments as one string, values Python compares equal written alike (bools and integral floats as
    ints, tuples as lists, sets and dict items sorted)."""

    def plain(v: object) -> object:
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if isinstance(v, set | frozenset):
            return sorted((plain(x) for x in v), key=repr)
        if isinstance(v, dict):
            return sorted(([plain(k), plain(x)] for k, x in v.items()), key=repr)
        if isinstance(v, bytes | complex):
            return repr(v)
        return v

    try:
        return json.dumps(plain(value), sort_keys=True, separators=(",", ":"), default=repr)
    except (ValueError, RecursionError):  # a structure too deep to write: its text, still one key
        return repr(value)


def _all(task: Task, verdict: Verdict, detail: str) -> list[TestResult]:
    return [TestResult(index=i, verdict=verdict, detail=detail) for i in range(len(task.tests))]


Judge = Callable[[ExecResult], TestResult]


def _chunks(requests: list[ExecRequest]) -> list[list[ExecRequest]]:
    """All requests in one batch, unless their stdin would overflow a runner frame (huge generated tests)."""
    chunks: list[list[ExecRequest]] = [[]]
    size = 0
    for request in requests:
        if chunks[-1] and size + len(request.stdin) > MAX_BATCH_STDIN_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(request)
        size += len(request.stdin)
    return chunks


class Grader:
    """Grades submissions through a `WorkspacePool` (one fresh container per task)."""

    def __init__(
        self,
        pool: WorkspacePool | FleetPool | None,
        config: GraderConfig | None = None,
        program_path: str = PROGRAM_PATH,
    ):
        self.pool = pool  # None only for planning without a sandbox (the bench's bare-subprocess baseline)
        self.config = config or GraderConfig()
        self.program_path = program_path

    # ------------------------------------------------------------ planning

    def limits(self, task: Task) -> tuple[float, int]:
        """``(time_s, memory_bytes)`` of each of the task's tests."""
        config = self.config
        time_s = (task.limits.time_s or config.default_time_s) * config.time_scale * config.speed
        time_s = min(max(time_s, config.min_time_s), config.max_time_s)
        memory = max(task.limits.memory_bytes or config.default_memory_bytes, config.min_memory_bytes)
        return time_s, memory

    def deadlines(self, time_s: float) -> dict[str, float]:
        """The ExecRequest fields that enforce a test limit of ``time_s``: a wall-clock deadline (wall model),
        or a CPU limit of the process tree with a wall-clock backstop (cpu model)."""
        config = self.config
        if config.time_model == "wall":
            return {"timeout_s": time_s}
        backstop = time_s * config.backstop_factor + config.backstop_s
        grace = None if config.starved_grace_factor is None else backstop * config.starved_grace_factor
        return {"timeout_s": backstop, "cpu_limit_s": time_s * (1 + config.rerun_margin), "starved_grace_s": grace}

    def _driver(self, request: dict, time_s: float, memory: int, source: str | None = None) -> tuple[ExecRequest, str]:
        """The process that runs the driver (or, with ``source``, another grader program) on ``request``."""
        nonce = secrets.token_hex(16)
        payload = marshal.dumps({"nonce": nonce, "program": self.program_path, **request}, 4)
        # -I for the checker whatever the config says: its imports must never come from the writable cwd
        isolated = [] if source is None or "-I" in self.config.python else ["-I"]
        exec_request = ExecRequest(
            argv=[*self.config.python, *isolated, "-c", source or driver_program()],
            stdin=payload,
            fork_server=self.config.fork_server,
            memory_limit_bytes=memory,
            output_limit_bytes=self.config.output_limit_bytes,
            **self.deadlines(time_s),
        )
        return exec_request, nonce

    def plan(self, task: Task, index: int, test: TestCase) -> tuple[ExecRequest | None, Judge]:
        """The process that runs ``test`` and the host-side judge of its result (no process: refused)."""
        time_s, memory = self.limits(task)
        tolerance = self.config.tolerance
        if task.graded_as_floats:  # a tolerant checker compares numbers as numbers: an expected `1` accepts `1.0`
            tolerance = tolerance.model_copy(update={"numbers": True})
        if isinstance(test, StdinTest):
            limit = max(self.config.output_limit_bytes, 2 * len(test.output.encode()) + 4096)
            if limit > MAX_DATA:  # no reply can carry an output this long: the row cannot be graded
                return None, lambda r: TestResult(
                    index=index,
                    verdict=Verdict.INFRA_ERROR,
                    detail=f"expected output of {len(test.output.encode())} bytes passes the sandbox's "
                    f"data bound ({MAX_DATA // 2 - 4096} bytes)",
                )
            request = ExecRequest(
                argv=[*self.config.python, "solution.py"],
                stdin=test.input.encode(),
                fork_server=self.config.fork_server,
                memory_limit_bytes=memory,
                output_limit_bytes=limit,
                **self.deadlines(time_s),
            )
            return request, lambda r: judge_stdin(index, r, test, tolerance)
        if isinstance(test, CallTest):
            request, nonce = self._driver({"mode": "call", "fn_name": task.fn_name, "args": test.args}, time_s, memory)
            return request, lambda r: judge_call(index, r, test, nonce, tolerance)
        assert isinstance(test, AssertTest)
        shared = {"setup": task.setup_code, "candidate": task.fn_name if task.source_format == "humaneval" else None}
        candidates = frozenset({"candidate", "Solution"} | ({task.fn_name} if task.fn_name else set()))
        split = None if shadowed(task, test) else split_assert(test.source, candidates)
        if split is None:
            # The test's own code runs in the checker, a process the candidate never shares: the candidate's
            # functions are proxies there that cross the process boundary with plain data only.
            checked = {**checker_request(task, test), "driver": driver_program(), "python": list(self.config.python)}
            request, nonce = self._driver(checked, time_s, memory, checker_source())
            return request, lambda r: judge_checked(index, r, nonce)
        request, nonce = self._driver({"mode": "eval", "exprs": list(split.leaves), **shared}, time_s, memory)
        return request, lambda r: judge_split_assert(index, r, split, nonce)

    # ------------------------------------------------------------ grading

    async def grade(self, task: Task, submission: Submission) -> TaskResult:
        """Grade one submission; never raises for anything the candidate or the sandbox does."""
        started = time.monotonic()
        try:
            source = program(task, submission)
            problem = compile_problem(source)
            if problem is not None:
                return summarise(task.task_id, _all(task, Verdict.COMPILE_ERROR, problem), problem)
            tests, reruns = await self._run(task, source)
        except Exception as err:  # a grader crash is infrastructure, never a reward of 0
            log.exception("grading %s crashed", task.task_id)
            return summarise(task.task_id, _all(task, Verdict.INFRA_ERROR, f"grader crash: {err!r}"[:200]))
        return summarise(task.task_id, tests, wall_s=time.monotonic() - started, reruns=reruns)

    async def _run(self, task: Task, source: str) -> tuple[list[TestResult], int]:
        """Per-test results and how many tests were re-run."""
        plans = [self.plan(task, i, test) for i, test in enumerate(task.tests)]
        if any(request is None for request, _ in plans):  # the task is refused for reward: nothing runs
            return [
                judge(ExecResult())
                if request is None
                else TestResult(index=i, verdict=NOT_RUN, detail="the task is refused for reward")
                for i, (request, judge) in enumerate(plans)
            ], 0
        if self.pool is None:
            raise RuntimeError("this Grader has no pool: it can plan tests but not run them")
        requests = [request for request, _ in plans]
        budget = self.budget(requests, grace=False)
        keys = grading_keys(task)  # one reading of the task for the run and a re-run alike
        outcomes = await self._execute(task, source, requests, budget, keys)
        if isinstance(outcomes, str):
            return _all(task, Verdict.INFRA_ERROR, outcomes), 0
        borderline = [
            i for i, (request, outcome) in enumerate(zip(requests, outcomes)) if self._borderline(request, outcome)
        ]
        if borderline:  # once, in another workspace: nothing the first run left behind (files) helps the re-run
            again = await self._execute(task, source, [requests[i] for i in borderline], budget, keys)
            if isinstance(again, str):
                return _all(task, Verdict.INFRA_ERROR, f"re-running borderline tests: {again}"), len(borderline)
            for i, outcome in zip(borderline, again):
                outcomes[i] = outcome
        slack = 1.0  # how much slower than its limits assume the machine is, read when a re-run is over too
        if any(self._borderline(requests[i], outcomes[i]) for i in borderline):
            slack = min(await trio.to_thread.run_sync(machine_slowdown), 1 + self.config.rerun_margin)
        stopped = len(outcomes) < len(plans)
        slept = stopped and outcomes and deadline_kill(requests[len(outcomes) - 1], outcomes[-1])
        if stopped and not self.config.early_stop and not slept:
            raise RuntimeError(f"runner returned {len(outcomes)} results for {len(plans)} tests")
        results = [
            self._verdict(i, judge, request, result, slack)
            for i, ((request, judge), result) in enumerate(zip(plans, outcomes))
        ]
        why = "an earlier test slept past its wall-clock backstop" if slept else "early stop"
        if slept and outcomes[-1].starved:
            why = "an earlier test was starved of CPU by the host past its wall-clock backstop"
        results += [TestResult(index=i, verdict=NOT_RUN, detail=why) for i in range(len(outcomes), len(plans))]
        return results, len(borderline)

    async def _execute(
        self, task: Task, source: str, requests: list[ExecRequest], budget: float, keys: frozenset[str]
    ) -> list[ExecResult] | str:
        """The results of ``requests`` in a workspace holding the program, or why the sandbox could not run them.

        ``budget``: the task's wall seconds without starvation grace; each test's grace is cut to its share of
        the room the episode's wall clock leaves past it (starved tests run on, but never past the episode).
        ``keys``: the task's `grading_keys`, which the pool's disjoint recycling reads."""
        async with self.pool.acquire(owner=f"grade:{task.task_id}", keys=keys) as ws:
            episode = ws.config.episode.wall_s
            if budget >= episode:
                return f"tests need up to {budget:.0f}s, above the episode budget of {episode:.0f}s"
            # a starved test may run on only into the room the episode leaves, and the graces of all the task's
            # tests together fit in it (each runs on only while it is starved, but N of them could in turn)
            requests = [_with_grace(request, (episode - budget) / len(requests)) for request in requests]
            written = await ws.write_file(self.program_path, source.encode())
            if written.failure != FailureKind.OK:
                return f"writing the program: {written.failure.value}: {written.detail}"
            return await self._batches(ws, requests)

    def budget(self, requests: Sequence[ExecRequest], grace: bool = True) -> float:
        """Wall seconds a task's tests need: the sum of their limits (cpu model: plus one backstop and, with
        ``grace``, the time a starved test may run on past it, since a backstop kill ends the batch)."""
        if self.config.time_model == "wall":
            return sum(request.timeout_s or 0.0 for request in requests)
        limits = sum(self._limit(request) or 0.0 for request in requests)
        return limits + max((r.timeout_s or 0.0) + ((r.starved_grace_s or 0.0) if grace else 0.0) for r in requests)

    async def _batches(self, ws, requests: list[ExecRequest]) -> list[ExecResult]:
        """Run ``requests`` in as few runner calls as their stdin allows; stops where the runner stopped."""
        outcomes: list[ExecResult] = []
        stop = self.config.time_model == "cpu"
        for chunk in _chunks(requests):
            batch = await ws.exec_batch(
                BatchExecRequest(items=chunk, stop_on_failure=self.config.early_stop, stop_on_deadline=stop)
            )
            outcomes += batch.results
            if len(batch.results) < len(chunk):
                break
        return outcomes

    def _borderline(self, request: ExecRequest, outcome: ExecResult, slack: float = 1.0) -> bool:
        """Ended with CPU time over the limit (times ``slack``), within the margin (cpu model)."""
        limit = self._limit(request)
        return limit is not None and outcome.failure == FailureKind.OK and outcome.cpu_s > limit * slack

    def _limit(self, request: ExecRequest) -> float | None:
        if request.cpu_limit_s is None:
            return None
        return request.cpu_limit_s / (1 + self.config.rerun_margin)

    def _verdict(
        self, index: int, judge: Judge, request: ExecRequest, result: ExecResult, slack: float = 1.0
    ) -> TestResult:
        """``slack``: `machine_slowdown` when a re-run ended over its limit too (1.0 otherwise)."""
        limit = self._limit(request)
        if result.starved and limit is not None and deadline_kill(request, result):  # masked, never scored
            return TestResult(
                index=index,
                verdict=Verdict.INFRA_ERROR,
                wall_s=round(result.wall_s, 4),
                cpu_s=round(result.cpu_s, 4),
                detail=f"{STARVED_DETAIL}: waited {result.run_delay_s or 0.0:.2f}s for a CPU in "
                f"{result.wall_s:.2f}s of wall time, {result.cpu_s:.2f}s of CPU used (limit {limit:.2f}s)",
            )
        if self._borderline(request, result, slack):  # still over its limit after the re-run
            busy = f" (x{slack:.2f} for a machine that slow now)" if slack > 1.0 else ""
            return TestResult(
                index=index,
                verdict=Verdict.TIME_LIMIT,
                wall_s=round(result.wall_s, 4),
                cpu_s=round(result.cpu_s, 4),
                detail=f"{result.cpu_s:.2f}s CPU over the limit of {limit:.2f}s{busy}, twice",
            )
        return _judged(index, judge, result)

    async def grade_many(
        self, pairs: Sequence[tuple[Task, Submission]], on_result: Callable[[TaskResult], object] | None = None
    ) -> list[TaskResult]:
        """Grade every pair, ``config.concurrency`` at a time; results in input order.

        ``on_result(result)`` is called as each task's grading finishes (the CLI's progress bar)."""
        results: list[TaskResult | None] = [None] * len(pairs)
        limiter = trio.CapacityLimiter(self.config.concurrency)

        async def one(i: int, task: Task, submission: Submission) -> None:
            async with limiter:
                results[i] = await self.grade(task, submission)
                log.debug(
                    "graded %d/%d: %s passed=%s",
                    sum(r is not None for r in results),
                    len(pairs),
                    task.task_id,
                    results[i].passed,
                )
                if on_result is not None:
                    on_result(results[i])

        async with trio.open_nursery() as nursery:
            for i, (task, submission) in enumerate(pairs):
                nursery.start_soon(one, i, task, submission)
        return [r for r in results if r is not None]


def deadline_kill(request: ExecRequest, result: ExecResult) -> bool:
    """Killed at its wall-clock deadline (not at its CPU limit, which comes first when the program computes,
    and may come past the deadline when a starved test ran on).

    Judged from the result, not from ``request.timeout_s``: the workspace cuts a deadline to what the episode's wall
    clock leaves, and the runner stops a batch at that deadline; a program that slept the episode away was killed
    there, short of the request's deadline, and the grader took the missing results for a runner fault (a crash,
    masked as ``infra_error``)."""
    return (
        result.failure == FailureKind.TIMEOUT
        and request.timeout_s is not None
        and not (request.cpu_limit_s is not None and result.cpu_s > request.cpu_limit_s)
    )


def _with_grace(request: ExecRequest, room: float) -> ExecRequest:
    """``request`` with its starvation grace cut to ``room`` seconds."""
    if request.starved_grace_s is None or request.starved_grace_s <= room:
        return request
    return request.model_copy(update={"starved_grace_s": max(room, 0.0)})


def _judged(index: int, judge: Judge, result: ExecResult) -> TestResult:
    """The judge's verdict; a judge that cannot read the candidate's output (an integer past Python's
    digit limit, nesting past the recursion limit, ...) is the candidate's wrong answer, never a crash
    of the grader that would mask the sample."""
    try:
        return judge(result)
    except Exception as err:  # anything the candidate's bytes can make a host-side parser raise
        log.info("judge of test %d could not read the output: %r", index, err)
        return TestResult(
            index=index,
            verdict=Verdict.WRONG_ANSWER,
            wall_s=round(result.wall_s, 4),
            detail=f"output the judge cannot read: {type(err).__name__}: {err}"[:200],
        )


def pair_submissions(
    tasks: Sequence[Task], submissions: Sequence[Submission]
) -> tuple[list[tuple[Task, Submission]], list[str]]:
    """``(pairs, unknown task ids)``: each submission with its task, in submission order."""
    by_id = {task.task_id: task for task in tasks}
    pairs = [(by_id[s.task_id], s) for s in submissions if s.task_id in by_id]
    unknown = sorted({s.task_id for s in submissions if s.task_id not in by_id})
    return pairs, unknown


def grade_pairs(
    pairs: Sequence[tuple[Task, Submission]],
    config: GraderConfig,
    sandbox: SandboxConfig,
    on_result: Callable[[TaskResult], object] | None = None,
) -> list[TaskResult]:
    """Grade ``pairs`` with a pool of its own (synchronous entry point for the CLI and the bench)."""

    async def main() -> list[TaskResult]:
        async with open_pool(sandbox) as pool:
            return await Grader(pool, config).grade_many(pairs, on_result)

    return trio.run(main)
