"""SandboxFusion's ``/run_code`` over our workspaces: its request and response schema, and how one request runs.

The schema is SandboxFusion's (its server's ``RunCodeRequest``/``RunCodeResponse`` and its client's
``CommandRunResult``), so its official client and the code that calls it (verl's sandbox-fusion reward) work
unchanged. One request runs in a fresh workspace from the pool, never shared with another request: its
``files`` are written under the workspace root, its code into a file beside them, one command runs it with
the request's stdin and deadline, then ``fetch_files`` are read back; the workspace is destroyed after.

What the candidate's code does is data in the response, never an error of the request: a deadline is
``TimeLimitExceeded``; an exit status, a signal, an OOM kill, a pids-limit hit, a full disk, output past the
bound (killed, ``truncated`` set) are ``Finished`` with the return code (``-N`` for signal N, as SandboxFusion's
subprocesses report it) and the response ``Failed``. Only the sandbox's own failure (the engine, the daemon,
a runner lost to the host) is ``SandboxError``. Our classification rides along in two fields SandboxFusion's
clients ignore: ``run_result.failure`` (`FailureKind`) and ``run_result.truncated``.

A request is checked before any workspace is taken (`plan`): languages this image runs (``python``,
``bash``); sizes of code, stdin and files; file paths relative and inside the workspace (no absolute path,
no ``..``); timeouts and the memory limit clamped to `RunCodeLimits` and the sandbox's budget.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import MAX_DATA, ExecRequest, ExecResult

# Every language SandboxFusion's API names (its `Language` literal): a request for one of them that this image
# does not hold is refused in the shape SandboxFusion refuses a language it does not know.
FUSION_LANGUAGES = (
    "python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql", "rust",
    "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script", "jest",
    "verilog", "python_gpu", "lean", "swift", "racket",
)  # fmt: skip


@dataclass(frozen=True)
class Runner:
    """How the runner image runs one language: the interpreter and the code file's suffix."""

    argv: tuple[str, ...]
    suffix: str


# What the runner image holds (images/inputs.py BASE_PACKAGES: python3 and the base system's bash).
RUNNERS: dict[str, Runner] = {
    "python": Runner(("python3",), ".py"),
    "bash": Runner(("/bin/bash",), ".sh"),
}
CODE_STEM = "__run_code__"  # the code's file in the workspace root, beside the request's files
KILLED = -9  # the return code of a run the sandbox ended without an exit status of its own (SIGKILL)
PATH_CHARS = 1024
OUTSIDE = "a path relative to the workspace root: no absolute path, no '..', no NUL, at most 1024 characters"


class RunCodeLimits(BaseModel):
    """Bounds of one ``/run_code`` request (``run_code:`` in a sandbox-serve config)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_code_bytes: int = Field(1 << 20, ge=1, le=MAX_DATA)
    """Longest ``code`` in UTF-8 bytes (413 above)."""
    max_stdin_bytes: int = Field(8 << 20, ge=0, le=MAX_DATA)
    """Longest ``stdin`` in UTF-8 bytes (413 above)."""
    max_files: int = Field(256, ge=0, le=4096)
    """Entries of ``files`` at most (413 above)."""
    max_files_bytes: int = Field(16 << 20, ge=0, le=MAX_DATA)
    """Bytes of every file of ``files`` together, decoded (413 above); with the code they must fit the
    workspace's disk budget (sandbox.budgets.workspace_mb)."""
    max_fetch_files: int = Field(16, ge=0, le=256)
    """Entries of ``fetch_files`` at most (413 above); each is one read call of the workspace."""
    max_fetch_bytes: int = Field(4 << 20, ge=1, le=MAX_DATA)
    """Bytes read back of each fetched file; a longer one comes back cut there and is named in
    ``truncated_files``."""
    max_run_timeout_s: float = Field(60.0, gt=0)
    """Longest ``run_timeout``: a longer one is cut to this (python and bash compile nothing: ``compile_timeout``
    is checked, not used)."""


class RunCodeRequest(BaseModel):
    """SandboxFusion's request. Unknown fields are ignored, as its server does."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    compile_timeout: float = Field(10, ge=0, allow_inf_nan=False, description="compile timeout (compiled languages)")
    run_timeout: float = Field(10, gt=0, allow_inf_nan=False, description="deadline of the run, wall clock")
    memory_limit_MB: int = Field(-1, description="address-space limit of the run in MiB; 0 or less: none")
    code: str = Field(description="the code to run")
    stdin: str | None = Field(None, description="written to the run's stdin (nothing when null)")
    language: str = Field(description="one of FUSION_LANGUAGES; this sandbox runs those of RUNNERS")
    files: dict[str, str | None] = Field({}, description="workspace path -> base64 content (null: skipped)")
    fetch_files: list[str] = Field([], description="workspace paths read back after the run")


class CommandRunStatus(str, Enum):
    FINISHED = "Finished"
    ERROR = "Error"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"


class RunStatus(str, Enum):
    SUCCESS = "Success"
    FAILED = "Failed"
    SANDBOX_ERROR = "SandboxError"


class CommandRunResult(BaseModel):
    """One command's outcome, as SandboxFusion reports it, plus our classification."""

    status: CommandRunStatus
    execution_time: float | None = None
    cpu_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    failure: FailureKind | None = Field(None, description="our classification (sandbox.failure); ignored by clients")
    truncated: bool = Field(False, description="stdout+stderr passed the output bound: the run was killed there")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}
    truncated_files: list[str] = Field([], description="fetched files cut at max_fetch_bytes; ignored by clients")


class RunCodeRefused(Exception):
    """A request refused before it runs: HTTP ``status`` with FastAPI's ``detail`` items (type, loc, msg)."""

    def __init__(self, status: int, detail: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail))
        self.status = status
        self.detail = detail


def problem(kind: str, loc: tuple[Any, ...], msg: str) -> dict[str, Any]:
    """One ``detail`` item, located in the body as FastAPI locates it."""
    return {"type": kind, "loc": ["body", *loc], "msg": msg}


def validation_detail(err: ValidationError) -> list[dict[str, Any]]:
    """A pydantic error as FastAPI's 422 ``detail`` (the inputs themselves are not echoed: they may be large)."""
    return [problem(e["type"], tuple(e["loc"]), e["msg"]) for e in err.errors(include_url=False)][:20]


@dataclass(frozen=True)
class Plan:
    """What one checked request does in its workspace."""

    files: dict[str, bytes]  # workspace-relative path -> content, the code file included
    exec: ExecRequest
    fetch: tuple[tuple[str, str], ...]  # (the name as asked, its workspace-relative path)


def workspace_path(name: str) -> str | None:
    """``name`` as a normalised path relative to the workspace root, or None when it could leave it (absolute,
    ``..``, empty, NUL, overlong)."""
    if not name or len(name) > PATH_CHARS or "\x00" in name or name.startswith("/"):
        return None
    if ".." in name.split("/"):  # no component climbs, so the normal form cannot either
        return None
    normal = posixpath.normpath(name)
    return None if normal == "." else normal


def plan(request: RunCodeRequest, limits: RunCodeLimits, memory_mb: int) -> Plan:
    """The request's files, command and reads, or `RunCodeRefused` (422 for what is malformed, 413 for what is
    too large) naming each fault. ``memory_mb`` is the workspace's memory budget: the most a limit may ask."""
    runner = RUNNERS.get(request.language)
    if runner is None:
        known = "a SandboxFusion language" if request.language in FUSION_LANGUAGES else "no SandboxFusion language"
        allowed = " or ".join(repr(name) for name in RUNNERS)
        msg = f"Input should be {allowed}: this sandbox runs those ({request.language[:40]!r} is {known})"
        raise RunCodeRefused(422, [problem("literal_error", ("language",), msg)])
    faults: list[dict[str, Any]] = []
    code, stdin = request.code.encode("utf-8", "surrogatepass"), (request.stdin or "").encode("utf-8", "surrogatepass")
    for field, size, bound in (
        ("code", len(code), limits.max_code_bytes),
        ("stdin", len(stdin), limits.max_stdin_bytes),
        ("files", len(request.files), limits.max_files),
        ("fetch_files", len(request.fetch_files), limits.max_fetch_files),
    ):
        if size > bound:
            faults.append(problem("too_large", (field,), f"{size} is more than the {bound} this server takes"))
    if faults:
        raise RunCodeRefused(413, faults)
    code_name = CODE_STEM + runner.suffix
    files = _decoded_files(request.files, limits.max_files_bytes, code_name)
    files[code_name] = code
    fetch = []
    for index, name in enumerate(request.fetch_files):
        path = workspace_path(name)
        if path is None:
            faults.append(problem("path_outside", ("fetch_files", index), OUTSIDE))
        fetch.append((name, path or ""))
    if faults:
        raise RunCodeRefused(422, faults)
    asked = request.memory_limit_MB
    memory = None if asked <= 0 else min(asked, memory_mb) << 20
    command = ExecRequest(
        argv=[*runner.argv, code_name],
        stdin=stdin,
        timeout_s=min(request.run_timeout, limits.max_run_timeout_s),
        memory_limit_bytes=memory,
    )
    return Plan(files=files, exec=command, fetch=tuple(fetch))


def _decoded_files(files: dict[str, str | None], bound: int, reserved: str) -> dict[str, bytes]:
    """The request's files decoded, keyed by their normalised paths; `RunCodeRefused` for a path that could leave
    the workspace, names the same file twice or takes the code's name (422), and past ``bound`` bytes (413)."""
    decoded: dict[str, bytes] = {}
    faults: list[dict[str, Any]] = []
    total = 0
    for name, content in files.items():
        path = workspace_path(name)
        if path is None or path == reserved or path in decoded:
            why = "the code's own file" if path == reserved else "named twice" if path else "outside the workspace"
            faults.append(problem("path_outside", ("files", name[:200]), f"{OUTSIDE} ({why})"))
            continue
        if content is None:  # SandboxFusion skips a file without content
            continue
        total += len(content) * 3 // 4
        if total > bound:
            raise RunCodeRefused(
                413, [problem("too_large", ("files",), f"more than the {bound} bytes this server takes")]
            )
        try:
            decoded[path] = base64.b64decode(content)
        except (binascii.Error, ValueError) as exc:
            faults.append(problem("base64_invalid", ("files", name[:200]), f"not base64: {exc}"))
    if faults:
        raise RunCodeRefused(422, faults)
    return decoded


def command_result(result: ExecResult) -> CommandRunResult:
    """An exec's outcome as SandboxFusion's ``CommandRunResult`` (see the module docstring)."""
    failure = result.failure
    if failure in (FailureKind.INFRA_ERROR, FailureKind.SANDBOX_DENIED, FailureKind.TOOL_ERROR):
        return CommandRunResult(status=CommandRunStatus.ERROR, stderr=result.detail, failure=failure)
    timed_out = failure == FailureKind.TIMEOUT
    if timed_out:
        code = None
    elif result.exit_code is not None:
        code = result.exit_code
    else:
        code = -result.signal if result.signal else KILLED
    return CommandRunResult(
        status=CommandRunStatus.TIME_LIMIT_EXCEEDED if timed_out else CommandRunStatus.FINISHED,
        execution_time=result.wall_s,
        cpu_time=result.cpu_s,
        return_code=code,
        stdout=result.stdout.decode("utf-8", "replace"),
        stderr=result.stderr.decode("utf-8", "replace"),
        failure=failure,
        truncated=result.truncated,
    )


def response_of(run: CommandRunResult, pod: str | None) -> RunCodeResponse:
    """The response around one run, with SandboxFusion's status rules: an ``Error`` is the sandbox's, a deadline
    or a non-zero return code fails, anything else succeeds. The message names our classification when it is not
    ``ok`` (SandboxFusion leaves it empty unless the sandbox failed)."""
    if run.status == CommandRunStatus.ERROR:
        status = RunStatus.SANDBOX_ERROR
    elif run.status == CommandRunStatus.TIME_LIMIT_EXCEEDED or run.return_code != 0:
        status = RunStatus.FAILED
    else:
        status = RunStatus.SUCCESS
    message = "" if run.failure in (None, FailureKind.OK) else f"run: {run.failure.value}"
    if run.status == CommandRunStatus.ERROR:
        message = f"sandbox: {run.stderr or run.failure}"[:2000]
    return RunCodeResponse(status=status, message=message, run_result=run, executor_pod_name=pod)


def sandbox_error(message: str) -> RunCodeResponse:
    """The response when the sandbox itself failed (no run result to report)."""
    return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=f"sandbox: {message}"[:2000])


async def run_code(pool, plan: Plan, limits: RunCodeLimits, owner: str = "run_code") -> RunCodeResponse:
    """Run a checked request (`plan`) in a fresh workspace of ``pool`` (a `WorkspacePool` or `FleetPool`)."""
    try:
        async with pool.acquire(owner) as ws:
            written = await ws.put_files(plan.files)
            if written.failure != FailureKind.OK:
                return sandbox_error(f"writing the files: {written.failure.value}: {written.detail}")
            run = command_result(await ws.exec(plan.exec))
            answer = response_of(run, ws.id[:12])
            if run.status == CommandRunStatus.ERROR or ws.broken:
                return answer
            files, cut = await _fetch(ws, plan.fetch, limits.max_fetch_bytes)
    except InfraError as exc:  # no workspace could be started (engine down, image missing)
        return sandbox_error(str(exc))
    return answer.model_copy(update={"files": files, "truncated_files": cut})


async def _fetch(ws, fetch: tuple[tuple[str, str], ...], max_bytes: int) -> tuple[dict[str, str], list[str]]:
    """The fetched files that exist and are regular files (base64), and the names of those cut at ``max_bytes``;
    SandboxFusion leaves out a file that is not there, and so does this."""
    files: dict[str, str] = {}
    cut: list[str] = []
    for name, path in fetch:
        read = await ws.read_file(path, max_bytes=max_bytes)
        if read.failure == FailureKind.INFRA_ERROR:  # the sandbox's failure, not a missing file
            raise InfraError(f"reading {name[:200]!r} back: {read.detail}")
        if read.failure in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED):
            files[name] = base64.b64encode(read.data).decode("ascii")
            if read.truncated:
                cut.append(name)
    return files, cut
