"""compose.yaml: the services run from an image built from the project, with nothing of the host's Python.

The file tests validate compose.yaml with Debian's docker-compose: the only host paths mounted are
./runs and the Docker socket (never a Python prefix), and only the trainer and the reaper get the socket.
The Docker tests stage the build context with bin/compose-context, as compose.yaml's header says, build
the image once per set of inputs (tagged gym-app:<hash of them>: a later run with the same inputs reuses it), run
it alone (no mount, no network) and bring the three services up for a one-step training run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import docker
import pytest
import yaml
from packaging.requirements import Requirement

from images.inputs import digest, runner_image

ROOT = Path(__file__).resolve().parents[2]
SOCKET = "/var/run/docker.sock"
CONTEXT = ROOT / "build" / "compose"
DOCKERFILE = ROOT / "trainer" / "compose.Dockerfile"
STAGE = ROOT / "bin" / "compose-context"
# bin/compose-context's wheel cache: it outlives a checkout (a CI run's fresh clone)
WHEEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "code-rl-gym" / "compose-wheels"

# compose.yaml's variables come from the tests alone, never from the shell that started pytest
OUTER_ENV = {key: value for key, value in os.environ.items() if not key.startswith(("GYM_", "COMPOSE_"))}

pytestmark = [
    pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed"),
    pytest.mark.timeout(3600),  # the module's fixtures stage the wheels and build the image cold (1800 s each)
]


def compose(*args: str, env: dict | None = None, timeout: float = 120, file: Path = ROOT / "compose.yaml"):
    # compose refuses a file whose build context is missing, even for `config` and `down`
    (file.parent / "build" / "compose").mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["docker-compose", "-f", str(file), *args],
        cwd=file.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**OUTER_ENV, "GYM_RUNNER_IMAGE": runner_image(), **(env or {})},
    )


def services() -> dict:
    done = compose("config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def test_compose_file_is_valid_and_mounts_nothing_of_the_hosts_python():
    found = services()
    mounts = {name: service.get("volumes", []) for name, service in found.items()}
    assert mounts == {
        "policy": [f"{ROOT}/runs:/app/runs:ro"],
        "trainer": [f"{ROOT}/runs:/app/runs:rw", f"{SOCKET}:{SOCKET}:rw"],
        "gc": [f"{SOCKET}:{SOCKET}:rw"],
    }  # the policy server never sees the Docker socket
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/lib/python3", "/usr/local/lib/python3"}
    assert not any(m.startswith(p) for ms in mounts.values() for m in ms for p in prefixes)
    for service in found.values():  # one image, its own interpreter first on its PATH
        assert service["image"] == "gym-app:latest" and service["command"][0] in ("python", "sh")
        assert not {"PYTHONPATH", "PYTHONHOME"} & set(service.get("environment", {}))
    assert [name for name, service in found.items() if "build" in service] == ["policy"]
    build = found["policy"]["build"]
    assert build["context"] == str(CONTEXT) and build["network"] == "none"
    assert (CONTEXT / build["dockerfile"]).resolve() == DOCKERFILE and build["args"] == {"BASE": runner_image()}
    trainer = found["trainer"]["command"]
    assert trainer[:4] == ["python", "-m", "gym", "train"] and "http://policy:8000" in trainer


def test_the_header_stages_the_context_as_the_image_tests_do():
    header = (ROOT / "compose.yaml").read_text().split("\nx-gym:")[0]
    command = "bash bin/compose-context && GYM_RUNNER_IMAGE=$(python3 -m gym images tag) docker-compose up --build"
    assert command in header
    assert os.access(STAGE, os.X_OK)


def test_the_staging_script_says_what_it_stages():
    done = subprocess.run(["bash", str(STAGE), "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "build/compose/" in done.stdout and "wheels/" in done.stdout
    done = subprocess.run(["bash", str(STAGE), "--no-such-option"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == "" and "usage:" in done.stderr


def test_compose_names_the_runner_image_or_says_how_to_get_it():
    done = compose("config", env={"GYM_RUNNER_IMAGE": ""})
    assert done.returncode != 0 and "python -m gym images tag" in done.stderr


def test_compose_rejects_a_broken_file(tmp_path):
    text = (ROOT / "compose.yaml").read_text()
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "compose.yaml").write_text(text)
    assert compose("config", file=tmp_path / "good" / "compose.yaml").returncode == 0
    (tmp_path / "compose.yaml").write_text(text.replace("services:", "servics:"))
    assert compose("config", file=tmp_path / "compose.yaml").returncode != 0  # the validation above can fail


def run(*cmd: str, timeout: float = 900, env: dict | None = None) -> str:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd[:4]}: {done.stderr[-3000:]}"
    return done.stdout


def dependencies() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def tree_digest(top: Path) -> str:
    files = sorted(p for p in top.rglob("*") if p.is_file())
    return digest(*(part for p in files for part in (str(p.relative_to(top)), p.read_bytes())))


@pytest.fixture(scope="module")
def staged() -> str:
    """build/compose/ staged by bin/compose-context for this interpreter; its stdout (the context's path)."""
    return run("bash", str(STAGE), timeout=1800, env={**os.environ, "PYTHON": sys.executable})


@pytest.mark.slow
def test_the_script_stages_the_context_from_one_cached_set_of_wheels(staged):
    assert staged == f"{CONTEXT}\n"  # nothing else on stdout
    assert (CONTEXT / "requirements.txt").read_text().splitlines() == dependencies()
    assert (CONTEXT / "constraints.txt").read_text() == run(sys.executable, "-m", "pip", "freeze", "--exclude-editable")
    key = digest(*((CONTEXT / name).read_bytes() for name in ("requirements.txt", "constraints.txt")))
    assert [p.name for p in WHEEL_CACHE.iterdir() if not p.name.startswith(".")] == [key]
    wheels = sorted(p.name for p in (CONTEXT / "wheels").iterdir())
    assert wheels == sorted(p.name for p in (WHEEL_CACHE / key).iterdir())
    assert any(wheel.startswith("torch-") for wheel in wheels)
    assert all((CONTEXT / "wheels" / w).samefile(WHEEL_CACHE / key / w) for w in wheels)  # linked, not copied
    assert (CONTEXT / "src" / "pyproject.toml").read_bytes() == (ROOT / "pyproject.toml").read_bytes()
    assert not (CONTEXT / "src" / "build").exists()  # git-ignored: the context holds no copy of itself


@pytest.fixture(scope="module")
def app_image(staged) -> str:
    """The services' image of this checkout, gym-app:<hash of its inputs>, built by compose when missing."""
    files = [(CONTEXT / name).read_bytes() for name in ("requirements.txt", "constraints.txt")]
    tag = f"gym-app:{digest(DOCKERFILE.read_bytes(), runner_image(), *files, tree_digest(CONTEXT / 'src'))}"
    client = docker.from_env(timeout=60)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    done = compose("build", "policy", env={"GYM_APP_IMAGE": tag}, timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return tag


def in_image(tag: str, *cmd: str) -> str:
    """stdout of ``cmd`` in a container of ``tag`` alone: no mount, no network."""
    client = docker.from_env(timeout=120)
    return client.containers.run(tag, list(cmd), network_mode="none", remove=True).decode()


PROBE = """
import importlib.metadata as md, json, sys
print(json.dumps({"prefix": sys.prefix, "base": sys.base_prefix, "versions": {n: md.version(n) for n in sys.argv[1:]}}))
"""


@pytest.mark.docker
@pytest.mark.slow
def test_the_image_runs_alone_on_its_own_python_and_the_hosts_versions(app_image):
    names = [Requirement(dependency).name for dependency in dependencies()]
    probe = json.loads(in_image(app_image, "python", "-c", PROBE, *names))
    assert probe["prefix"] == "/opt/venv" and probe["base"] == "/usr"  # Debian's python3 of the base image
    assert probe["versions"] == {name: importlib.metadata.version(name) for name in names}  # torch: the CPU build
    assert "COMMAND" in in_image(app_image, "python", "-m", "gym", "--help")
    # the tokenizer trained in the build is the host's, byte for byte
    host = json.loads(run(sys.executable, "-m", "gym", "tokenizer", "info", "bpe"))["fingerprint"]
    assert json.loads(in_image(app_image, "python", "-m", "gym", "tokenizer", "info", "bpe"))["fingerprint"] == host


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
def test_compose_up_runs_a_training_step(app_image):
    name = f"gymtest{uuid.uuid4().hex[:8]}"
    run_dir = ROOT / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**COMPOSE_RUN, "run_dir": f"runs/{name}/run"}))
    env = {"GYM_CONFIG": f"runs/{name}/config.yaml", "COMPOSE_PROJECT_NAME": name, "GYM_APP_IMAGE": app_image}
    try:
        done = compose("up", "--abort-on-container-exit", "--exit-code-from", "trainer", env=env, timeout=900)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        summary = json.loads((run_dir / "run" / "summary.json").read_text())
        assert summary["steps"] == 1 and summary["weights_version"] == 1  # pushed to the server over HTTP
        rows = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["samples/drawn"] >= 2
    finally:
        compose("down", "--remove-orphans", env=env, timeout=300)
        shutil.rmtree(run_dir, ignore_errors=True)
