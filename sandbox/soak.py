"""The soak: a seeded mix of benign calls hammered at real workspaces while the pool turns them over.

A healthy runner must never die on a benign call, and no benign call may come
back ``infra_error`` (which masks the sample). Workers each hold one workspace
from one ``WorkspacePool``, run a random number of calls in it, release it and
acquire a fresh one. Every call is benign and its outcome class is known in
advance (``ok``, ``nonzero_exit``, ``timeout``, ``output_truncated``), so the
soak counts three kinds of trouble: infra errors, runner deaths (a workspace
released with ``ws.broken`` set) and mismatches against the expectation
(``unexpected``). After the pool closes, any container still carrying this
process's owner label is a leak.

The mix is deterministic per (seed, worker): ``Mix(seed, worker).draw()``
yields the same calls in the same order on every run; only the interleaving of
workers varies.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import random
import tarfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from sandbox.config import SandboxConfig
from sandbox.docker_engine import Engine
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.labels import current_owner
from sandbox.pool import WorkspacePool
from sandbox.protocol import BatchExecRequest, ExecRequest, ExecResult
from sandbox.workspace import Workspace

log = logging.getLogger(__name__)
KiB, MiB = 1 << 10, 1 << 20
EXAMPLES_KEPT = 10
BAD_PY = b"def broken(:\n    return 1\n"  # a SyntaxError before any stdin is read

# kind -> weight. Mostly cheap calls, so that tens of thousands fit in minutes on two cores.
WEIGHTS: dict[str, int] = {
    "true": 10,  # exec, nothing in, nothing out
    "cat_small": 12,  # exec with up to 4 KiB stdin, echoed back
    "stdin_large": 2,  # exec reading 64 KiB - 4 MiB of stdin (wc -c)
    "cat_large": 2,  # 64 - 768 KiB through cat: stdin written while stdout is read
    "output_large": 2,  # up to 768 KiB of output, under the bound
    "background": 2,  # sh -c 'sleep 30 & echo hi': a child outlives the command, holding its stdout
    "unread_python": 2,  # python3 -c 'print(42)' with 1 - 4 MiB of stdin it never reads
    "unread_true": 4,  # true with up to 2 MiB of unread stdin
    "unread_head": 4,  # head -c1 with up to 2 MiB of stdin, mostly unread
    "syntax_error": 2,  # python3 of a file with a SyntaxError, with up to 1 MiB of stdin
    "exit_nonzero": 8,  # sh -c 'exit N'
    "missing_program": 1,  # a program that does not exist: exit 127, nothing started
    "timeout": 3,  # sleep past a short deadline
    "output_over": 4,  # more output than the call's bound
    "batch": 5,  # exec_batch of 2 - 5 cheap items
    "write_file": 10,  # file tools start no process: the cheapest calls
    "read_file": 10,
    "list_dir": 8,
    "get_archive": 3,
    "put_files": 2,
    "read_denied": 1,  # read_file of a path outside the allowlist: sandbox_denied
}
BATCH_ITEM_KINDS = ("true", "cat_small", "exit_nonzero", "unread_head", "output_over", "background", "missing_program")
FILE_KINDS = frozenset({"write_file", "read_file", "list_dir", "get_archive", "put_files", "read_denied"})
EXEC_KINDS = frozenset(WEIGHTS) - FILE_KINDS - {"batch"}


@dataclass(frozen=True)
class Call:
    """One planned call; every parameter is drawn at planning time, so a plan is data."""

    kind: str
    size: int = 0  # bytes of stdin, of a file, or of output asked for
    code: int = 0  # the exit code of exit_nonzero
    limit: int = 0  # the output bound of output_over; the deadline (ms) of timeout
    salt: int = 0  # picks the payload bytes and which file
    items: tuple[Call, ...] = ()  # exec_batch items
    pause_s: float = 0.0  # idle gap after the call


@dataclass(frozen=True)
class Expect:
    """What a benign exec must come back as."""

    failure: FailureKind
    exit_code: int | None = None
    stdout: bytes | None = None
    stdout_len: int | None = None
    stderr_has: bytes | None = None


class Mix:
    """The seeded call mix of one worker: ``draw()`` the next call, ``lifetime()`` a workspace's call count."""

    def __init__(self, seed: int, worker: int):
        self._rng = random.Random(f"soak:{seed}:{worker}")
        self._kinds, self._weights = list(WEIGHTS), list(WEIGHTS.values())

    def lifetime(self, max_calls: int) -> int:
        """Calls before the workspace is released: 4 - 60, kept inside the episode's call budget (setup is one)."""
        most = max(min(60, max_calls - 2), 1)
        return self._rng.randint(min(4, most), most)

    def draw(self) -> Call:
        call = self._draw(self._rng.choices(self._kinds, self._weights)[0])
        pause = self._rng.random()
        pause_s = self._rng.uniform(0.0, 0.05) if pause < 0.2 else self._rng.uniform(0.2, 1.0) if pause < 0.21 else 0.0
        return dataclasses.replace(call, pause_s=round(pause_s, 4))

    def _draw(self, kind: str) -> Call:
        r = self._rng
        salt = r.getrandbits(32)
        # Sizes spread log-uniformly: every order of magnitude is exercised, while the mean stays
        # small enough for tens of thousands of calls in minutes (each MiB is base64 + JSON both ways).
        sizes = {
            "cat_small": r.randint(0, 4 * KiB),
            "stdin_large": _log_uniform(r, 64 * KiB, 4 * MiB),
            "cat_large": _log_uniform(r, 64 * KiB, 768 * KiB),
            "output_large": _log_uniform(r, 1, 768 * KiB),
            "unread_python": r.randint(1 * MiB, 4 * MiB),
            "unread_true": _log_uniform(r, 1, 2 * MiB),
            "unread_head": _log_uniform(r, 1, 2 * MiB),
            "syntax_error": _log_uniform(r, 1, 1 * MiB),
            "write_file": r.randint(0, 64 * KiB),
            "put_files": r.randint(0, 16 * KiB),
        }
        if kind == "batch":
            items = tuple(self._draw(r.choice(BATCH_ITEM_KINDS)) for _ in range(r.randint(2, 5)))
            return Call(kind, salt=salt, items=items)
        if kind == "output_over":
            limit = r.choice((4 * KiB, 16 * KiB, 64 * KiB))
            return Call(kind, size=limit * r.randint(2, 16), limit=limit, salt=salt)
        if kind == "timeout":
            return Call(kind, limit=r.randint(50, 300), salt=salt)
        return Call(kind, size=sizes.get(kind, 0), code=r.randint(1, 125) if kind == "exit_nonzero" else 0, salt=salt)


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, int(math.exp(rng.uniform(math.log(low), math.log(high)))))


def payload(call: Call) -> bytes:
    """The call's data: ``size`` bytes determined by its salt (a random block repeated: cheap for MiBs)."""
    block = random.Random(call.salt).randbytes(min(call.size, 4 * KiB))
    return (block * (call.size // max(len(block), 1) + 1))[: call.size]


def exec_plan(call: Call) -> tuple[ExecRequest, Expect]:
    """The request of an exec-kind call and the outcome it must have."""
    data = payload(call)
    ok = FailureKind.OK
    if call.kind == "true":
        return ExecRequest(argv=["true"]), Expect(ok, 0, b"")
    if call.kind == "cat_small":
        return ExecRequest(argv=["cat"], stdin=data), Expect(ok, 0, data)
    if call.kind == "stdin_large":
        return ExecRequest(argv=["wc", "-c"], stdin=data), Expect(ok, 0, f"{len(data)}\n".encode())
    if call.kind == "cat_large":
        return ExecRequest(argv=["cat"], stdin=data), Expect(ok, 0, data)
    if call.kind == "output_large":
        return ExecRequest(argv=["head", "-c", str(call.size), "/dev/zero"]), Expect(ok, 0, bytes(call.size))
    if call.kind == "background":
        return ExecRequest(argv=["sh", "-c", "sleep 30 & echo hi"]), Expect(ok, 0, b"hi\n")
    if call.kind == "unread_python":
        return ExecRequest(argv=["python3", "-c", "print(42)"], stdin=data), Expect(ok, 0, b"42\n")
    if call.kind == "unread_true":
        return ExecRequest(argv=["true"], stdin=data), Expect(ok, 0, b"")
    if call.kind == "unread_head":
        return ExecRequest(argv=["head", "-c1"], stdin=data), Expect(ok, 0, data[:1])
    if call.kind == "syntax_error":
        request = ExecRequest(argv=["python3", "bad.py"], stdin=data)
        return request, Expect(FailureKind.NONZERO_EXIT, 1, b"", stderr_has=b"SyntaxError")
    if call.kind == "exit_nonzero":
        return ExecRequest(argv=["sh", "-c", f"exit {call.code}"]), Expect(FailureKind.NONZERO_EXIT, call.code, b"")
    if call.kind == "missing_program":
        return ExecRequest(argv=["no-such-program"]), Expect(FailureKind.NONZERO_EXIT, 127, b"")
    if call.kind == "timeout":
        request = ExecRequest(argv=["sleep", "30"], timeout_s=call.limit / 1000)
        return request, Expect(FailureKind.TIMEOUT, None, b"")
    if call.kind == "output_over":
        request = ExecRequest(argv=["head", "-c", str(call.size), "/dev/zero"], output_limit_bytes=call.limit)
        return request, Expect(FailureKind.OUTPUT_TRUNCATED, None, stdout_len=call.limit)
    raise ValueError(f"{call.kind!r} is not an exec kind")


def op_of(kind: str) -> str:
    """The workspace operation a call kind uses."""
    if kind in EXEC_KINDS:
        return "exec"
    return {"batch": "exec_batch", "put_files": "put_archive", "setup": "write_file", "read_denied": "read_file"}.get(
        kind, kind
    )


def mismatch(expect: Expect, result: ExecResult) -> str | None:
    """Why ``result`` is not what ``expect`` says, or None."""
    if result.failure != expect.failure:
        return f"failure {result.failure.value}, expected {expect.failure.value}"
    if expect.exit_code is not None and result.exit_code != expect.exit_code:
        return f"exit code {result.exit_code}, expected {expect.exit_code}"
    if expect.stdout is not None and result.stdout != expect.stdout:
        return f"stdout {result.stdout[:40]!r} ({len(result.stdout)} bytes), expected {expect.stdout[:40]!r}"
    if expect.stdout_len is not None and len(result.stdout) != expect.stdout_len:
        return f"stdout of {len(result.stdout)} bytes, expected {expect.stdout_len}"
    if expect.stderr_has is not None and expect.stderr_has not in result.stderr:
        return f"stderr {result.stderr[-80:]!r} lacks {expect.stderr_has!r}"
    return None


@dataclass
class SoakReport:
    """Counters of one soak; ``as_json()`` is what ``--json`` writes."""

    calls: int = 0
    infra_errors: int = 0
    runner_deaths: int = 0
    unexpected: int = 0
    leaked_containers: int = 0
    workspaces_used: int = 0
    seconds: float = 0.0
    by_kind: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    infra_examples: list[dict[str, Any]] = field(default_factory=list)
    death_examples: list[dict[str, Any]] = field(default_factory=list)
    unexpected_examples: list[dict[str, Any]] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.infra_errors or self.runner_deaths or self.leaked_containers else 0

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "infra_errors": self.infra_errors,
            "runner_deaths": self.runner_deaths,
            "leaked_containers": self.leaked_containers,
            "unexpected": self.unexpected,
            "workspaces_used": self.workspaces_used,
            "seconds": round(self.seconds, 2),
            "calls_per_s": round(self.calls / self.seconds, 2) if self.seconds else 0.0,
            "by_kind": {kind: dict(sorted(outcomes.items())) for kind, outcomes in sorted(self.by_kind.items())},
            "infra_examples": self.infra_examples,
            "death_examples": self.death_examples,
            "unexpected_examples": self.unexpected_examples,
            "leaked": self.leaked,
        }

    def note(self, kind: str, outcome: str) -> None:
        self.by_kind[kind][outcome] += 1

    def infra(
        self, op: str, kind: str, detail: str, ws: Workspace | None = None, argv: list[str] | None = None
    ) -> None:
        self.infra_errors += 1
        self.note(kind, FailureKind.INFRA_ERROR.value)
        if len(self.infra_examples) < EXAMPLES_KEPT:
            self.infra_examples.append(
                {
                    "op": op,
                    "kind": kind,
                    "argv": (argv or [])[:6],
                    "detail": detail,
                    "workspace": ws.id[:12] if ws else None,
                }
            )

    def mismatched(self, op: str, kind: str, why: str, argv: list[str] | None = None) -> None:
        self.unexpected += 1
        self.note(kind, "unexpected")
        if len(self.unexpected_examples) < EXAMPLES_KEPT:
            self.unexpected_examples.append({"op": op, "kind": kind, "argv": (argv or [])[:6], "why": why})

    def summary(self) -> str:
        rate = self.calls / self.seconds if self.seconds else 0.0
        return (
            f"{self.calls} calls ({rate:.1f}/s), {self.workspaces_used} workspaces, infra_errors {self.infra_errors}, "
            f"runner_deaths {self.runner_deaths}, unexpected {self.unexpected}"
        )


@dataclass(frozen=True)
class SoakOptions:
    """How long and how wide a soak runs."""

    workspaces: int = 8  # workers, each holding one workspace at a time; also the warm pool's size
    seconds: float = 600.0  # stop after this long ...
    calls: int | None = None  # ... or after this many calls, whichever comes first
    seed: int = 0
    progress_s: float = 10.0  # a progress line on the log this often


# Called with each freshly acquired workspace and its ordinal (1, 2, ...): tests use it to sabotage one.
OnAcquire = Callable[[Workspace, int], Awaitable[None]]


async def soak(config: SandboxConfig, options: SoakOptions, on_acquire: OnAcquire | None = None) -> SoakReport:
    """Run the soak to its end (time or calls), close the pool, then look for leaked containers."""
    report = SoakReport()
    pool_config = config.model_copy(update={"pool": config.pool.model_copy(update={"size": options.workspaces})})
    started = time.monotonic()
    deadline = started + options.seconds

    def done() -> bool:
        return time.monotonic() >= deadline or (options.calls is not None and report.calls >= options.calls)

    async with WorkspacePool(pool_config) as pool:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_progress, report, started, options)
            async with trio.open_nursery() as workers:
                for index in range(options.workspaces):
                    worker = _Worker(index, pool, report, Mix(options.seed, index), done, on_acquire)
                    workers.start_soon(worker.run)
            report.seconds = time.monotonic() - started
            nursery.cancel_scope.cancel()
        log.info("soak done: %s; closing the pool", report.summary())
    report.leaked = await owned_containers(config)
    report.leaked_containers = len(report.leaked)
    return report


async def owned_containers(config: SandboxConfig) -> list[str]:
    """Ids of containers (running or not) that carry this process's owner label."""
    engine = Engine(config)
    try:
        owner = current_owner()
        return [c["Id"] for c in await engine.labelled() if (c.get("Labels") or {}).get("gym.owner") == owner]
    finally:
        engine.close()


async def _progress(report: SoakReport, started: float, options: SoakOptions) -> None:
    while True:
        await trio.sleep(options.progress_s)
        elapsed = time.monotonic() - started
        report.seconds = elapsed
        log.info("soak %4.0fs/%.0fs: %s", elapsed, options.seconds, report.summary())


class _Worker:
    """One worker: acquire a workspace, run a drawn number of calls in it, release, repeat."""

    def __init__(
        self,
        index: int,
        pool: WorkspacePool,
        report: SoakReport,
        mix: Mix,
        done: Callable[[], bool],
        on_acquire: OnAcquire | None,
    ):
        self.index, self.pool, self.report, self.mix = index, pool, report, mix
        self.done, self.on_acquire = done, on_acquire

    async def run(self) -> None:
        while not self.done():
            lifetime = self.mix.lifetime(self.pool.config.episode.max_calls)
            try:
                async with self.pool.acquire(f"soak-{self.index}") as ws:
                    self.report.workspaces_used += 1
                    if self.on_acquire is not None:
                        await self.on_acquire(ws, self.report.workspaces_used)
                    await self._episode(ws, lifetime)
            except InfraError as exc:  # a cold start failed: the engine's fault, counted, then retried
                self.report.infra("acquire", "acquire", str(exc))
                await trio.sleep(1.0)

    async def _episode(self, ws: Workspace, lifetime: int) -> None:
        files: dict[str, bytes] = {}
        history: list[str] = ["setup"]
        self.report.calls += 1
        await self._write(ws, "setup", "bad.py", BAD_PY, files)
        for _ in range(lifetime):
            if ws.broken or self.done():
                break
            call = self.mix.draw()
            history.append(call.kind)
            await self._one(ws, call, files)
            if call.pause_s:
                await trio.sleep(call.pause_s)
        if ws.broken:
            self.report.runner_deaths += 1
            if len(self.report.death_examples) < EXAMPLES_KEPT:
                self.report.death_examples.append(
                    {"workspace": ws.id[:12], "broken": ws.broken, "calls": ws.calls, "last_kinds": history[-5:]}
                )

    async def _one(self, ws: Workspace, call: Call, files: dict[str, bytes]) -> None:
        self.report.calls += 1
        try:
            await self._dispatch(ws, call, files)
        except InfraError as exc:  # the workspace API raises it where it has no result to carry it
            self.report.infra(op_of(call.kind), call.kind, str(exc), ws)

    async def _dispatch(self, ws: Workspace, call: Call, files: dict[str, bytes]) -> None:
        if call.kind in EXEC_KINDS:
            request, expect = exec_plan(call)
            self._judge(ws, "exec", call.kind, request, expect, await ws.exec(request))
        elif call.kind == "batch":
            plans = [exec_plan(item) for item in call.items]
            batch = await ws.exec_batch(BatchExecRequest(items=[request for request, _ in plans]))
            for item, (request, expect), result in zip(call.items, plans, batch.results):
                self._judge(ws, "exec_batch", f"batch/{item.kind}", request, expect, result)
        elif call.kind == "write_file":
            await self._write(ws, call.kind, f"f{call.salt % 8}.bin", payload(call), files)
        elif call.kind == "put_files":
            path = f"d{call.salt % 4}/x{call.salt % 3}.txt"
            result = await ws.put_files({path: payload(call)})
            if self._checked(ws, "put_archive", call.kind, result.failure, result.detail):
                files[path] = payload(call)
        else:
            await self._inspect(ws, call, files)

    async def _write(self, ws: Workspace, kind: str, path: str, data: bytes, files: dict[str, bytes]) -> None:
        result = await ws.write_file(path, data)
        wrong = None if result.bytes_written == len(data) else f"wrote {result.bytes_written} of {len(data)} bytes"
        if self._checked(ws, "write_file", kind, result.failure, result.detail, wrong):
            files[path] = data

    async def _inspect(self, ws: Workspace, call: Call, files: dict[str, bytes]) -> None:
        """read_file, list_dir and get_archive of what this worker wrote before."""
        path = sorted(files)[call.salt % len(files)]
        if call.kind == "read_denied":
            result = await ws.read_file(("../etc/passwd", "/etc/hostname", "/proc/1/environ")[call.salt % 3])
            if result.failure == FailureKind.SANDBOX_DENIED:
                self.report.note(call.kind, result.failure.value)
            else:
                self._checked(ws, "read_file", call.kind, result.failure, result.detail, "read outside the allowlist")
        elif call.kind == "read_file":
            result = await ws.read_file(path)
            wrong = None if result.data == files[path] else f"{path}: {len(result.data)} bytes read differ"
            self._checked(ws, "read_file", call.kind, result.failure, result.detail, wrong)
        elif call.kind == "list_dir":
            result = await ws.list_dir(".")
            missing = {p.split("/")[0] for p in files} - {entry.name for entry in result.entries}
            wrong = f"entries missing: {sorted(missing)}" if missing else None
            self._checked(ws, "list_dir", call.kind, result.failure, result.detail, wrong)
        else:
            try:
                tar = await ws.get_archive(path)
            except ValueError as exc:  # refused: the runner said why
                self.report.mismatched("get_archive", call.kind, str(exc))
                return
            with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
                try:
                    member = archive.extractfile(path.rsplit("/", 1)[-1])
                except KeyError:
                    member = None
                data = member.read() if member else None
            wrong = None if data == files[path] else f"{path}: archived content differs"
            self._checked(ws, "get_archive", call.kind, FailureKind.OK, "", wrong)

    def _checked(
        self, ws: Workspace, op: str, kind: str, failure: FailureKind, detail: str, wrong: str | None = None
    ) -> bool:
        """Count a file tool's outcome: infra error, unexpected (failure or ``wrong`` content) or ok."""
        if failure == FailureKind.INFRA_ERROR:
            self.report.infra(op, kind, detail, ws)
            return False
        if failure != FailureKind.OK or wrong:
            self.report.mismatched(
                op, kind, wrong if failure == FailureKind.OK else f"failure {failure.value}: {detail}"
            )
            return False
        self.report.note(kind, failure.value)
        return True

    def _judge(
        self, ws: Workspace, op: str, kind: str, request: ExecRequest, expect: Expect, result: ExecResult
    ) -> None:
        if result.failure == FailureKind.INFRA_ERROR:
            self.report.infra(op, kind, result.detail, ws, request.argv)
            return
        why = mismatch(expect, result)
        if why:
            self.report.mismatched(op, kind, f"{why}; detail: {result.detail}", request.argv)
        else:
            self.report.note(kind, result.failure.value)
