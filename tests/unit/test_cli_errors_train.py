"""`train`'s run directory that cannot be written is exit 6 whatever the OSError (docs/cli.md: a host
resource), and a Docker engine that does not answer is exit 3 before the run directory holds any file.
Real runs of ``python -m gym train`` in a subprocess; none reaches Docker."""

from __future__ import annotations

import pytest

from tests.cli_support import NO_DOCKER, ROOT, one_line
from tests.cli_support import gym as run_gym


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ("/proc/gymrun", "No such file or directory"),  # /proc takes no new directory: ENOENT, still the host's
        ("a-file", "a file stands where a directory is needed"),  # EEXIST
    ],
)
def test_a_run_dir_that_cannot_be_written_is_exit_6(tmp_path, where, named):
    if where == "a-file":
        where = str(tmp_path / where)
        (tmp_path / "a-file").write_text("mine\n")
    done = run_gym("train", "configs/cp_grpo_tiny.yaml", "--set", f"run_dir={where}")
    one_line(done, 6, f"run directory {where} cannot be written", named)


def test_docker_down_is_exit_3_before_the_run_directory_holds_anything(tmp_path):
    run_dir = tmp_path / "run"
    done = run_gym("train", "configs/cp_grpo_tiny.yaml", "--run-dir", str(run_dir), env=NO_DOCKER)
    one_line(done, 3, "unix:///nonexistent.sock", "call 'ping'")
    assert list(run_dir.iterdir()) == []  # no tensorboard/, config.json or metrics.jsonl


def test_a_run_dir_holding_the_working_directory_is_refused_before_the_policy_is_built(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "keep.txt").write_text("mine\n")
    config = str(ROOT / "configs/cp_grpo_tiny.yaml")
    done = run_gym("train", config, "--set", "run_dir=.", cwd=cwd)
    one_line(done, 2, "holds the working directory", "pass a new directory")
    assert sorted(p.name for p in cwd.iterdir()) == ["keep.txt"]
