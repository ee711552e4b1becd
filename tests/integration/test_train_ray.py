"""`gym train CONFIG --ray ADDRESS`: GRPO steps whose groups run on the rollout actors of a 2-node Ray cluster.

The cluster is `ray.cluster_utils.Cluster` on this machine. Each node's processes get the Docker
environment of their host: node 0 the shared default engine (the test's own environment), node 1 the second
dockerd of tests/second_daemon.py over TLS (``DOCKER_HOST``/``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` in the
node's ``env_vars``, which its raylet hands to the workers it starts). The actor on each node opens its pool with
the default engine resolution, so it reaches its node's engine without any engine in the config.

Asserted: the run completes its steps; its trajectories carry both nodes and both engines (``placement``), none is
masked; on-policy (``max_staleness: 0``) every trajectory of step s was sampled by weights version s, i.e. the
weights reached both actors before any group was granted under them; nothing of the run is left on either engine.
With a policy server (``engine: {type: http}``, both nodes on the shared engine): every actor samples from the one
`python -m gym serve` of the tiny policy and the trainer pushes to it, so the trajectories' versions (the server's
replies) are on-policy and the server ends at the run's final version.
And a rollout actor SIGKILLed mid-run (both nodes on the shared engine): its group re-runs on the other node, the
run finishes on-policy with nothing masked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest
import yaml

from sandbox.labels import Labels
from tests.second_daemon import SecondDaemon
from tests.trainer_support import TINY

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
GROUPS_PER_STEP = 2
GROUP_SIZE = 2
NODE_MEMORY = 128 * 1024**2  # object store per node: the tiny policy's weights are 0.5 MB


def train_config(run_dir: Path) -> dict:
    """A few short on-policy steps of the generated CP family: one turn, small groups, one warm workspace."""
    return {
        "run_dir": str(run_dir),
        "environment": {
            "name": "ray_tiny",
            "tokenizer": "bpe",
            "task_pool": {
                "type": "generated",
                "split": "train",
                "count": 16,
                "seed": 0,
                "levels": [1],
                "params_in": "input",
                "shuffle": False,
                "templates": ["sum_plus", "linear", "scale", "divisible"],
            },
            "tools": {"enabled": ["bash", "submit"], "timeout_s": 5},
            "episode": {"max_turns": 1, "max_tokens_per_turn": 48, "max_total_tokens": 1024, "on_parse_error": "end"},
            "sampling": {"temperature": 1.0},
            "rubric": {"correctness": {"mode": "all_pass", "weight": 1.0}, "format": {"weight": 0.2}},
            "sandbox": {"pool": {"size": 1}, "episode": {"wall_s": 60, "max_calls": 2}},
            "grader": {"concurrency": 1},
            "replay": {"rate": 0.0, "failures": False},
            "concurrency": 4,
        },
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        "engine": {"type": "in_process", "max_batch_size": 8},
        "rollout": {"group_size": GROUP_SIZE, "groups_per_step": GROUPS_PER_STEP, "seed": 0},
        "algorithm": {"dynamic_sampling": {"enabled": False}},  # every group kept: exactly 2 groups a step
        "optimizer": {"lr": 0.001},
        "loop": {"steps": STEPS, "max_staleness": 0, "micro_batch_size": 8},
        "checkpoint": {"every": 100},
        "metrics": {"progress": False, "tensorboard": False},
        "threads": 1,
    }


@contextmanager
def two_nodes(monkeypatch, second_node_env: dict[str, str]):
    """A head and a second node on this host (its processes get ``second_node_env``); yields (cluster, head id,
    second id)."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # Everything of Ray's (sessions, sockets, the "current cluster" file other Ray users on this host would
    # read) under a directory of the test's own; short, as unix socket paths must be. The trainer inherits it.
    temp = tempfile.mkdtemp(prefix="gymray-", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", temp)
    from ray.cluster_utils import Cluster

    # on the host's address (Ray maps 127.0.0.1 to it when a driver connects)
    common = {"num_cpus": 1, "object_store_memory": NODE_MEMORY}
    cluster = Cluster()
    try:
        cluster.add_node(**common, include_dashboard=False)  # the head
        second = cluster.add_node(**common, env_vars=second_node_env)
        yield cluster, cluster.head_node.node_id, second.node_id
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def daemon(second_tls_daemon: SecondDaemon) -> SecondDaemon:
    """The session's second daemon (tests/integration/conftest.py), answering: another module may have left it down."""
    if not second_tls_daemon.answers():
        second_tls_daemon.stop(signal.SIGKILL)
        second_tls_daemon.start()
    return second_tls_daemon


@pytest.fixture
def cluster(daemon: SecondDaemon, monkeypatch):
    """Node 0 on the shared engine (the test's environment), node 1 on the second daemon (its env_vars)."""
    tls = {"DOCKER_HOST": daemon.tls_url, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(daemon.certs)}
    with two_nodes(monkeypatch, tls) as nodes:
        yield nodes


def start_train(
    tmp_path: Path, address: str, stdout=subprocess.PIPE, engine: dict | None = None, **loop
) -> subprocess.Popen:
    data = train_config(tmp_path / "run")
    data["loop"].update(loop)
    if engine is not None:
        data["engine"] = engine
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(data))
    return subprocess.Popen(
        [sys.executable, "-m", "gym", "train", str(config), "--ray", address],
        cwd=ROOT,
        env=dict(os.environ),  # RAY_TMPDIR and RAY_USAGE_STATS_ENABLED of the cluster
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


ACTOR = re.compile(r"rollout actor on node (\w+) \(([^,]+), pid (\d+)\): Docker engine (\S+)")


def run_output(tmp_path: Path) -> tuple[dict, list[dict], list[dict]]:
    """summary.json, the trajectories in the order they were consumed, the train rows of metrics.jsonl."""
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    trajectories = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return summary, trajectories, [r for r in rows if r["kind"] == "train"]


def assert_on_policy(trajectories: list[dict], train_rows: list[dict], steps: int) -> None:
    """max_staleness 0: step s consumed only trajectories sampled by version s (written step after step), i.e.
    the weights reached every actor before any group was granted under them."""
    per_step = GROUPS_PER_STEP * GROUP_SIZE
    assert len(trajectories) == steps * per_step
    for step in range(steps):
        versions = {t["policy_version"] for t in trajectories[step * per_step : (step + 1) * per_step]}
        assert versions == {step}, (step, versions)
    assert all(r["staleness/max"] == 0 for r in train_rows)


def shared_gym_containers(settle_s: float = 60.0) -> list[dict]:
    """The shared engine's gym containers once none is being removed (at most ``settle_s``): an actor that Ray ends
    while its removal call is under way leaves the engine removing the container (state "removing"), which is not
    a container left behind; one still there after the removal ended, or never removed, is."""
    client = docker.from_env(version="1.41", timeout=30)
    try:
        deadline = time.monotonic() + settle_s
        while True:
            containers = client.api.containers(all=True, filters={"label": Labels.MARK})
            if time.monotonic() > deadline or not any(c["State"] == "removing" for c in containers):
                return containers
            time.sleep(0.5)
    finally:
        client.close()


def owner_pid(container: dict) -> int:
    return int(Labels.parse(container["Labels"]).owner.split(":")[1])


def test_train_on_two_ray_nodes_uses_both_engines(tmp_path, cluster, daemon):
    ray_cluster, head, second = cluster
    started = time.monotonic()
    trainer = start_train(tmp_path, ray_cluster.address)
    try:
        _, stderr = trainer.communicate(timeout=420)
    finally:
        trainer.kill()
    took = time.monotonic() - started
    assert trainer.returncode == 0, stderr[-6000:]
    print(f"\ngym train --ray on 2 nodes: {took:.1f} s")

    # one actor on each node, each reporting the engine its node's environment names
    actors = ACTOR.findall(stderr)
    engines = {node: url for node, _, _, url in actors}
    assert {head[:12], second[:12]} == set(engines), stderr[-4000:]
    assert engines[second[:12]] == daemon.tls_url
    assert engines[head[:12]] != daemon.tls_url

    summary, trajectories, train_rows = run_output(tmp_path)
    assert summary["steps"] == STEPS and summary["masked"] == 0 and summary["weights_version"] == STEPS
    # every trajectory names its node and engine; both nodes and both engines ran episodes
    assert {t["placement"]["node"] for t in trajectories} == {head, second}
    by_node = {t["placement"]["node"]: t["placement"]["engine"] for t in trajectories}
    assert by_node[second] == daemon.tls_url and by_node[head] == engines[head[:12]]
    assert not any(t["masked"] for t in trajectories)
    assert_on_policy(trajectories, train_rows, STEPS)

    # nothing of the run left: the second engine holds no gym container at all, the shared one none of the
    # trainer's or the actors' (other suites' containers may come and go there meanwhile)
    assert not daemon.gym_containers()
    ours = {trainer.pid} | {int(pid) for _, _, pid, _ in actors}
    left = [c["Names"] for c in shared_gym_containers() if owner_pid(c) in ours]
    assert not left, left


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        return json.load(response)


@contextmanager
def policy_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`python -m gym serve` of the train config's policy (same architecture and seed, so the trainer's weights
    load) on a free loopback port; yields (process, URL) once it answers /health, and stops it on exit."""
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"policy": {"type": "rdep_moe", "seed": 0, "model": TINY}}))
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:  # a file, not a pipe: nothing has to drain it while the run goes on
        server = subprocess.Popen(
            [sys.executable, "-m", "gym", "serve", str(config), "--host", "127.0.0.1", "--port", "0"],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", log_path.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()[-4000:]
            time.sleep(0.2)
        url = found.group(1)
        assert health(url)["status"] == "ok"
        yield server, url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_train_on_two_ray_nodes_samples_from_one_policy_server(tmp_path, monkeypatch):
    """engine.type http under --ray: both nodes' actors sample from the one server, the trainer pushes every
    version to it before granting the next step's groups, and the server ends at the run's final version."""
    with two_nodes(monkeypatch, {}) as (ray_cluster, head, second), policy_server(tmp_path) as (server, url):
        assert health(url)["weights_version"] == 0
        started = time.monotonic()
        trainer = start_train(tmp_path, ray_cluster.address, engine={"type": "http", "url": url})
        try:
            _, stderr = trainer.communicate(timeout=300)
        finally:
            trainer.kill()
        took = time.monotonic() - started
        served_version = health(url)["weights_version"]
    assert trainer.returncode == 0, stderr[-6000:]
    print(f"\ngym train --ray on 2 nodes with a policy server: {took:.1f} s")

    summary, trajectories, train_rows = run_output(tmp_path)
    assert summary["steps"] == STEPS and summary["masked"] == 0 and summary["weights_version"] == STEPS
    assert served_version == summary["weights_version"]
    assert f"to {url} as version {STEPS}" in stderr  # HttpSync's push of the last version
    assert {t["placement"]["node"] for t in trajectories} == {head, second}
    assert not any(t["masked"] for t in trajectories)
    assert_on_policy(trajectories, train_rows, STEPS)  # the versions are the server's replies

    # the server is stopped; the trainer and both actors left no container on the (shared) engine
    assert server.poll() is not None
    with pytest.raises(OSError):
        health(url)
    actors = ACTOR.findall(stderr)
    assert {node for node, _, _, _ in actors} == {head[:12], second[:12]}, stderr[-4000:]
    ours = {trainer.pid} | {int(pid) for _, _, pid, _ in actors}
    left = [c["Names"] for c in shared_gym_containers() if owner_pid(c) in ours]
    assert not left, left


KILL_STEPS = 8


@pytest.mark.timeout(600)
def test_an_actor_killed_mid_run_loses_no_sample(tmp_path, monkeypatch):
    """SIGKILL one node's actor after weights version 3 reached it: its group re-runs on the other node, the
    run finishes every step with nothing masked and still on-policy, later steps ran on the survivor only."""
    with two_nodes(monkeypatch, {}) as (ray_cluster, head, second):
        trainer = start_train(tmp_path, ray_cluster.address, stdout=subprocess.DEVNULL, steps=KILL_STEPS)
        lines, pids, killed = [], {}, None
        try:
            for line in trainer.stderr:  # the timeout mark bounds a trainer that hangs
                lines.append(line)
                if found := ACTOR.search(line):
                    pids[found.group(1)] = int(found.group(3))
                if killed is None and len(pids) == 2 and "weights version 3" in line:
                    killed = pids[second[:12]]
                    os.kill(killed, signal.SIGKILL)
            trainer.wait(60)
        finally:
            trainer.kill()
    stderr = "".join(lines)
    assert trainer.returncode == 0, stderr[-6000:]
    assert killed is not None, stderr[-4000:]
    assert f"rollout actor on node {second[:12]} lost" in stderr

    summary, trajectories, train_rows = run_output(tmp_path)
    assert summary["steps"] == KILL_STEPS and summary["masked"] == 0
    assert_on_policy(trajectories, train_rows, KILL_STEPS)
    nodes = [t["placement"]["node"] for t in trajectories]
    assert second in nodes[: 4 * GROUPS_PER_STEP * GROUP_SIZE]  # it ran groups before it was killed
    assert set(nodes[-GROUPS_PER_STEP * GROUP_SIZE :]) == {head}  # and none after

    # the trainer and the surviving actor left nothing; what the killed actor held is a dead owner's
    # (`gym gc` removes those; the test removes its own here rather than everything gc would)
    client = docker.from_env(version="1.41", timeout=30)
    try:
        for container in shared_gym_containers():
            assert owner_pid(container) not in {trainer.pid, pids[head[:12]]}, container["Names"]
            if owner_pid(container) == killed:
                client.api.remove_container(container["Id"], force=True, v=True)
    finally:
        client.close()
