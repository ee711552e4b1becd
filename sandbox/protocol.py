"""Typed request/result pairs for every sandbox operation, and the wire framing.

The same models are used in-process and on the wire to the in-container runner
(`sandbox/runner/` reads the same field names). Bytes travel as base64 in
JSON. The frame, its bounds and the op names are `sandbox.wire`'s, the one
stdlib-only module both sides import: a 4-byte big-endian length followed by a
JSON object ``{"id", "op", "body"}`` (requests) or ``{"id", "ok", "body" | "error"}``.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationInfo, model_validator

from sandbox import wire
from sandbox.failure import FailureKind
from sandbox.wire import HEADER, MAX_DATA, MAX_FRAME, MAX_LIST_ENTRIES

R = TypeVar("R", bound=BaseModel)

# Replies are validated from the dicts the frame decoder already parsed (no second JSON pass over a large body):
# under the WIRE context a str is standard base64, strictly checked; elsewhere (models built in-process, JSON
# mode, where ``val_json_bytes`` decodes it) nothing changes.
WIRE = {"wire": True}


def _from_wire(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, str) and isinstance(info.context, dict) and info.context.get("wire") is True:
        return base64.b64decode(value, validate=True)
    return value


# pydantic's ser_json_bytes="base64" writes the URL-safe alphabet ('-', '_'), which the runner's
# base64.b64decode silently drops (corrupting the data or failing on padding): write the standard one.
# Reading accepts both alphabets.
WireBytes = Annotated[
    bytes,
    BeforeValidator(_from_wire),
    PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), return_type=str, when_used="json"),
]


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", val_json_bytes="base64")


class ExecRequest(_Wire):
    """Run one command in the workspace (its own process group, as the sandbox user)."""

    argv: list[str] = Field(min_length=1, description="program and arguments; no shell unless you ask for one")
    cwd: str = Field("/workspace", description="working directory; must resolve inside the cwd allowlist")
    stdin: WireBytes = Field(b"", description="bytes written to the command's stdin, then closed")
    timeout_s: float | None = Field(
        None, gt=0, description="wall-clock deadline; None = the workspace's per-call budget"
    )
    output_limit_bytes: int | None = Field(
        None, gt=0, le=MAX_DATA, description="stdout+stderr bound; None = the workspace budget"
    )
    memory_limit_bytes: int | None = Field(
        None, gt=0, description="RLIMIT_AS for this process (graders' per-test limit)"
    )
    cpu_limit_s: float | None = Field(
        None,
        gt=0,
        description="CPU seconds of the whole process tree (user + sys), "
        "polled from the container's cgroup; past it: killed, failure timeout",
    )
    starved_grace_s: float | None = Field(
        None,
        ge=0,
        description="with cpu_limit_s: a command the host starved of CPU (its most-delayed task waited for a CPU "
        "at least half the wall time, beyond what its own CPU use explains; no task niced, SCHED_IDLE/BATCH or "
        "pinned) is not killed at timeout_s but runs on, up to this many seconds more, until it exits or hits "
        "its CPU limit; one still starved at that cap comes back with starved set. None: killed at timeout_s",
    )
    env: dict[str, str] = Field(default_factory=dict, description="added to the clean sandbox environment")
    fork_server: bool = Field(
        False,
        description="run a `python3 -I` command (a -c program or a script, no other option, no env of its own) in "
        "a child the workspace's fork server forks from an interpreter started with the container, in the "
        "command's identity and limits, instead of a fresh interpreter (its start-up skipped; a command of "
        "another shape, or a workspace without the server, runs the usual way)",
    )

    @model_validator(mode="after")
    def _grace_needs_a_cpu_limit(self) -> ExecRequest:
        if self.starved_grace_s is not None and self.cpu_limit_s is None:
            raise ValueError("starved_grace_s needs cpu_limit_s: starvation is judged against the CPU limit")
        return self


class ExecResult(_Wire):
    """What a command did. ``failure`` is classified from kernel counters and exit status."""

    exit_code: int | None = Field(None, description="exit status; None when killed by a signal or never started")
    signal: int | None = Field(None, description="terminating signal number, if any")
    stdout: WireBytes = b""
    stderr: WireBytes = b""
    wall_s: float = 0.0
    cpu_s: float = Field(
        0.0,
        description="CPU seconds (user + sys) of the command's process tree (its own rusage "
        "where the container's cgroup cannot be read)",
    )
    max_rss_kb: int = 0
    failure: FailureKind = FailureKind.OK
    truncated: bool = False
    detail: str = ""
    run_delay_s: float | None = Field(
        None,
        description="seconds the command's most-delayed task spent runnable but waiting for a CPU (at least), "
        "from the kernel's schedstat, read every 0.5 s while the command ran (None: no starvation grace asked)",
    )
    starved: bool = Field(
        False,
        description="killed at the end of its starvation grace while the host still starved it of CPU: "
        "the host's failure, not the command's",
    )

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class BatchExecRequest(_Wire):
    """Several commands in ONE runner round trip, run one after another (e.g. all tests of a task)."""

    items: list[ExecRequest] = Field(min_length=1)
    stop_on_failure: bool = Field(False, description="stop at the first item whose failure is not ok")
    stop_on_deadline: bool = Field(
        False,
        description="stop at the first item killed at its wall-clock deadline "
        "(a sleeper: the rest would each wait out theirs)",
    )


class BatchExecResult(_Wire):
    results: list[ExecResult]


class ReadFileRequest(_Wire):
    path: str
    max_bytes: int = Field(1 << 20, gt=0, le=MAX_DATA)


class ReadFileResult(_Wire):
    data: WireBytes = b""
    truncated: bool = False
    failure: FailureKind = FailureKind.OK
    detail: str = ""


class WriteFileRequest(_Wire):
    path: str
    data: WireBytes
    mode: int = Field(0o644, ge=0, le=0o777)
    mkdir: bool = Field(True, description="create missing parent directories (inside the allowlist)")


class FileResult(_Wire):
    """Result of write_file / put_archive."""

    bytes_written: int = 0
    failure: FailureKind = FailureKind.OK
    detail: str = ""


class ListDirRequest(_Wire):
    path: str
    max_entries: int = Field(
        MAX_LIST_ENTRIES, gt=0, le=MAX_LIST_ENTRIES, description="the first this many entries by name are returned"
    )


class DirEntry(_Wire):
    name: str
    kind: Literal["file", "dir", "link"]
    size: int


class ListDirResult(_Wire):
    entries: list[DirEntry] = Field(default_factory=list)
    total: int = Field(0, description="entries in the directory (a floor past a million)")
    truncated: bool = Field(False, description="more entries than max_entries: failure is output_truncated")
    failure: FailureKind = FailureKind.OK
    detail: str = ""


class PutArchiveRequest(_Wire):
    dest: str
    tar: WireBytes


class GetArchiveRequest(_Wire):
    path: str
    max_bytes: int = Field(64 << 20, gt=0, le=MAX_DATA)


class GetArchiveResult(_Wire):
    tar: WireBytes = b""
    failure: FailureKind = FailureKind.OK
    detail: str = ""


class ResetRequest(_Wire):
    """Make the container as it was when its runner started (`sandbox/runner/reset.py`)."""


class ResetResult(_Wire):
    clean: bool = Field(False, description="every check passed: the container may serve another task")
    detail: str = Field("", description="what differs from the start, when not clean")


# op name -> (request model, result model)
OPERATIONS: dict[str, tuple[type[_Wire], type[_Wire]]] = {
    wire.EXEC: (ExecRequest, ExecResult),
    wire.EXEC_BATCH: (BatchExecRequest, BatchExecResult),
    wire.READ_FILE: (ReadFileRequest, ReadFileResult),
    wire.WRITE_FILE: (WriteFileRequest, FileResult),
    wire.LIST_DIR: (ListDirRequest, ListDirResult),
    wire.PUT_ARCHIVE: (PutArchiveRequest, FileResult),
    wire.GET_ARCHIVE: (GetArchiveRequest, GetArchiveResult),
    wire.RESET: (ResetRequest, ResetResult),
}


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ValueError(f"request frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return HEADER.pack(len(body)) + body


def request_frame(request_id: int, op: str, body: bytes, **extra: Any) -> bytes:
    """The frame of one request whose body is a model's JSON (``model_dump_json``), with ``extra``'s fields added.

    The same bytes' meaning as ``encode_frame({ID, OP, BODY: {**body, **extra}})``, but the body is spliced in as
    it is: parsing it back and serializing it again costs two more passes over every byte (2.4 ms for a 1 MiB
    stdin, measured in docs/performance.md)."""
    parts = [body]
    if extra:  # a model's JSON is an object; its fields never include extra's (extra="forbid")
        tail = json.dumps(extra, separators=(",", ":")).encode()
        parts = [memoryview(body)[:-1], b",", tail[1:]] if body != b"{}" else [tail]
    head = json.dumps({wire.ID: request_id, wire.OP: op}, separators=(",", ":")).encode()[:-1]
    parts = [head, b',"', wire.BODY.encode(), b'":', *parts, b"}"]
    size = sum(len(part) for part in parts)
    if size > MAX_FRAME:
        raise ValueError(f"request frame of {size} bytes exceeds {MAX_FRAME}")
    return b"".join([HEADER.pack(size), *parts])  # the one copy of the body


def reply_of(model: type[R], body: dict[str, Any]) -> R:
    """A result model from a reply body the frame decoder parsed (bytes as the runner's base64)."""
    return model.model_validate(body, context=WIRE)


class FrameDecoder:
    """Incremental decoder of length-prefixed JSON frames from a byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME:
                raise ValueError(f"runner frame of {size} bytes exceeds {MAX_FRAME}")
            if len(self._buffer) < HEADER.size + size:
                break
            body = bytes(self._buffer[HEADER.size : HEADER.size + size])
            del self._buffer[: HEADER.size + size]
            frames.append(json.loads(body))
        return frames
