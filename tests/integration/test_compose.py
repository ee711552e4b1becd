"""compose.yaml: the file validates with Debian's docker-compose, and the services run a training step.

The bring-up test builds the services' image locally FROM the gym base, starts the policy server,
the trainer (sampling from the server over HTTP, episodes in real workspaces through the mounted
Docker socket, weights pushed back to the server) and the GC reaper, lets the trainer finish a
one-step run, and tears everything down.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from images.inputs import runner_image

ROOT = Path(__file__).resolve().parents[2]
SOCKET = "/var/run/docker.sock"

pytestmark = pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")


def compose(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker-compose", "-f", str(ROOT / "compose.yaml"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_compose_file_is_valid_and_only_trusted_services_get_the_socket():
    done = compose("config", env={"GYM_PYTHON": sys.prefix, "GYM_RUNNER_IMAGE": runner_image()})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert set(services) == {"policy", "trainer", "gc"}

    def mounts(name: str) -> list[str]:
        return [v if isinstance(v, str) else f"{v['source']}:{v['target']}" for v in services[name].get("volumes", [])]

    assert not any(SOCKET in m for m in mounts("policy")), "the policy server must not see the Docker socket"
    assert any(SOCKET in m for m in mounts("trainer")) and any(SOCKET in m for m in mounts("gc"))
    trainer = services["trainer"]["command"]
    assert trainer[1:4] == ["-m", "gym", "train"] and "http://policy:8000" in trainer
    for service in services.values():  # built here from the local base image, never pulled
        assert service["image"] == "gym-app:latest" and service["build"]["args"]["BASE"] == runner_image()
        assert any(
            m.startswith(sys.prefix) for m in (v if isinstance(v, str) else v["source"] for v in service["volumes"])
        )
    dockerfile = (ROOT / "trainer" / "compose.Dockerfile").read_text()
    assert "FROM ${BASE}" in dockerfile


def test_compose_names_the_runner_image_or_says_how_to_get_it():
    env = {key: value for key, value in os.environ.items() if key != "GYM_RUNNER_IMAGE"}
    done = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "compose.yaml"), "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "GYM_PYTHON": sys.prefix},
    )
    assert done.returncode != 0 and "python -m gym images tag" in done.stderr


def test_compose_rejects_a_broken_file(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text((ROOT / "compose.yaml").read_text().replace("services:", "servics:"))
    done = subprocess.run(["docker-compose", "-f", str(broken), "config"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0  # the validation above can fail


def engine_ready() -> str | None:
    """None when the engine and the gym images are there; else why not."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(runner_image())
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot bring it up here
        return f"Docker engine or runner image {runner_image()} unavailable: {exc}"
    return None


COMPOSE_RUN = {
    "environment": {
        "name": "compose_check",
        "task_pool": {"type": "jsonl", "path": "tasks/samples/codecontests.jsonl", "format": "codecontests"},
        "tools": {"enabled": ["submit"]},
        "episode": {"max_turns": 1, "max_tokens_per_turn": 16, "max_total_tokens": 1024, "on_parse_error": "end"},
        "rubric": {"length": {"weight": 1.0, "free_tokens": 0}},
        "replay": {"rate": 0.0, "failures": False},
        "sandbox": {"pool": {"size": 1}},
        "concurrency": 2,
    },
    "policy": yaml.safe_load((ROOT / "configs" / "policy_tiny.yaml").read_text())["policy"],
    "rollout": {"group_size": 2, "groups_per_step": 1},
    "loop": {"steps": 1},
    "metrics": {"progress": False},
}


@pytest.mark.docker
@pytest.mark.slow
def test_compose_up_runs_a_training_step():
    reason = engine_ready()
    if reason:
        pytest.skip(reason)
    name = f"gymtest{uuid.uuid4().hex[:8]}"
    run_dir = ROOT / "runs" / name
    run_dir.mkdir(parents=True)
    config = run_dir / "config.yaml"
    config.write_text(yaml.safe_dump({**COMPOSE_RUN, "run_dir": f"runs/{name}/run"}))
    env = {
        "GYM_PYTHON": sys.prefix,
        "GYM_CONFIG": f"runs/{name}/config.yaml",
        "COMPOSE_PROJECT_NAME": name,
        "GYM_RUNNER_IMAGE": runner_image(),
    }
    try:
        done = compose(
            "up", "--build", "--abort-on-container-exit", "--exit-code-from", "trainer", env=env, timeout=900
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        summary = json.loads((run_dir / "run" / "summary.json").read_text())
        assert summary["steps"] == 1 and summary["weights_version"] == 1  # pushed to the server over HTTP
        rows = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["samples/drawn"] >= 2
    finally:
        compose("down", "--remove-orphans", env=env, timeout=300)
        shutil.rmtree(run_dir, ignore_errors=True)
