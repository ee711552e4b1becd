"""Every reply the runner makes fits the host's frame bound, whatever a request or a config asks for.

The attacks in the real sandbox are tests/integration/test_reply_bounds.py; here: the runner's last guard
on a frame, and every request or config field that sizes a reply is bounded where it is declared.
"""

from __future__ import annotations

import json
import os

import pytest
from pydantic import ValidationError

from gym.tools import ToolsConfig
from sandbox import wire
from sandbox.config import CallBudgets
from sandbox.failure import Verdict
from sandbox.protocol import (
    HEADER,
    MAX_DATA,
    MAX_FRAME,
    MAX_LIST_ENTRIES,
    ExecRequest,
    GetArchiveRequest,
    ListDirRequest,
    ReadFileRequest,
)
from sandbox.runner import command, files, framing, replies
from tasks.grader import Grader, GraderConfig
from tasks.task import StdinTest
from tests.task_support import task


def frames_written(message: dict, monkeypatch, frame: int) -> dict:
    monkeypatch.setattr(framing, "MAX_FRAME", frame)
    read, write = os.pipe()
    try:
        framing.write_frame(write, message)
        os.close(write)
        data = b""
        while chunk := os.read(read, 1 << 16):
            data += chunk
    finally:
        os.close(read)
    (size,) = HEADER.unpack(data[: HEADER.size])
    assert size == len(data) - HEADER.size <= frame
    return json.loads(data[HEADER.size :])


def test_the_runner_and_the_host_agree_on_the_bounds():
    # one copy of each figure, in sandbox/wire.py: the host's models and the runner's clamps read it
    assert (MAX_FRAME, MAX_DATA, MAX_LIST_ENTRIES) == (wire.MAX_FRAME, wire.MAX_DATA, wire.MAX_LIST_ENTRIES)
    assert (framing.MAX_FRAME, command.MAX_DATA, files.MAX_DATA, files.MAX_LIST_ENTRIES) == (
        wire.MAX_FRAME,
        wire.MAX_DATA,
        wire.MAX_DATA,
        wire.MAX_LIST_ENTRIES,
    )
    # the largest data reply is base64 (4/3) plus its JSON; the largest listing: 1,530 bytes a name as JSON
    assert MAX_DATA * 4 // 3 + (1 << 20) < MAX_FRAME and MAX_LIST_ENTRIES * (255 * 6 + 80) < MAX_FRAME


def test_a_reply_past_the_frame_bound_becomes_output_truncated(monkeypatch):
    names = [{"name": "\x01" * 255, "kind": "file", "size": 0}] * 100  # 153 kB of JSON
    sent = frames_written({"id": 7, "ok": True, "body": {"entries": names, "failure": "ok"}}, monkeypatch, 4096)
    assert sent["id"] == 7 and sent["ok"] and sent["body"]["failure"] == "output_truncated"
    assert sent["body"]["truncated"] and "passed the frame bound of 4096 bytes" in sent["body"]["detail"]
    assert "entries" not in sent["body"]

    item = {"item": 3, "result": replies.exec_result(stdout=b"\x01" * 100_000)}  # an exec_batch item, streamed
    sent = frames_written({"id": 8, "ok": True, "partial": True, "body": item}, monkeypatch, 4096)
    assert sent["partial"] and sent["body"]["item"] == 3
    assert sent["body"]["result"]["failure"] == "output_truncated" and sent["body"]["result"]["stdout"] == ""


def test_a_reply_within_the_bound_is_sent_as_is(monkeypatch):
    body = {"entries": [{"name": "a", "kind": "file", "size": 1}], "failure": "ok", "detail": ""}
    assert frames_written({"id": 1, "ok": True, "body": body}, monkeypatch, 4096)["body"] == body


@pytest.mark.parametrize(
    "make",
    [
        lambda n: ReadFileRequest(path="/workspace/x", max_bytes=n),
        lambda n: GetArchiveRequest(path="/workspace", max_bytes=n),
        lambda n: ExecRequest(argv=["true"], output_limit_bytes=n),
        lambda n: CallBudgets(output_limit_bytes=n),
        lambda n: ToolsConfig(read_bytes=n),
        lambda n: GraderConfig(output_limit_bytes=n),
    ],
    ids=["read_file", "get_archive", "exec", "sandbox.calls", "tools.read_bytes", "grader.output_limit_bytes"],
)
def test_every_field_that_sizes_a_reply_is_bounded(make):
    assert make(MAX_DATA) is not None
    with pytest.raises(ValidationError, match="less than or equal to"):
        make(MAX_DATA + 1)


def test_a_listing_asks_for_at_most_the_bound():
    assert ListDirRequest(path="/workspace").max_entries == MAX_LIST_ENTRIES
    with pytest.raises(ValidationError):
        ListDirRequest(path="/workspace", max_entries=MAX_LIST_ENTRIES + 1)


def test_an_expected_output_no_reply_can_carry_is_refused_with_its_reason():
    """A row whose expected output would need an output bound past MAX_DATA cannot be graded: it is
    refused for reward with the reason, never run with a bound the protocol refuses (a crash)."""
    huge = StdinTest(input="", output="x" * (MAX_DATA // 2))
    request, judge = Grader(None, GraderConfig()).plan(task(tests=(huge,)), 0, huge)
    assert request is None
    refused = judge(None)
    assert refused.verdict == Verdict.INFRA_ERROR and "passes the sandbox's data bound" in refused.detail
    fits = StdinTest(input="", output="x" * (MAX_DATA // 2 - 8192))
    request, _ = Grader(None, GraderConfig()).plan(task(tests=(fits,)), 0, fits)
    assert request is not None and request.output_limit_bytes <= MAX_DATA
