"""The sandbox service (`python -m gym sandbox-serve`): the hardened workspace pool and the graders over HTTP.

Routes (aiohttp, as the policy server):
  POST /run_code   SandboxFusion's API (sandbox/fusion.py): code in a fresh workspace, its outcome as data
  POST /v1/grade   one dataset row and one answer -> its grade (gym/service/grade_request.py); or a batch of SWE
                   predictions -> the SWE-bench harness's report (gym/service/swe_request.py)
  GET  /v1/ping    "pong", as SandboxFusion answers it
  GET  /health     admission counts, runs waiting and running, languages, the owner label of its containers

Every request that reads a body passes `gym.service.admission` first: a slot of ``max_requests`` and a reservation of
the memory its body can cost (503 past either: retry later), a Content-Length past ``max_body_bytes`` refused
(413) before a byte is read, the body read within ``read_timeout_s`` (408), its JSON values and nesting counted in
its bytes before it is parsed (413/400). Parsing and checking run in a worker thread, so the event loop keeps
answering. A ``/run_code`` request then waits for one of ``max_running`` workspaces (FIFO) and runs in its own
(sandbox.pool_thread, one trio loop holding the pool); a client that goes away cancels its run and its workspace
is destroyed. Errors answer FastAPI's shape, as SandboxFusion's server does: ``{"detail": "..."}``, or a list of
``{"type", "loc", "msg"}`` for a field at fault (422; 413 for one too large). What the candidate's code does is
never an error of the request (sandbox/fusion.py).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gym.integrations.scorer import Scorer, ScorerConfig
from gym.service import swe_request
from gym.service.admission import BODY_COPIES, VALUE_BYTES, Admission, Refused, check_shape, declared_size, read_body
from gym.service.grade_request import BadRow, GradeRequest, answer_of, response_of, task_of
from gym.service.swe_request import SweGradeOptions, SweRequestError
from sandbox.config import SandboxConfig
from sandbox.config_file import load_config
from sandbox.fusion import (
    RUNNERS,
    RunCodeLimits,
    RunCodeRefused,
    RunCodeRequest,
    plan,
    run_code,
    sandbox_error,
    validation_detail,
)
from sandbox.labels import current_owner
from sandbox.pool_thread import PoolThread
from sandbox.workspace import SWEEP_ALLOWANCE_S

log = logging.getLogger(__name__)
# Connections the kernel queues before the server accepts them (the kernel caps it at net.core.somaxconn). With
# aiohttp's 128, a burst the loop had not yet accepted (200 slow bodies at once) filled the queue, and the next
# client's SYN was dropped: its answer came after the 1 s SYN retransmit.
LISTEN_BACKLOG = 1024
_CONFIG = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SandboxServeConfigError(ValueError):
    """A sandbox-serve config that cannot be used; the message names the file and the field."""


class ServiceOptions(BaseModel):
    """The HTTP side."""

    model_config = _CONFIG

    host: str = "127.0.0.1"
    """Bind address; loopback by default (whoever reaches the service runs code in its sandboxes)."""
    port: int = Field(8080, ge=0, le=65535)
    """TCP port; 0 picks a free one (the chosen address is logged)."""
    max_requests: int = Field(64, ge=1)
    """Requests in flight at once, every route together, waiting or running (503 beyond: retry later)."""
    max_running: int = Field(4, ge=1, le=256)
    """``/run_code`` requests holding a workspace at once; the others wait in arrival order. With a fleet, at most
    the engines' capacities together. The replies of running requests hold at most this many times 12x
    ``sandbox.calls.output_limit_bytes`` plus 4x their fetched files."""
    max_body_bytes: int = Field(32 << 20, ge=1 << 16)
    """Largest request body (413 above, before it is read)."""
    max_inflight_memory_bytes: int = Field(2 << 30, ge=64 << 20)
    """Memory the bodies of every request in flight may cost together, each counted at its most before it is read
    (`gym.service.admission`: 8 copies of its bytes and 160 bytes a JSON value; 503 above: retry later)."""
    read_timeout_s: float = Field(30.0, gt=0)
    """Longest wait for a request's body (408 past it) and for a connection's next request line and headers."""
    max_json_values: int = Field(1 << 18, ge=1 << 10)
    """JSON values in one body at most, counted in its bytes before it is parsed (413 above). A /run_code request
    holds about 2 a file; a CP row 2-4 a test."""
    max_json_depth: int = Field(32, ge=4)
    """Nesting of arrays and objects in one body at most (400 above); a /run_code request nests 2 deep."""

    @model_validator(mode="after")
    def _a_largest_body_fits(self) -> ServiceOptions:
        largest = BODY_COPIES * self.max_body_bytes + VALUE_BYTES * min(self.max_body_bytes, self.max_json_values)
        if largest > self.max_inflight_memory_bytes:
            raise ValueError(
                f"max_inflight_memory_bytes ({self.max_inflight_memory_bytes}) is below what one body of "
                f"max_body_bytes may cost ({largest}): such a request could never be admitted"
            )
        return self


class SandboxServeConfig(BaseModel):
    """Top level of a sandbox-serve YAML (configs/sandbox_serve.yaml)."""

    model_config = _CONFIG

    server: ServiceOptions = ServiceOptions()
    run_code: RunCodeLimits = RunCodeLimits()
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """The workspaces ``/run_code`` requests run in (sandbox/config.py); ``memory_mb`` is the most a request's
    ``memory_limit_MB`` gets, ``calls.output_limit_bytes`` the output bound."""
    grade: ScorerConfig = Field(default_factory=ScorerConfig)
    """How ``/v1/grade`` grades (gym/integrations/scorer.py): its own sandbox, grader limits, concurrency."""
    swe: SweGradeOptions = SweGradeOptions()
    """SWE predictions on ``/v1/grade`` (gym/service/swe_request.py): the instances, their bounds and deadlines;
    each grading container is ``grade.sandbox`` on the instance's image."""

    @model_validator(mode="after")
    def _fits(self) -> SandboxServeConfig:
        limits, sandbox = self.run_code, self.sandbox
        if limits.max_code_bytes + limits.max_files_bytes > sandbox.budgets.workspace_mb << 20:
            raise ValueError(
                f"run_code.max_code_bytes + max_files_bytes ({limits.max_code_bytes + limits.max_files_bytes}) "
                f"must fit sandbox.budgets.workspace_mb ({sandbox.budgets.workspace_mb} MiB)"
            )
        if limits.max_fetch_files + 2 > sandbox.episode.max_calls:
            raise ValueError(
                f"run_code.max_fetch_files + 2 ({limits.max_fetch_files + 2}: write, run, one read a file) must be "
                f"at most sandbox.episode.max_calls ({sandbox.episode.max_calls})"
            )
        longest = limits.max_run_timeout_s + sandbox.calls.grace_s + SWEEP_ALLOWANCE_S
        if longest >= sandbox.episode.wall_s:
            raise ValueError(
                f"run_code.max_run_timeout_s ({limits.max_run_timeout_s:g}) with the call's grace and sweep must end "
                f"within sandbox.episode.wall_s ({sandbox.episode.wall_s:g})"
            )
        return self

    @classmethod
    def load(cls, path: str | Path) -> SandboxServeConfig:
        return load_config(path, cls, SandboxServeConfigError)


def _detail(status: int, detail: Any) -> web.Response:
    headers = {"Retry-After": "1"} if status == 503 else None
    return web.json_response({"detail": detail}, status=status, headers=headers)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    """Refusals in FastAPI's shape; aiohttp's own 404/405 too (SandboxFusion's clients read ``detail``)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _detail(exc.status, exc.reason)
    except Refused as exc:
        return _detail(exc.status, str(exc))
    except RunCodeRefused as exc:
        return _detail(exc.status, exc.detail)
    except Exception as exc:  # a fault of the service itself
        log.exception("%s %s failed", request.method, request.path)
        return _detail(500, f"{type(exc).__name__}: {exc}")


class SandboxService:
    """The routes over one `PoolThread` (``/run_code``) and one `Scorer` (``/v1/grade``)."""

    def __init__(self, config: SandboxServeConfig, pool: PoolThread, scorer: Scorer) -> None:
        self.config = config
        self.options = config.server
        self.pool = pool
        self.scorer = scorer
        self.admission = Admission(self.options.max_requests, self.options.max_inflight_memory_bytes)
        self._parse = ThreadPoolExecutor(1, thread_name_prefix="sandbox-requests")  # one: a parse holds the GIL
        self._grading = ThreadPoolExecutor(self.options.max_requests, thread_name_prefix="sandbox-grade")
        self._swe_grading = ThreadPoolExecutor(1, thread_name_prefix="sandbox-swe")  # one batch at a time, FIFO
        self._swe_requests = 0  # waiting or grading (read and written on the event loop only)
        self._swe_instances: dict | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.options.max_body_bytes, middlewares=[_errors])
        app.router.add_post("/run_code", self.run_code)
        app.router.add_post("/v1/grade", self.grade)
        app.router.add_get("/v1/ping", self.ping)
        app.router.add_get("/health", self.health)
        app.on_cleanup.append(self._stop)
        return app

    async def _stop(self, _app: web.Application) -> None:
        self._parse.shutdown(wait=False, cancel_futures=True)
        self._grading.shutdown(wait=False, cancel_futures=True)
        self._swe_grading.shutdown(wait=False, cancel_futures=True)

    async def _off_loop(self, executor: ThreadPoolExecutor, work, *args):
        return await asyncio.get_running_loop().run_in_executor(executor, work, *args)

    def _admit(self, request: web.Request, what: str):
        """The request's slot and the most memory its body can cost, held for a ``with`` block (module docstring):
        413 for a declared body past ``max_body_bytes``, 503 when the service is full."""
        size = declared_size(request, self.options.max_body_bytes)
        cost = BODY_COPIES * size + VALUE_BYTES * min(size, self.options.max_json_values)
        return self.admission.enter(cost, what)

    def _parsed(self, body: bytes, model: type[BaseModel]) -> Any:
        check_shape(body, self.options.max_json_values, self.options.max_json_depth)
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise RunCodeRefused(422, validation_detail(exc)) from None

    def _run_plan(self, body: bytes):
        request = self._parsed(body, RunCodeRequest)
        return plan(request, self.config.run_code, self.config.sandbox.budgets.memory_mb)

    async def run_code(self, request: web.Request) -> web.Response:
        with self._admit(request, "a run_code request"):
            body = await read_body(request, self.options.max_body_bytes, self.options.read_timeout_s)
            checked = await self._off_loop(self._parse, self._run_plan, body)
            del body
            try:
                answer = await self.pool.submit(run_code, checked, self.config.run_code)
            except Exception as exc:  # the pool's loop ended, a fault of ours: the sandbox's failure, never a 500
                log.exception("run_code failed in the pool")
                answer = sandbox_error(f"{type(exc).__name__}: {exc}")
            text = await self._off_loop(self._parse, answer.model_dump_json)
        return web.Response(text=text, content_type="application/json")

    async def grade(self, request: web.Request) -> web.Response:
        with self._admit(request, "a grade request"):
            body = await read_body(request, self.options.max_body_bytes, self.options.read_timeout_s)
            task, answer, name = await self._off_loop(self._parse, self._grade_task, body)
            del body
            if name == "swe":
                text = await self._grade_swe(task, answer)
            else:
                score = await self._off_loop(self._grading, self.scorer.score, task, answer)
                text = response_of(task, name, score).model_dump_json()
        return web.Response(text=text, content_type="application/json")

    async def _grade_swe(self, predictions, by_id) -> str:
        """A batch of SWE predictions graded, one batch at a time (503 past ``swe.max_requests`` waiting)."""
        options = self.config.swe
        if self._swe_requests >= options.max_requests:
            raise Refused(
                503, f"server busy: {self._swe_requests} SWE requests in flight (swe.max_requests); retry later"
            )
        self._swe_requests += 1
        try:
            sandbox = self.config.grade.sandbox
            report = await self._off_loop(self._swe_grading, swe_request.grade, predictions, by_id, options, sandbox)
        finally:
            self._swe_requests -= 1
        return json.dumps(report)

    def _grade_task(self, body: bytes):
        check_shape(body, self.options.max_json_values, self.options.max_json_depth)
        document = swe_request.swe_document(body)
        if document is not None:
            try:
                by_id = self._instances()
                return swe_request.checked_predictions(document, self.config.swe, by_id), by_id, "swe"
            except SweRequestError as exc:
                raise RunCodeRefused(exc.status, exc.detail) from None
        request = self._parsed(body, GradeRequest)
        try:
            task, name = task_of(request)
        except BadRow as exc:
            raise RunCodeRefused(422, [{"type": "row_invalid", "loc": ["body", "row"], "msg": str(exc)}]) from None
        return task, answer_of(task, request.answer), name

    def _instances(self) -> dict:
        """The SWE instances predictions may name, read once (503 when the file is missing: a set-up step)."""
        if self._swe_instances is None:
            try:
                self._swe_instances = swe_request.load_service_instances(self.config.swe)
            except FileNotFoundError as exc:
                raise Refused(503, str(exc)) from None
        return self._swe_instances

    async def ping(self, _request: web.Request) -> web.Response:
        return web.json_response("pong")

    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "owner": current_owner(),
                "languages": list(RUNNERS),
                "admission": self.admission.counts(),
                "run_code": {"running": self.pool.running, "waiting": self.pool.waiting},
                "swe": {"requests": self._swe_requests},
            }
        )


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), bound before the pool opens: a port in use fails
    at once (OSError EADDRINUSE, exit 6)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:  # a resolver code, not an errno: said as the address gym.fault knows
        raise OSError(errno.EADDRNOTAVAIL, f"cannot bind {host}: the name does not resolve ({exc.strerror})") from exc
    return socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)


async def serve(service: SandboxService, sock: socket.socket) -> None:
    """Answer on ``sock`` until SIGTERM or SIGINT; logs the bound address."""
    runner = web.AppRunner(
        service.app(),
        access_log=None,
        keepalive_timeout=service.options.read_timeout_s,
        handler_cancellation=True,  # a client that goes away cancels its run, and so frees its workspace
    )
    await runner.setup()
    await web.SockSite(runner, sock, backlog=LISTEN_BACKLOG).start()  # aiohttp listens again, with this
    host, port = sock.getsockname()[:2]
    log.info("sandbox service listening on http://%s:%d (owner %s)", host, port, current_owner())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
        log.info("stopping")
    finally:
        await runner.cleanup()
