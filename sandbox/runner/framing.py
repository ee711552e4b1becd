"""Frames on the container's attached stream: a `sandbox.wire.HEADER` length, then a JSON object.

Every reply is bounded where it is produced; `write_frame` is the last guard: a reply past MAX_FRAME goes
out as output_truncated rather than as a frame the host would refuse (a lost stream masks the episode).
"""

import json
import os

from sandbox.runner.replies import exec_result
from sandbox.wire import BODY, HEADER, ITEM, MAX_FRAME, RESULT


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:  # skip it whole so the stream stays in step, then say why
        while size:
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                return None
            size -= len(chunk)
        raise ValueError("frame exceeds the limit of %d bytes" % MAX_FRAME)
    body = read_exact(fd, size)
    return None if body is None else json.loads(body)


def encode_reply(message):
    # Text from the workspace (a file name that is not UTF-8 comes back from the OS with lone surrogates)
    # is sent as valid UTF-8, lone surrogates as "?": the host refuses JSON that is not.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", errors="replace")


def write_frame(fd, message):
    body = encode_reply(message)
    if len(body) > MAX_FRAME:  # the operations' own bounds keep every reply far below: a last guard
        inner = message.get(BODY) if isinstance(message.get(BODY), dict) else {}
        if ITEM in inner:
            inner = {ITEM: inner[ITEM], RESULT: exec_result(failure="output_truncated", truncated=True)}
        else:
            inner = {"failure": "output_truncated", "truncated": True}
        if "detail" not in inner:
            inner["detail"] = "the reply (%d bytes) passed the frame bound of %d bytes" % (len(body), MAX_FRAME)
        body = encode_reply({**message, BODY: inner})
    # Header and body in one writev: two writes reach the host as two of the engine's stream frames, two
    # wake-ups of its event loop per reply (measured: docs/performance.md). No copy of a large body either:
    # its memory is the container's budget.
    header = HEADER.pack(len(body))
    written = os.writev(fd, [header, body]) - len(header)
    if written < 0:  # the header went out in part (a pipe full to within 4 bytes)
        view = memoryview(header)[written + len(header) :]
        while view:
            view = view[os.write(fd, view) :]
        written = 0
    view = memoryview(body)[written:]
    while view:
        view = view[os.write(fd, view) :]
