"""Grading a math answer on the host: ``tasks/math/check.py`` in its own process, under a deadline.

The answer is the text of the policy's final-channel message; nothing of it runs in a container,
so nothing is compared inside one (the candidate never sees the gold either way). math-verify
parses with sympy, which a crafted expression (a power tower, a 10^6-term sum) can keep busy for
minutes or grow without bound, so the check runs in a child process with an address-space limit
and is killed once it has used ``timeout_s`` of CPU after it read the gold: a ``time_limit`` or ``memory_limit``
verdict, the candidate's failure, scored 0. The limit is CPU time, as the CP grader's: a loaded host stretches
the wall clock, never the answer's verdict (an honest answer nested 63 deep takes 4 s idle and ran past a 20 s
wall-clock deadline at load average 7). The wall clock is a backstop (``backstop_factor`` x ``timeout_s``): a check
still running then is ``time_limit`` when it ran or slept, ``infra_error`` (masked) when the host kept it waiting
for a CPU for at least half that time (its threads' run delay, ``/proc/PID/task/*/schedstat``). Its start (the process, sympy's import, the gold) is the host's and the
task's time, bounded apart by ``start_timeout_s``: on a loaded host a slow start never eats the answer's
time (a fresh-clone CI under load once spent a 3 s limit on sympy's import and masked the answer). The child is
forked from the process's one fork server (`tasks.math.forkserver`: math-verify imported once; `bench math`
measures both ways), or, with ``fork_server: false``, is a fresh interpreter; the blame below is the same for
both. An answer longer than ``max_chars`` is refused without starting the check.

One ``TaskResult`` with one test: ``passed`` when the answer is equivalent to the gold. Blame rests
on how far the check got, not on what it printed: the check writes ``GOLD_READ`` once the gold
parsed, so a check that cannot start, or that fails, dies or hangs before that line (a gold it
cannot read, a broken host), is ``infra_error`` (masked); after it, a hang is ``time_limit``, a kill
or ``MemoryError`` ``memory_limit`` and any other death ``runtime_error``: the answer's doing, scored 0.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from sandbox.failure import Verdict
from tasks.judge import TestResult
from tasks.math.check import GOLD_READ
from tasks.math.forkserver import ForkServer
from tasks.math.problem import MathTask
from tasks.result import TaskResult

CHECK = Path(__file__).with_name("check.py")
POLL_S = 0.02  # how often the check's stderr is read for GOLD_READ
FORK_SERVER = ForkServer()  # the process's one server, started by its first check


class MathGraderConfig(BaseModel):
    """Bounds of one math-verify check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(
        20.0, gt=0, description="CPU time the answer's check may use, from the moment the gold is read."
    )
    backstop_factor: float = Field(
        5.0,
        ge=1,
        description="Wall-clock backstop of the answer's check: factor x timeout_s from the gold on; a check the host "
        "kept waiting for a CPU for half of it is infra_error, any other still running is time_limit.",
    )
    start_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Wall-clock bound on the check's start: the process, its imports and reading the gold (the host's "
        "and the task's time: the answer is not looked at yet, so a loaded host cannot turn its slowness into the "
        "answer's time_limit); past it the check is infra_error.",
    )
    memory_mb: int = Field(2048, ge=256, description="Address-space limit of the check process.")
    max_chars: int = Field(512, ge=1, description="Longest answer read; a longer one is wrong unread.")
    max_answers: int = Field(8, ge=1, description="Most separate answers a reply may state before it is refused.")
    concurrency: int = Field(2, ge=1, description="Checks run at once.")
    fork_server: bool = Field(
        True,
        description="Fork each check from one process that imported math-verify once (`tasks.math.forkserver`; "
        "`bench math` compares both); false starts a fresh interpreter per check.",
    )


class MathGrader:
    """Checks final answers against a task's gold (see the module docstring)."""

    def __init__(self, config: MathGraderConfig | None = None) -> None:
        self.config = config or MathGraderConfig()
        self._limiter = trio.CapacityLimiter(self.config.concurrency)

    async def grade(self, task: MathTask, answer: str) -> TaskResult:
        started = time.monotonic()
        verdict, detail = await self._check(task.gold, answer)
        wall = round(time.monotonic() - started, 6)
        if verdict == "infra_error":
            return TaskResult(
                task_id=task.task_id,
                passed=False,
                fraction=0.0,
                infra_error=True,
                tests=(TestResult(index=0, verdict=Verdict.INFRA_ERROR, detail=detail),),
                detail=detail,
                wall_s=wall,
            )
        test = TestResult(index=0, verdict=Verdict(verdict), wall_s=wall, detail=detail)
        passed = test.verdict == Verdict.PASSED
        return TaskResult(
            task_id=task.task_id, passed=passed, fraction=float(passed), tests=(test,), detail=detail, wall_s=wall
        )

    async def _check(self, gold: str, answer: str) -> tuple[str, str]:
        """``(verdict, detail)``: a ``Verdict`` value, or ``infra_error``."""
        config = self.config
        if len(answer.strip()) > config.max_chars:
            return "wrong_answer", f"answer of {len(answer.strip())} characters (at most {config.max_chars} are read)"
        request = json.dumps(
            {"gold": gold, "answer": answer, "max_chars": config.max_chars, "max_answers": config.max_answers}
        ).encode("utf-8", errors="replace")
        async with self._limiter:
            with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: what it holds survives the kill
                try:
                    done, seen, starved = await self._run(request, stderr)
                except OSError as exc:
                    return "infra_error", f"the math check could not run: {exc}"
                stderr.seek(0)
                lines = stderr.read().decode("utf-8", errors="replace").strip().splitlines()
        past_gold = GOLD_READ in lines if done is not None else seen  # killed: what was seen before the kill
        if not past_gold:  # it never got past the gold: the task's or the host's failure, not the answer's
            why = f"ran past {config.start_timeout_s:g} s" if done is None else f"failed (exit {done.returncode})"
            reply = {} if done is None else _reply(done.stdout)
            if reply.get("verdict") == "gold_error":
                return "infra_error", _printable(str(reply.get("detail")))
            return "infra_error", f"the math check {why} before reading the gold: {(lines or [''])[-1][:300]}"
        if done is None and starved:
            return "infra_error", f"the host starved the check of this answer: {starved}"
        if done is None:
            return "time_limit", f"the check of this answer ran past {config.timeout_s:g} s"
        reply = _reply(done.stdout)
        if "verdict" in reply and "detail" in reply:
            return str(reply["verdict"]), _printable(str(reply["detail"]))
        if "MemoryError" in lines[-1] or done.returncode == -signal.SIGKILL:
            return "memory_limit", f"the check of this answer ran out of its {config.memory_mb} MB"
        return "runtime_error", f"the check died on this answer (exit {done.returncode}): {lines[-1][:300]}"

    async def _run(self, request: bytes, stderr) -> tuple[subprocess.CompletedProcess | None, bool, str]:
        """Run the check: ``(its completed process, or None when it was killed; whether it was seen to read the
        gold; why the host is to blame for a kill at the backstop, or "")``. It gets ``start_timeout_s`` to write
        ``GOLD_READ`` (or end), then ``timeout_s`` of CPU time to end (the wall clock a backstop); a kill before the
        gold was seen read is the start's (infra), after it the answer's (time_limit) unless the host starved it."""
        limit = self.config.memory_mb << 20
        began, ended, pids, finished, failed = trio.Event(), trio.Event(), [], [], []

        class Started:  # what the runners call with the check's pid (trio's task_status shape)
            def started(self, pid: int) -> None:
                pids.append(pid)
                began.set()

        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout:
            stdin.write(request)
            stdin.flush()
            stdin.seek(0)

            async def run() -> None:
                # an OSError (no process, the fork server's death) is kept, not raised: in a nursery it would
                # reach the caller inside an exception group where trio groups strictly (trio >= 0.25)
                try:
                    if self.config.fork_server:
                        code = await FORK_SERVER.run(CHECK, (stdin, stdout, stderr), limit, task_status=Started())
                    else:
                        code = await _run_fresh(stdin, stdout, stderr, limit, Started())
                    finished.append(code)
                except OSError as exc:
                    failed.append(exc)
                finally:
                    began.set()
                    ended.set()

            def gold_read() -> bool:
                return f"{GOLD_READ}\n".encode() in os.pread(stderr.fileno(), 1 << 16, 0)

            starved, seen = "", False
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                with trio.move_on_at(trio.current_time() + self.config.start_timeout_s):  # the start and the gold
                    await began.wait()
                    while not ended.is_set() and not gold_read():
                        with trio.move_on_after(POLL_S):
                            await ended.wait()
                seen = gold_read()
                if seen and not ended.is_set():
                    starved = await self._answer_time(pids[0], ended)
                nursery.cancel_scope.cancel()  # a check still running is killed (by its runner's cancellation)
            if failed:
                raise failed[0]
            stdout.seek(0)
            out = stdout.read(1 << 20)
        done = subprocess.CompletedProcess(CHECK, finished[0], out) if finished else None
        return done, seen, starved

    async def _answer_time(self, pid: int, ended: trio.Event) -> str:
        """Wait while the check reads the answer: until it ends, uses ``timeout_s`` of CPU, or reaches the wall-clock
        backstop. Returns why the host is to blame when the backstop ended it while it waited for a CPU, else ""."""
        cpu0, delay0 = _cpu_s(pid), _run_delay_s(pid)
        backstop = self.config.backstop_factor * self.config.timeout_s
        start = trio.current_time()
        slept = False  # seen sleeping or blocked at a poll: its time off the CPU is not all waiting for one
        while not ended.is_set():
            with trio.move_on_after(POLL_S):
                await ended.wait()
            fields = _stat(pid)  # one read a poll: the CPU used and the state
            if ended.is_set() or _cpu_of(fields) - cpu0 > self.config.timeout_s:
                return ""
            slept = slept or (fields is not None and fields[0] in ("S", "D"))
            if (wall := trio.current_time() - start) > backstop:
                used = _cpu_of(fields) - cpu0
                waited = _run_delay_s(pid) - delay0
                if not slept:
                    # the kernel adds a wait to the run delay when the thread next runs: a check the host keeps off
                    # the CPU for seconds shows little of that wait yet (a fresh-clone suite beside two busy loops:
                    # a starved check read as one that ran, and its answer was scored 0); runnable at every poll,
                    # its time off the CPU was all waiting
                    waited = max(waited, wall - used)
                return (
                    f"waited {waited:.1f} s for a CPU in {wall:.1f} s, {used:.1f} s of CPU used"
                    if waited > wall / 2
                    else ""
                )
        return ""


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first); None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_of(fields: list[str] | None) -> float:
    """CPU time (user + system, every thread) from `_stat`'s fields; 0 once the process is gone."""
    return (int(fields[11]) + int(fields[12])) * _TICK_S if fields else 0.0  # utime, stime (stat's 14 and 15)


def _cpu_s(pid: int) -> float:
    """CPU time (user + system) of process ``pid``, every thread; 0 once it is gone."""
    return _cpu_of(_stat(pid))


def _run_delay_s(pid: int) -> float:
    """Time ``pid``'s threads spent runnable, waiting for a CPU (schedstat's second field); 0 when unreadable."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return total / 1e9


async def _run_fresh(stdin, stdout, stderr, limit: int, task_status) -> int:
    """The check in a fresh interpreter of its own (``fork_server: false``): its pid started, its exit code."""

    class Started:  # trio.run_process hands over the process; the grader wants its pid
        def started(self, process) -> None:
            task_status.started(process.pid)

    process = await trio.run_process(
        [sys.executable, "-I", str(CHECK)],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        task_status=Started(),
    )
    return process.returncode


def _reply(stdout: bytes) -> dict:
    """The check's JSON reply, or ``{}`` when it wrote none."""
    try:
        reply = json.loads(stdout)
    except ValueError:
        return {}
    return reply if isinstance(reply, dict) else {}


def _printable(text: str) -> str:
    """``text`` with lone surrogates replaced: the detail echoes the answer, and JSON cannot hold a surrogate."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def grade_sync(grader: MathGrader, task: MathTask, answer: str) -> TaskResult:
    """``grader.grade`` outside an event loop (tests, scripts)."""
    return trio.run(grader.grade, task, answer)
