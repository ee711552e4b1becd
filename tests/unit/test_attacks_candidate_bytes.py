"""Attacks on pure grading logic: what a candidate's bytes and skips do to SWE grading, and a CP deadline kill."""

from __future__ import annotations

import json

import pytest

from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest, ExecResult
from tasks.grader import deadline_kill
from tasks.swe.grader import as_bytes, shown
from tasks.swe.resolution import InstanceResult, StrippedPath


def test_a_path_of_any_bytes_is_reported_as_text_and_serialises():
    for path, text in (("a\udcffb", "a\ufffdb"), ("a\ud800b", "a\ufffd\ufffd\ufffdb"), ("é/ok.py", "é/ok.py")):
        assert shown(path) == text
        result = InstanceResult(
            instance_id="i", resolved=False, status="unresolved", stripped=(StrippedPath(path=shown(path), reason="r"),)
        )
        assert json.loads(result.model_dump_json())["stripped"][0]["path"] == text
    raw = InstanceResult(
        instance_id="i", resolved=False, status="unresolved", stripped=(StrippedPath(path="a\udcffb", reason="r"),)
    )
    with pytest.raises(ValueError):  # the control: the path as listed cannot be serialised
        raw.model_dump_json()


def test_candidate_text_goes_back_to_its_bytes():
    assert as_bytes("a\udcffb") == b"a\xffb"  # a surrogate escape: the byte it stands for
    assert as_bytes("a\ud800b") == b"a\xed\xa0\x80b"  # no byte behind it: its UTF-8 form, never an exception
    assert as_bytes("é") == "é".encode()


def test_a_deadline_the_episode_cut_short_is_a_deadline_kill():
    request = ExecRequest(argv=["x"], timeout_s=11.0, cpu_limit_s=1.25, starved_grace_s=22.0)
    cut = ExecResult(failure=FailureKind.TIMEOUT, wall_s=6.75, cpu_s=0.02)  # the workspace cut 11 s to 6.75 s
    assert deadline_kill(request, cut)
    assert not deadline_kill(request, cut.model_copy(update={"cpu_s": 1.3}))  # at its CPU limit: it computed
    assert not deadline_kill(request, cut.model_copy(update={"failure": FailureKind.OK}))
