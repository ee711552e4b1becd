"""A reader that goes away (`python -m gym show B | head -5`) ends any command quietly: exit 141 (128 + SIGPIPE,
as `cat` reports it), nothing on stderr, no traceback (gym.fault.OUTPUT_CLOSED); a broken pipe that is not
stdout's stays a bug with its traceback. Real runs of ``python -m gym`` whose stdout pipe is closed at once.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gym.bundle import bundle_of, write_bundle
from gym.cli import main
from gym.scripted import load_scripted
from tests.cli_support import ROOT
from tests.fakes import codecontests_env, run_workers


def closed_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gym ARGS`` with stdout a pipe nobody reads: closed before the command writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "gym", *args], cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)


def test_show_into_a_closed_pipe_is_quiet(tmp_path):
    env = codecontests_env()
    _, workers, _ = run_workers(env, load_scripted("reference", env), groups=1, group_size=1)
    bundle = write_bundle(tmp_path / "b.json", bundle_of(env, workers.results[0], "sampled", "sha256:x"))
    done = closed_reader("show", str(bundle), "--full")
    assert done.returncode == 141 and done.stderr == "", done.stderr[-3000:]


def test_any_command_into_a_closed_pipe_is_quiet():
    done = closed_reader("killtest", "--list")
    assert done.returncode == 141 and done.stderr == "", done.stderr[-3000:]


def test_a_broken_pipe_that_is_not_stdout_keeps_its_traceback(monkeypatch):
    def run(args):
        raise BrokenPipeError(32, "Broken pipe")  # a socket's, say: stdout (pytest's capture) is fine

    monkeypatch.setattr("gym.commands.gc.run", run)
    with pytest.raises(BrokenPipeError):
        main(["gc"])
