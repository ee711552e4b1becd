"""One workspace: a hardened container plus its runner, driven over the attached stream.

Every call is a typed request/result pair (``sandbox.protocol``). The host
enforces the episode budgets (wall clock, number of calls) and a backstop
deadline past each call's own: a runner that does not answer by then is
presumed lost, the container is destroyed, and the call (and every later one)
is ``infra_error``, never a hang and never a silent wrong result.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import docker
import trio
from pydantic import BaseModel

from sandbox import wire
from sandbox.config import SandboxConfig
from sandbox.docker_engine import AttachedStream, Engine
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import (
    OPERATIONS,
    BatchExecRequest,
    BatchExecResult,
    ExecRequest,
    ExecResult,
    FileResult,
    FrameDecoder,
    GetArchiveRequest,
    GetArchiveResult,
    ListDirRequest,
    ListDirResult,
    PutArchiveRequest,
    ReadFileRequest,
    ReadFileResult,
    ResetRequest,
    ResetResult,
    WriteFileRequest,
    encode_frame,
    reply_of,
    request_frame,
)

log = logging.getLogger(__name__)
R = TypeVar("R", bound=BaseModel)
FILE_OP_TIMEOUT_S = 30.0
# The runner's sweep after a command may take up to its own deadline (3 s, a fork bomb fighting it) plus
# the IPC clean-up: the host waits that long past a command's deadline and grace before it gives up.
SWEEP_ALLOWANCE_S = 4.0
# A reset sweeps (up to SWEEP_ALLOWANCE_S) and walks the writable filesystems (bounded by the runner).
RESET_TIMEOUT_S = 10.0
# How long a lost runner's container may take to be seen as exited by the engine.
LOSS_SETTLE_S = 3.0
KILLED_FROM_OUTSIDE = (128 + 9, 128 + 15)  # SIGKILL / SIGTERM: sandboxed code cannot signal the runner


class RunnerLost(InfraError):
    """The runner's stream closed, or it gave no answer within the call's backstop."""

    def __init__(self, message: str, *, answered: bool = True):
        super().__init__(message)
        self.answered = answered


class Workspace:
    """A live workspace. Obtain one from ``WorkspacePool.acquire``; never reused across tasks."""

    def __init__(
        self, container_id: str, stream: AttachedStream, config: SandboxConfig, owner: str, engine: Engine | None = None
    ):
        self.id = container_id
        self._engine = engine  # to tell whose failure a lost runner is (see _blame)
        self._lost: tuple[FailureKind, str] | None = None
        self._diagnosing: set[trio.CancelScope] = set()  # one per blame in flight (blames are not serialized)
        self.owner = owner
        self.config = config
        self._stream = stream
        self._decoder = FrameDecoder()
        self._frames: list[dict[str, Any]] = []
        self._lock = trio.Lock()
        self._next_id = 1
        self._started = time.monotonic()
        self.born = self._started
        self.calls = 0
        self.served = 0  # tasks handed this container before the current one (sandbox.pool's recycling)
        self.keys: set[str] = set()  # the keys of every task it served (sandbox.pool's disjoint recycling)
        self.broken: str | None = None
        self.closed = False
        self.log: list[dict[str, Any]] = []  # one summary line per call, copied out as an artifact

    # ------------------------------------------------------------ transport

    async def hello(self, timeout: float) -> dict[str, Any]:
        """Wait for the runner's greeting (a started container is ready only after it)."""
        with trio.move_on_after(timeout) as scope:
            frame = await self._next_frame()
        if scope.cancelled_caught:
            raise InfraError(f"runner of {self.id[:12]} did not say hello within {timeout:.0f}s")
        if frame is None:
            raise InfraError(f"the stream of {self.id[:12]} closed before its runner said hello")
        if frame.get(wire.ID) != 0 or frame.get(wire.BODY, {}).get(wire.HELLO) != wire.RUNNER_NAME:
            raise InfraError(f"runner of {self.id[:12]} sent an unexpected greeting: {frame!r:.200}")
        return frame[wire.BODY]

    async def _next_frame(self) -> dict[str, Any] | None:
        while not self._frames:
            chunk = await self._stream.receive()
            if not chunk:
                return None
            self._frames.extend(self._decoder.feed(chunk))
        return self._frames.pop(0)

    async def _roundtrip(
        self,
        op: str,
        request: bytes | dict[str, Any],
        timeouts: Sequence[float],
        on_partial: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Send one request and read its frames: ``timeouts[i]`` bounds the wait for the i-th frame
        (an exec_batch streams one partial frame per item before its reply; the last bound repeats).
        A runner that stops answering or whose stream closes raises ``RunnerLost``."""
        if self.closed:
            raise InfraError(f"workspace {self.id[:12]} is released")
        if self.broken:
            raise InfraError(f"workspace {self.id[:12]} is unusable: {self.broken}")
        request_id = self._next_id
        self._next_id += 1
        frames = 0
        try:
            if isinstance(request, bytes):  # a model's JSON; the allowlist goes with every request
                frame = request_frame(request_id, op, request, allow=self.config.allowlist)
            else:  # a body sent as it is (tests of the runner's own bounds)
                frame = encode_frame({wire.ID: request_id, wire.OP: op, wire.BODY: request})
            await self._stream.send(frame)
            while True:
                timeout = timeouts[min(frames, len(timeouts) - 1)]
                with trio.move_on_after(timeout) as scope:
                    frame = await self._next_frame()
                if scope.cancelled_caught:
                    self.broken = f"runner gave no answer to {op!r} within {timeout:.1f}s"
                    raise RunnerLost(self.broken, answered=False)
                if frame is None:
                    self.broken = "runner stream closed (runner or container died)"
                    raise RunnerLost(self.broken)
                frames += 1
                if frame.get(wire.ID) != request_id:
                    self.broken = f"runner answered request {frame.get(wire.ID)} to request {request_id}"
                    raise InfraError(self.broken)
                if not frame.get(wire.OK):
                    raise InfraError(f"runner refused {op!r}: {frame.get(wire.ERROR)}")
                if not frame.get(wire.PARTIAL):
                    return frame[wire.BODY]
                if on_partial is not None:
                    on_partial(frame[wire.BODY])
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as exc:
            self.broken = f"runner stream failed: {exc!r}"
            raise RunnerLost(self.broken) from exc

    async def _exchange(
        self,
        op: str,
        request: BaseModel,
        timeouts: Sequence[float],
        on_partial: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], float]:
        """One request's round trip under the workspace's lock: ``(reply body, seconds)``."""
        # Serialized here, before the round trip: a request that cannot be (a lone surrogate in a path) raises
        # to the caller as a bad request, never as a lost stream (which would mask the call as infra_error).
        body = request.model_dump_json().encode()
        async with self._lock:
            started = time.monotonic()
            reply = await self._roundtrip(op, body, timeouts, on_partial)
        return reply, round(time.monotonic() - started, 4)

    async def _call(self, op: str, request: BaseModel, timeouts: Sequence[float]) -> Any:
        reply, wall = await self._exchange(op, request, timeouts)
        result = reply_of(OPERATIONS[op][1], reply)
        self.log.append({"op": op, "wall_s": wall, **_summary(request, result)})
        return result

    async def _blame(self, exc: InfraError) -> tuple[FailureKind, str]:
        """Whose failure a lost runner is: ``(kind, detail)``.

        Only the engine, the daemon or the host mask a call (``infra_error``). When the engine answers
        and the container died of its own (out of memory, the runner crashed) or the runner overran its
        deadline while the container kept running, the call's own processes did it: they share the
        runner's memory, pids and CPU, and nothing outside the container touched it. That is the
        candidate's failure, scored: a policy must not learn that taking its runner down hides a
        penalty. A container that was killed from outside (SIGKILL/SIGTERM with no OOM) or removed,
        and a stream that closed while the container still runs, are infrastructure.
        """
        if self._lost is not None:
            kind, why = self._lost
            return kind, f"{why} (workspace lost earlier: {exc})"
        if not isinstance(exc, RunnerLost) or self._engine is None:
            return FailureKind.INFRA_ERROR, str(exc)
        with trio.CancelScope() as scope:  # abandon() cuts a diagnosis short: the engine is gone
            self._diagnosing.add(scope)
            try:
                kind, why = await diagnose(self._engine, self.id, answered=exc.answered)
            finally:
                self._diagnosing.discard(scope)
        if self._lost is not None:
            return self._lost[0], f"{self._lost[1]} ({exc})"
        self._lost = (kind, f"{exc}; {why}")
        if kind != FailureKind.INFRA_ERROR:
            log.info("workspace %s lost by its own call: %s (%s)", self.id[:12], kind.value, why)
        return self._lost

    # ------------------------------------------------------------ budgets

    def claim(self, owner: str) -> None:
        """Hand the workspace to ``owner``: its episode's wall clock starts now, not when the pool warmed it
        (a workspace that waited in the pool longer than ``episode.wall_s`` would refuse every call)."""
        self.owner = owner or self.owner
        self._started = time.monotonic()

    def _budget_refusal(self) -> tuple[FailureKind, str] | None:
        episode = self.config.episode
        if self.calls >= episode.max_calls:
            return FailureKind.SANDBOX_DENIED, f"episode budget spent: {episode.max_calls} tool calls"
        if time.monotonic() - self._started >= episode.wall_s:
            return FailureKind.TIMEOUT, f"episode wall clock of {episode.wall_s:.0f}s spent"
        return None

    def _episode_left(self) -> float:
        return self.config.episode.wall_s - (time.monotonic() - self._started)

    def _resolve_exec(self, request: ExecRequest) -> ExecRequest:
        calls = self.config.calls
        left = max(self._episode_left(), 0.001)
        timeout = min(request.timeout_s or calls.timeout_s, left)
        update = {
            "cwd": self.path(request.cwd),
            "timeout_s": timeout,
            "output_limit_bytes": request.output_limit_bytes or calls.output_limit_bytes,
        }
        if request.starved_grace_s is not None:  # a starved command runs on, but never past the episode
            update["starved_grace_s"] = min(request.starved_grace_s, left - timeout)
        return request.model_copy(update=update)

    def path(self, path: str) -> str:
        """Lexically normalise a path against the workspace root (resolution happens in the runner)."""
        return posixpath.normpath(posixpath.join(self.config.workdir, path))

    # ------------------------------------------------------------ operations

    async def exec(self, request: ExecRequest) -> ExecResult:
        """Run one command. Budget refusals and sandbox failures come back as classified results."""
        refusal = self._budget_refusal()
        if refusal:
            return ExecResult(failure=refusal[0], detail=refusal[1])
        self.calls += 1
        request = self._resolve_exec(request)
        try:
            return await self._call("exec", request, [self._backstop(request)])
        except InfraError as exc:
            kind, detail = await self._blame(exc)
            return ExecResult(failure=kind, detail=detail)

    async def exec_batch(self, request: BatchExecRequest) -> BatchExecResult:
        """Run several commands in one round trip (one tool call of the budget).

        Each item's result streams back on its own and is bounded by its own deadline; when the runner
        is lost at item k, items before k keep their results and k and the rest carry the loss."""
        refusal = self._budget_refusal()
        if refusal:
            return BatchExecResult(results=[ExecResult(failure=refusal[0], detail=refusal[1])] * len(request.items))
        self.calls += 1
        items = [self._resolve_exec(item) for item in request.items]
        request = request.model_copy(update={"items": items})
        done: list[ExecResult] = []

        def take(body: dict[str, Any]) -> None:
            done.append(reply_of(ExecResult, body[wire.RESULT]))

        timeouts = [self._backstop(item) for item in items] + [self.config.calls.grace_s + SWEEP_ALLOWANCE_S]
        try:
            reply = await self._call_batch(request, timeouts, take)
        except InfraError as exc:
            kind, detail = await self._blame(exc)
            return BatchExecResult(results=done + [ExecResult(failure=kind, detail=detail)] * (len(items) - len(done)))
        if reply is not None:  # the runner failed between items: the rest did not run
            done += [ExecResult(failure=FailureKind.TOOL_ERROR, detail=reply)] * (len(items) - len(done))
        elif len(done) < len(items) and not (request.stop_on_failure or request.stop_on_deadline):
            raise InfraError(f"runner streamed {len(done)} results for {len(items)} items")
        return BatchExecResult(results=done)

    async def _call_batch(
        self, request: BatchExecRequest, timeouts: list[float], take: Callable[[dict[str, Any]], None]
    ) -> str | None:
        """The streamed exec_batch round trip; returns the runner's failure detail if it failed between items."""
        reply, wall = await self._exchange("exec_batch", request, timeouts, take)
        failure = reply.get("failure")
        self.log.append({"op": "exec_batch", "wall_s": wall, "failure": failure or "ok", "items": len(request.items)})
        return reply.get("detail", failure) if failure else None

    def _backstop(self, request: ExecRequest) -> float:
        """How long the host waits for a command's result: its deadline, the time a starved command may run on
        past it, the grace, and the sweep after it."""
        deadline = (request.timeout_s or self.config.calls.timeout_s) + (request.starved_grace_s or 0.0)
        return deadline + self.config.calls.grace_s + SWEEP_ALLOWANCE_S

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> ReadFileResult:
        return await self._file_op("read_file", ReadFileRequest(path=self.path(path), max_bytes=max_bytes))

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> FileResult:
        return await self._file_op("write_file", WriteFileRequest(path=self.path(path), data=data, mode=mode))

    async def list_dir(self, path: str = ".") -> ListDirResult:
        return await self._file_op("list_dir", ListDirRequest(path=self.path(path)))

    async def put_archive(self, dest: str, tar: bytes) -> FileResult:
        return await self._file_op("put_archive", PutArchiveRequest(dest=self.path(dest), tar=tar))

    async def put_files(self, files: dict[str, bytes], dest: str = ".") -> FileResult:
        """Copy several files in with one round trip (paths relative to ``dest``)."""
        return await self.put_archive(dest, tar_of(files))

    async def get_archive(self, path: str, max_bytes: int = 64 << 20, budgeted: bool = True) -> bytes:
        """A tar of ``path``; raises InfraError when the runner is lost, ValueError when refused."""
        request = GetArchiveRequest(path=self.path(path), max_bytes=max_bytes)
        result: GetArchiveResult = await self._file_op("get_archive", request, budgeted)
        if result.failure != FailureKind.OK:
            raise ValueError(f"get_archive {path}: {result.failure.value}: {result.detail}")
        return result.tar

    async def reset(self) -> ResetResult:
        """Make the container as its runner started it, to serve another task (`sandbox.pool` recycles it only when
        the result is clean; the runner checks the result, `sandbox/runner/reset.py`). A lost runner raises
        InfraError."""
        result: ResetResult = await self._call(wire.RESET, ResetRequest(), [RESET_TIMEOUT_S])
        if result.clean:
            self.calls = 0
            self.log = []
            self.served += 1
        return result

    async def _file_op(self, op: str, request: BaseModel, budgeted: bool = True) -> Any:
        result_model = OPERATIONS[op][1]
        if budgeted:
            refusal = self._budget_refusal()
            if refusal:
                if op == "get_archive":
                    raise ValueError(f"get_archive refused: {refusal[1]}")
                return result_model(failure=refusal[0], detail=refusal[1])
            self.calls += 1
        try:
            return await self._call(op, request, [FILE_OP_TIMEOUT_S])
        except InfraError as exc:
            kind, detail = await self._blame(exc)
            if op == "get_archive" and kind == FailureKind.INFRA_ERROR:
                raise InfraError(detail) from exc
            return result_model(failure=kind, detail=detail)

    async def save_artifacts(self, directory: Path) -> None:
        """Copy the workspace tree and the call log out (before the container is removed)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "calls.jsonl").write_text("".join(json.dumps(line) + "\n" for line in self.log))
        if not self.broken:
            try:
                (directory / "workspace.tar").write_bytes(await self.get_archive(self.config.workdir, budgeted=False))
            except (InfraError, ValueError) as exc:
                (directory / "workspace.error").write_text(str(exc) + "\n")

    def abandon(self, reason: str) -> None:
        """Give the workspace up from outside (its engine was drained, sandbox.fleet): the call in flight and
        every later one end as ``infra_error`` with ``reason``, at once instead of at their deadlines."""
        if self._lost is None:
            self._lost = (FailureKind.INFRA_ERROR, reason)
        self.broken = self.broken or reason
        for scope in self._diagnosing:
            scope.cancel()
        self._stream.abort()

    @property
    def stream(self) -> AttachedStream:
        return self._stream

    @property
    def engine_url(self) -> str | None:
        """The Docker engine the workspace runs on (trajectories record it)."""
        return None if self._engine is None else self._engine.url

    async def aclose(self) -> None:
        """Close the stream (the pool destroys the container)."""
        if not self.closed:
            self.closed = True
            await self._stream.aclose()


async def diagnose(engine: Engine, container_id: str, *, answered: bool) -> tuple[FailureKind, str]:
    """``(kind, why)`` of a container whose runner was lost, from what the engine says of it."""
    deadline = time.monotonic() + LOSS_SETTLE_S
    while True:
        try:
            info = await engine.call("inspect", engine.client.api.inspect_container, container_id)
        except docker.errors.NotFound:
            return FailureKind.INFRA_ERROR, "the container was removed from outside"
        except InfraError as exc:
            return FailureKind.INFRA_ERROR, f"the Docker engine at {engine.url} is not healthy: {exc}"
        kind, why = classify_loss(info.get("State") or {}, answered=answered)
        if kind is not None:
            return kind, why
        if time.monotonic() > deadline:
            return FailureKind.INFRA_ERROR, "the stream closed while the container still runs (attach connection lost)"
        await trio.sleep(0.1)


def classify_loss(state: dict[str, Any], *, answered: bool) -> tuple[FailureKind | None, str]:
    """Whose failure a lost runner is, from the container's engine state (None: not settled yet).

    See ``Workspace._blame`` for the rule; this is its pure part.
    """
    code = state.get("ExitCode")
    if state.get("OOMKilled"):
        return FailureKind.OOM, f"the container ran out of memory and its OOM killer took the runner (exit {code})"
    if state.get("Running"):
        if not answered:
            return FailureKind.TIMEOUT, "the runner overran the call's deadline under the call's own load"
        return None, "still running"
    if code in KILLED_FROM_OUTSIDE:
        return FailureKind.INFRA_ERROR, f"the container was killed from outside (exit {code}, no OOM)"
    return FailureKind.WORKSPACE_LOST, f"the runner died during the call (exit {code})"


def tar_of(files: dict[str, bytes]) -> bytes:
    """An in-memory tar of ``{relative path: content}``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if data.startswith(b"#!") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _summary(request: BaseModel, result: BaseModel) -> dict[str, Any]:
    line: dict[str, Any] = {"failure": getattr(result, "failure", FailureKind.OK).value}
    if isinstance(request, ExecRequest):
        line.update(argv=request.argv[:8], cwd=request.cwd, exit_code=getattr(result, "exit_code", None))
    elif hasattr(request, "path"):
        line["path"] = request.path
    if isinstance(result, BatchExecResult):
        line["failures"] = [r.failure.value for r in result.results]
    return line
