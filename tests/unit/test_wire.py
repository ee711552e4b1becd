"""The host and the runner read one copy of the wire: the same op names, the same envelope, result bodies with
exactly the fields of the host's models (sandbox/wire.py, sandbox/protocol.py, sandbox/runner/)."""

from __future__ import annotations

import json
import os

from sandbox import protocol, wire
from sandbox.protocol import ExecResult, FileResult, GetArchiveResult, ListDirResult, ReadFileResult
from sandbox.runner import framing, replies, serve


def test_the_runner_answers_every_op_the_host_types_and_ping():
    assert set(serve.OPS) == set(protocol.OPERATIONS) | {wire.PING}
    assert set(protocol.OPERATIONS) == {
        wire.EXEC,
        wire.EXEC_BATCH,
        wire.READ_FILE,
        wire.WRITE_FILE,
        wire.LIST_DIR,
        wire.PUT_ARCHIVE,
        wire.GET_ARCHIVE,
        wire.RESET,
    }


def test_an_exec_result_body_has_exactly_the_models_fields():
    body = replies.exec_result(stdout=b"out", exit_code=3, failure="nonzero_exit")
    assert set(body) == set(ExecResult.model_fields)
    result = ExecResult.model_validate_json(json.dumps(body))
    assert (result.stdout, result.exit_code, result.failure.value) == (b"out", 3, "nonzero_exit")


def test_file_result_bodies_validate_as_the_host_reads_them():
    bodies = {
        ReadFileResult: replies.file_result(data=replies.b64(b"\x00\xff"), truncated=False),
        FileResult: replies.file_result(bytes_written=7),
        ListDirResult: replies.file_result(entries=[{"name": "a", "kind": "file", "size": 1}], total=1),
        GetArchiveResult: replies.file_result("tool_error", "too big", tar=""),
    }
    for model, body in bodies.items():
        model.model_validate_json(json.dumps(body))  # extra="forbid": a field the model lacks would raise
    assert ReadFileResult.model_validate_json(json.dumps(bodies[ReadFileResult])).data == b"\x00\xff"


def test_a_frame_the_runner_writes_is_one_the_host_decodes():
    message = {wire.ID: 5, wire.OK: True, wire.PARTIAL: True, wire.BODY: {wire.ITEM: 0, wire.RESULT: {}}}
    read, write = os.pipe()
    try:
        framing.write_frame(write, message)
        os.close(write)
        frames = protocol.FrameDecoder().feed(os.read(read, 1 << 16))
    finally:
        os.close(read)
    assert frames == [message]
