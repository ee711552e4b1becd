"""Failures a user can fix print one line, ``gym: error: PROBLEM — FIX``, and exit with their class's code.

Real runs of ``python -m gym`` in a subprocess, one fault per class of docs/cli.md's table (gym/fault.py):
Docker down, the runner image missing, a bad or missing config file, an unreadable task or bundle file, a
port in use, a run directory that cannot be written, an unknown tokenizer spec. ``-v`` (before or after the
command) adds the traceback. Nothing here creates a container: Docker-down runs point DOCKER_HOST at a socket
that does not exist, and the missing-image run stops at the pool's image check, before its gc or any start.
"""

from __future__ import annotations

import gzip
import socket

import pytest
import yaml

from tests.cli_support import NO_DOCKER, ROOT, gym, one_line


@pytest.mark.parametrize("command", [["demo"], ["gc"], ["images", "build"], ["killtest", "--only", "thread_bomb"]])
def test_docker_down_is_exit_3_naming_the_socket_and_bin_setup(command):
    done = gym(*command, env=NO_DOCKER)
    one_line(done, 3, "unix:///nonexistent.sock", "start dockerd: `bash bin/setup`")


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_before_or_after_the_command_adds_the_traceback(where):
    done = gym(*(["-v", "demo"] if where == "before" else ["demo", "-v"]), env=NO_DOCKER)
    assert done.returncode == 3 and "Traceback (most recent call last)" in done.stderr
    assert "sandbox.errors.EngineUnreachable" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("gym: error: the Docker engine at unix:///nonexistent.sock")


@pytest.mark.docker
def test_a_missing_runner_image_is_exit_4_with_the_build_command(tmp_path):
    config = tmp_path / "sandbox.yaml"
    config.write_text("image: gym-runner:no-such-tag-cli-test\n")
    done = gym("killtest", "--config", str(config), "--no-posture", "--only", "thread_bomb")
    one_line(done, 4, "gym-runner:no-such-tag-cli-test", "python -m gym images build")


def test_a_train_config_typo_names_the_file_and_the_field_path(tmp_path):
    data = yaml.safe_load((ROOT / "configs/cp_grpo_tiny.yaml").read_text())
    data["optimizer"]["lrr"] = 1e-3
    config = tmp_path / "typo.yaml"
    config.write_text(yaml.safe_dump(data))
    one_line(
        gym("train", str(config)), 2, f"{config}: optimizer.lrr: Extra inputs are not permitted", "trainer/config.py"
    )


@pytest.mark.parametrize(
    ("command", "text", "named"),
    [
        (["serve"], "server:\n  prot: 1\n", "server.prot: Extra inputs are not permitted"),
        (["killtest", "--config"], "budgetz: {}\n", "budgetz: Extra inputs are not permitted"),
    ],
)
def test_a_serve_or_sandbox_config_typo_names_the_file_and_the_field(tmp_path, command, text, named):
    config = tmp_path / "typo.yaml"
    config.write_text("policy: {type: hf, path: x}\n" + text if command == ["serve"] else text)
    one_line(gym(*command, str(config)), 2, f"{config}: {named}")


@pytest.mark.parametrize("command", [["serve"], ["train"], ["killtest", "--config"], ["soak", "--config"]])
def test_a_missing_config_file_names_it(tmp_path, command):
    missing = tmp_path / "nope.yaml"
    one_line(gym(*command, str(missing)), 2, str(missing))


def test_a_busy_port_is_exit_6_before_the_policy_is_built():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = gym("serve", "configs/policy_tiny.yaml", "--port", str(port))
    one_line(done, 6, "Address already in use", str(port), "--port")


def test_a_run_dir_that_cannot_be_written_is_exit_6_before_the_policy_is_built(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    done = gym("train", "configs/cp_grpo_tiny.yaml", "--run-dir", str(blocker / "run"))
    one_line(done, 6, str(blocker / "run"), "Not a directory")


@pytest.mark.parametrize("kind", ["binary.jsonl", "fake.jsonl.gz", "truncated.jsonl.gz"])
def test_an_unreadable_task_file_is_exit_5_naming_it(tmp_path, kind):
    tasks = tmp_path / kind
    if kind == "binary.jsonl":
        tasks.write_bytes(bytes(range(128, 256)) * 8)
    elif kind == "fake.jsonl.gz":
        tasks.write_text('{"question": "not compressed"}\n')
    else:
        whole = gzip.compress(b'{"question": "x"}\n' * 500)
        tasks.write_bytes(whole[: len(whole) // 2])
    env = tmp_path / "env.yaml"
    env.write_text(f"name: bad-file\ntask_pool: {{type: jsonl, path: {tasks}}}\n")
    done = gym("rollout", str(env), "--episodes", "1", "--out", str(tmp_path / "out"))
    line = one_line(done, 5, str(tasks))
    assert ("not UTF-8 text" if kind == "binary.jsonl" else "not a readable gzip file") in line


def test_a_file_that_is_not_a_bundle_is_exit_5(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    one_line(gym("show", str(junk)), 5, f"{junk}: not a replay bundle", "RUN/bundles")


def test_an_unknown_tokenizer_spec_is_exit_2_listing_the_known_ones():
    one_line(gym("tokenizer", "info", "sentencepiece"), 2, "unknown tokenizer 'sentencepiece'", "o200k_harmony")


def test_bench_swe_on_an_environment_without_swe_tasks_is_exit_2_before_any_pool():
    # NO_DOCKER: the refusal comes from the config alone, before a pool would ask the engine anything
    done = gym("bench", "swe", "--config", "configs/cp_smoke.yaml", "--episodes", "1", env=NO_DOCKER)
    one_line(done, 2, "configs/cp_smoke.yaml", "needs an environment with a SWE task pool", "gym/environment.py")
