"""Pure logic of the sandbox layer: protocol framing, config validation, seccomp, labels, GC reasons."""

from __future__ import annotations

import json
import os
import time

import pytest
from pydantic import ValidationError

from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind
from sandbox.gc import reason_to_collect
from sandbox.labels import Labels, current_owner, owner_alive
from sandbox.protocol import ExecRequest, ExecResult, FrameDecoder, encode_frame
from sandbox.seccomp import ALLOWED, profile, security_opt


def test_frames_round_trip_across_arbitrary_chunking():
    messages = [{"id": i, "op": "exec", "body": {"x": "y" * i}} for i in range(50)]
    stream = b"".join(encode_frame(m) for m in messages)
    decoder = FrameDecoder()
    decoded = []
    for start in range(0, len(stream), 7):
        decoded.extend(decoder.feed(stream[start : start + 7]))
    assert decoded == messages


def test_oversized_frame_is_refused():
    decoder = FrameDecoder()
    with pytest.raises(ValueError, match="exceeds"):
        decoder.feed((2**31).to_bytes(4, "big") + b"{}")


def test_bytes_travel_as_base64_and_back():
    request = ExecRequest(argv=["cat"], stdin=b"\x00\xffbinary")
    wire = json.loads(request.model_dump_json())
    assert wire["stdin"] == "AP9iaW5hcnk="
    assert ExecRequest.model_validate_json(json.dumps(wire)) == request
    result = ExecResult.model_validate_json(json.dumps({"stdout": "aGk=", "failure": "oom"}))
    assert result.stdout == b"hi" and result.failure == FailureKind.OOM


def test_requests_reject_bad_fields():
    with pytest.raises(ValidationError):
        ExecRequest(argv=[])
    with pytest.raises(ValidationError):
        ExecRequest(argv=["true"], timeout_s=-1)
    with pytest.raises(ValidationError):
        ExecRequest(argv=["true"], shell=True)  # unknown field


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="memory_mb"):
        SandboxConfig.model_validate({"budgets": {"memory_mb": 1}})
    with pytest.raises(ValidationError, match="must stay below memory_mb"):
        SandboxConfig.model_validate({"budgets": {"memory_mb": 256, "workspace_mb": 250}})
    with pytest.raises(ValidationError, match="allowlist entry"):
        SandboxConfig.model_validate({"allowlist": ["relative/dir"]})
    with pytest.raises(ValidationError, match="Extra inputs"):
        SandboxConfig.model_validate({"budgetz": {}})


def test_config_from_yaml(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("sandbox:\n  budgets:\n    pids: 64\n  calls:\n    timeout_s: 3\n")
    config = SandboxConfig.from_yaml(path)
    assert config.budgets.pids == 64 and config.calls.timeout_s == 3


def test_seccomp_profile_is_tighter_than_dockers_default():
    names = {name for rule in profile()["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for name in rule["names"]}
    for denied in (
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "io_uring_setup",
        "userfaultfd",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "mount",
        "unshare",
        "setns",
        "clock_settime",
        "kcmp",
        "pidfd_getfd",
        "open_by_handle_at",
        "name_to_handle_at",
        "memfd_secret",
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setattr",
    ):
        assert denied not in names
    assert profile()["defaultAction"] == "SCMP_ACT_ERRNO"
    clone = [r for r in profile()["syscalls"] if r["names"] == ["clone"]][0]
    assert clone["args"][0]["op"] == "SCMP_CMP_MASKED_EQ" and clone["args"][0]["valueTwo"] == 0
    assert len(ALLOWED) == len(set(ALLOWED))
    assert security_opt("strict")[0].startswith("seccomp={") and security_opt("docker-default") == []


def test_labels_round_trip_and_owner_liveness():
    labels = Labels.for_this_process(ttl_s=60, role="grading")
    parsed = Labels.parse(labels.as_dict())
    assert (parsed.owner, parsed.role) == (labels.owner, "grading")
    assert parsed.deadline - parsed.created == pytest.approx(60, abs=0.01)
    assert owner_alive(current_owner())
    host = current_owner().split(":")[0]
    assert not owner_alive(f"{host}:{os.getpid()}:1")  # same pid, other start time: a recycled pid
    assert not owner_alive(f"{host}:999999999:1")
    assert owner_alive("another-host:1:1")  # cannot judge another host's processes


def test_gc_reasons():
    now = time.time()
    live = Labels(owner=current_owner(), created=now, deadline=now + 60)
    assert reason_to_collect(live, now) is None
    assert "deadline" in reason_to_collect(Labels(owner=current_owner(), created=now, deadline=now - 5), now)
    host = current_owner().split(":")[0]
    assert "gone" in reason_to_collect(Labels(owner=f"{host}:999999999:1", created=now, deadline=now + 60), now)
    assert reason_to_collect(live, now, everything=True)


def test_cli_help_lists_every_command_without_importing_torch():
    import subprocess
    import sys

    code = "import sys; from gym.cli import main; main(['--help'])"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\n",
        ],
        capture_output=True,
        text=True,
    )
    assert "images" in out.stdout and "gc" in out.stdout and "bench" in out.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom gym.cli import build_parser\nbuild_parser()\nprint('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "False"


def test_abandon_cuts_every_diagnosis_in_flight_short(monkeypatch):
    """Two calls whose runner was lost are blamed at once (blames are not serialized); abandoning the workspace
    (its engine drained) ends both diagnoses at once as infra_error, not only the one that started last."""
    import trio

    from sandbox import workspace as module

    started = []

    async def diagnose_forever(engine, container_id, *, answered):
        started.append(container_id)
        await trio.sleep_forever()

    class Stream:
        def abort(self):
            pass

    monkeypatch.setattr(module, "diagnose", diagnose_forever)
    ws = module.Workspace("c0ffee", Stream(), SandboxConfig(), owner="test", engine=object())
    blamed = []

    async def blame():
        blamed.append(await ws._blame(module.RunnerLost("stream closed")))

    async def main():
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blame)
                nursery.start_soon(blame)
                while len(started) < 2:
                    await trio.sleep(0.01)
                ws.abandon("engine drained")

    trio.run(main)
    assert [kind for kind, _ in blamed] == [FailureKind.INFRA_ERROR] * 2
    assert all("engine drained" in why for _, why in blamed)
