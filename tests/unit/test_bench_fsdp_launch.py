"""`trainer.bench_fsdp._launch`: a multi-process step that fails is run once more; a second failure is the error,
with what the run said; a step that succeeds is read from the file it wrote (no process here: `subprocess.run` is
replaced by a fake that writes or fails as told)."""

from __future__ import annotations

import json
import subprocess

import pytest

from trainer import bench_fsdp


def fake_runs(monkeypatch, out, outcomes: list[int]) -> list[list[str]]:
    """Each call takes the next exit code; a 0 writes ``out`` as the worker would."""
    calls: list[list[str]] = []

    def run(argv, **kwargs):
        calls.append(argv)
        code = outcomes[len(calls) - 1]
        if code == 0:
            out.write_text(json.dumps({"ranks": [{"total": 1}], "step_s": 0.1, "tokens": 4}))
        return subprocess.CompletedProcess(
            argv, code, "", f"terminate called without an active exception (run {len(calls)})"
        )

    monkeypatch.setattr(bench_fsdp.subprocess, "run", run)
    return calls


def test_a_step_that_fails_once_is_run_again_and_read(tmp_path, monkeypatch, caplog):
    out = tmp_path / "w2.json"
    calls = fake_runs(monkeypatch, out, [-6, 0])
    result = bench_fsdp._launch(tmp_path, out, processes=2, timeout_s=60)
    assert result["tokens"] == 4 and len(calls) == 2
    assert "torch.distributed.run" in calls[0] and "attempt 1" in caplog.text and "(run 1)" in caplog.text


def test_a_step_that_fails_twice_is_the_error_with_what_it_said(tmp_path, monkeypatch):
    out = tmp_path / "w2.json"
    calls = fake_runs(monkeypatch, out, [-6, 1])
    with pytest.raises(RuntimeError, match=r"2-process step failed twice:\n.*\(run 2\)"):
        bench_fsdp._launch(tmp_path, out, processes=2, timeout_s=60)
    assert len(calls) == 2


def test_a_stale_result_file_is_never_read_as_the_steps(tmp_path, monkeypatch):
    out = tmp_path / "w1.json"
    out.write_text(json.dumps({"ranks": [], "stale": True}))
    calls = fake_runs(monkeypatch, out, [1, 1])
    with pytest.raises(RuntimeError):
        bench_fsdp._launch(tmp_path, out, processes=1, timeout_s=60)
    assert not out.exists() and len(calls) == 2
