"""`rollout`'s faults are one ``gym: error:`` line with the exit code of their class (docs/cli.md), found
before ``--out`` is touched; a run that fails after making ``--out`` still leaves its ``summary.json``.

Real runs of ``python -m gym`` in a subprocess, as tests/integration/test_cli_errors.py; none needs
Docker (the Docker-down run points DOCKER_HOST at a socket that does not exist).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cli_support import NO_DOCKER, ROOT, one_line
from tests.cli_support import gym as run_gym

SMOKE = str(ROOT / "configs/cp_smoke.yaml")


def rollout(*args: str, out, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_gym("rollout", *args, "--out", str(out), env=env)


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("missing.yaml", None, "cannot read the config"),
        ("bad.yaml", "name: [unclosed\n", "bad.yaml"),
        ("bad.toml", "name = \n", "not valid TOML"),
        ("typo.yaml", "name: x\nepisodez: {}\n", "episodez: Extra inputs are not permitted"),
    ],
)
def test_a_bad_environment_file_is_exit_2_naming_it(tmp_path, name, text, named):
    config = tmp_path / name
    if text is not None:
        config.write_text(text)
    done = rollout(str(config), "--episodes", "1", out=tmp_path / "out")
    one_line(done, 2, str(config), named, "gym/environment.py")
    assert not (tmp_path / "out").exists()


def test_a_set_typo_is_exit_2_naming_the_field(tmp_path):
    done = rollout(SMOKE, "--episodes", "1", "--set", "episode.max_turnz=3", out=tmp_path / "out")
    one_line(done, 2, "episode.max_turnz: Extra inputs are not permitted")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--episodes", "3", "--group-size", "2"], "must be a positive multiple of --group-size (2)"),
        (["--episodes", "0"], "--episodes (0)"),
        (["--episodes", "1", "--policy", "bogus:x"], "unknown policy spec 'bogus:x'"),
        (["--episodes", "1", "--policy", "scripted:x"], "unknown scripted policy 'x'"),
        (["--episodes", "1", "--policy", "checkpoint:"], "needs a directory"),
        (["--episodes", "1", "--policy", "http://localhost:notaport"], "not a valid URL"),
    ],
)
def test_a_bad_argument_is_a_usage_error_before_out_is_made(tmp_path, args, named):
    done = rollout(SMOKE, *args, out=tmp_path / "out")
    one_line(done, 2, named)
    assert not (tmp_path / "out").exists()


def test_out_naming_a_file_is_exit_6_and_the_file_is_kept(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    one_line(rollout(SMOKE, "--episodes", "1", out=blocker), 6, str(blocker), "use another path")
    assert blocker.read_text() == "mine\n"


@pytest.mark.parametrize("out", [".", ".."])
def test_out_holding_the_working_directory_is_refused_not_moved(tmp_path, out):
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "keep.txt").write_text("mine\n")
    done = run_gym("rollout", SMOKE, "--episodes", "1", "--out", out, cwd=cwd)
    one_line(done, 2, "holds the working directory", "pass a new directory")
    assert (cwd / "keep.txt").read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_a_run_that_fails_after_making_out_still_writes_its_summary(tmp_path):
    out = tmp_path / "out"
    done = rollout(SMOKE, "--episodes", "1", out=out, env=NO_DOCKER)
    one_line(done, 3, "unix:///nonexistent.sock")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 0 and summary["error"].startswith("EngineUnreachable: ")


def test_out_that_cannot_be_written_is_exit_6_whatever_the_oserror():
    one_line(rollout(SMOKE, "--episodes", "1", out="/proc/gymrun"), 6, "run directory /proc/gymrun cannot be written")
