"""The host's fast frame paths mean what the plain ones meant: a request spliced from its model's JSON decodes to
the body ``encode_frame`` sent, a reply validated from the decoded dict equals the one validated from JSON, and
the runner's one-``writev`` frame is one the host decodes, also when the pipe takes it in parts."""

from __future__ import annotations

import json
import os
import threading

import pytest
from pydantic import ValidationError

from sandbox import wire
from sandbox.protocol import (
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
    WriteFileRequest,
    encode_frame,
    reply_of,
    request_frame,
)
from sandbox.runner import framing, replies

ALLOW = ["/workspace", "/tmp/é"]
REQUESTS = [
    ExecRequest(argv=["python3", "-c", "print('é\u2028\"x')"], stdin=bytes(range(256)) * 4, env={"A": "ü"}),
    BatchExecRequest(items=[ExecRequest(argv=["true"]), ExecRequest(argv=["x"], stdin=b"\x00\xff")]),
    ReadFileRequest(path="/workspace/a"),
    WriteFileRequest(path="/workspace/\x01", data=b""),
    ListDirRequest(path="/workspace"),
    PutArchiveRequest(dest="/workspace", tar=b"abc"),
    GetArchiveRequest(path="/workspace"),
]


@pytest.mark.parametrize("request_model", REQUESTS, ids=lambda r: type(r).__name__)
def test_a_spliced_request_frame_decodes_to_the_plain_one(request_model):
    body = json.loads(request_model.model_dump_json())
    plain = encode_frame({wire.ID: 7, wire.OP: "exec", wire.BODY: {**body, "allow": ALLOW}})
    spliced = request_frame(7, "exec", request_model.model_dump_json().encode(), allow=ALLOW)
    assert FrameDecoder().feed(spliced) == FrameDecoder().feed(plain)
    bare = request_frame(3, "op", request_model.model_dump_json().encode())
    assert FrameDecoder().feed(bare) == [{wire.ID: 3, wire.OP: "op", wire.BODY: body}]


def test_a_request_frame_past_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr("sandbox.protocol.MAX_FRAME", 100)
    with pytest.raises(ValueError, match="exceeds"):
        request_frame(1, "exec", ExecRequest(argv=["true"], stdin=b"x" * 200).model_dump_json().encode())


REPLIES = [
    (ExecResult, replies.exec_result(stdout=bytes(range(256)), stderr=b"e", exit_code=1, failure="nonzero_exit")),
    (ReadFileResult, replies.file_result(data=replies.b64(b"\x00\xff"), truncated=True)),
    (GetArchiveResult, replies.file_result(tar=replies.b64(b"tar" * 99))),
    (ListDirResult, replies.file_result(entries=[{"name": "a?", "kind": "file", "size": 1}], total=1)),
    (FileResult, replies.file_result(bytes_written=3)),
    (BatchExecResult, {"results": [replies.exec_result(stdout=b"out")]}),
]


@pytest.mark.parametrize(("model", "body"), REPLIES, ids=lambda x: getattr(x, "__name__", ""))
def test_a_reply_validated_from_the_decoded_dict_equals_the_json_one(model, body):
    decoded = json.loads(json.dumps(body))
    assert reply_of(model, decoded) == model.model_validate_json(json.dumps(body))


def test_reply_bytes_are_strict_base64_and_models_built_in_process_are_unchanged():
    with pytest.raises(ValidationError):
        reply_of(ReadFileResult, {"data": "not base64!", "truncated": False, "failure": "ok", "detail": ""})
    assert reply_of(ExecResult, {"stdout": "YWJj"}).stdout == b"abc"
    assert ExecResult(stdout=b"abc").stdout == b"abc"


def test_a_frame_written_in_one_writev_is_read_whole_even_in_parts():
    """A body larger than a pipe holds goes out in several writes; the host still decodes one frame."""
    message = {wire.ID: 9, wire.OK: True, wire.BODY: {"data": "x" * (1 << 20)}}
    read, write = os.pipe()
    received = bytearray()

    def drain():
        while chunk := os.read(read, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        framing.write_frame(write, message)
    finally:
        os.close(write)
        reader.join()
        os.close(read)
    assert FrameDecoder().feed(bytes(received)) == [message]


@pytest.mark.parametrize("first_write", [0, 2, 4, 10])
def test_a_short_writev_is_finished_by_plain_writes(monkeypatch, first_write):
    """writev may take less than the whole frame (a signal, a full pipe): the rest goes out, header first."""
    written = bytearray()

    def short_writev(fd, buffers):
        data = b"".join(buffers)[:first_write]
        written.extend(data)
        return len(data)

    def write(fd, data):
        chunk = bytes(data[:3])  # a few bytes at a time
        written.extend(chunk)
        return len(chunk)

    monkeypatch.setattr(framing.os, "writev", short_writev)
    monkeypatch.setattr(framing.os, "write", write)
    message = {wire.ID: 1, wire.OK: True, wire.BODY: {"x": "y" * 20}}
    framing.write_frame(1, message)
    assert FrameDecoder().feed(bytes(written)) == [message]
