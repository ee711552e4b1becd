"""A workspace pool over two Docker engines (sandbox/fleet.py): the shared daemon and a second one of the test's own.

The second daemon is tests/second_daemon.py's (own data root, exec root, pid file, containerd and network
namespace), reached over TLS ``tcp://127.0.0.1:PORT`` with certificates the fixture generated. On the shared
daemon the tests touch only containers they created (their processes' owner labels).

Asserted: placement by free capacity spreads 16 workspaces 8/8 and a 17th waits for a release; labels
restrict placement; SIGKILL of the second daemon drains it: a call in flight there ends as ``infra_error``
at once (not at its 60 s deadline), new workspaces go to the shared engine, and the restarted daemon takes
work again. Then the issue's run: a real ``gym rollout`` of 16 episodes over both engines, the second
daemon killed mid-run: the run ends with exit 0, only episodes the dead engine touched are masked
(infra_error, reward None), all others are scored correct, trajectories name their engine, and after
``gym gc`` no container of the run is left on either engine.

And the commands over every engine: ``gym gc --config F`` (F's ``sandbox.engines`` naming both daemons)
removes an orphan of a dead owner and an expired container on each, keeps a live owner's container and
names each engine in its lines; with one engine of the config dead, the other is still collected, the
dead one is one stderr line naming it, and the exit code is 3; ``gym images build --engine URL`` with TLS
from ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` reports the images already on the second daemon as cached.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import trio
import yaml

from images.inputs import BASE_REPOSITORY, base_inputs, host_release, runner_image
from sandbox.config import SandboxConfig
from sandbox.engine_url import DEFAULT_SOCKET
from sandbox.failure import FailureKind
from sandbox.fleet import FleetPool, open_pool
from sandbox.labels import Labels, current_owner
from tests.fault_rollout import Rollout
from tests.sandbox_support import sh
from tests.second_daemon import SecondDaemon

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SHARED = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


@pytest.fixture
def daemon(request) -> SecondDaemon:
    """The module's daemon, answering (an earlier test may have left it down)."""
    second: SecondDaemon = request.getfixturevalue("second_tls_daemon")
    if not second.answers():
        second.stop(signal.SIGKILL)
        second.start()
    return second


def engines(daemon: SecondDaemon, capacity: int = 8, labels: tuple[list[str], list[str]] = ([], [])) -> list[dict]:
    tls = daemon.tls_config()
    return [
        {"url": SHARED, "capacity": capacity, "labels": labels[0]},
        {"url": tls["base_url"], "capacity": capacity, "tls": tls["tls"], "labels": labels[1]},
    ]


def fleet_config(daemon: SecondDaemon, **overrides) -> SandboxConfig:
    data = {
        "pool": {"size": 0},
        "budgets": {"memory_mb": 256, "workspace_mb": 64, "tmp_mb": 32, "pids": 64},
        "engine": {"timeout_s": 10, "health_interval_s": 0.5, "outage_wait_s": 5},
        "engines": engines(daemon),
    }
    data.update(overrides)
    return SandboxConfig.model_validate(data)


def owned_containers(url: str, pid: int) -> list[str]:
    """Gym containers on the engine at ``url`` (unix only) owned by process ``pid`` of this host."""
    client = docker.DockerClient(base_url=url, version="1.41", timeout=30)
    try:
        found = client.api.containers(all=True, filters={"label": Labels.MARK})
    finally:
        client.close()
    return [c["Id"] for c in found if (c.get("Labels") or {}).get("gym.owner", "").split(":")[1:2] == [str(pid)]]


def remove_owned(daemon: SecondDaemon, pid: int) -> None:
    """Remove the containers process ``pid`` left on both engines (the second daemon started again if it is down)."""
    if not daemon.answers():
        daemon.stop(signal.SIGKILL)
        daemon.start()
    for url in (SHARED, daemon.url):
        client = docker.DockerClient(base_url=url, version="1.41", timeout=60)
        try:
            for container_id in owned_containers(url, pid):
                try:
                    client.api.remove_container(container_id, force=True, v=True)
                except docker.errors.NotFound:
                    pass
        finally:
            client.close()


def test_open_pool_picks_the_fleet_only_for_several_engines(daemon):
    assert isinstance(open_pool(fleet_config(daemon)), FleetPool)
    assert not isinstance(open_pool(SandboxConfig()), FleetPool)


def test_sixteen_workspaces_spread_by_free_capacity_and_a_seventeenth_waits(daemon):
    config = fleet_config(daemon)
    tls_url = config.engines[1].url

    async def main():
        async with open_pool(config) as pool:
            held: list = []
            release = trio.Event()
            all_in = trio.Event()

            async def hold(i: int) -> None:
                async with pool.acquire(f"pytest-fleet-{i}") as ws:
                    result = await ws.exec(sh("echo $((6 * 7))"))
                    assert result.failure == FailureKind.OK and result.stdout.strip() == b"42", result
                    held.append(ws.engine_url)
                    if len(held) == 16:
                        all_in.set()
                    await release.wait()

            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(hold, i)
                with trio.fail_after(120):
                    await all_in.wait()
                late = trio.Event()

                async def seventeenth() -> None:
                    async with pool.acquire("pytest-fleet-17"):
                        late.set()

                nursery.start_soon(seventeenth)
                await trio.sleep(1.0)
                assert not late.is_set(), "a 17th workspace was placed beyond both engines' capacity"
                release.set()
                with trio.fail_after(60):
                    await late.wait()
        return held, pool.engines(), len(pool.live)  # after the pool closed: every container removed

    held, per_engine, live = trio.run(main)
    assert sorted(held) == sorted([SHARED] * 8 + [tls_url] * 8), held
    assert [e["placed"] for e in per_engine] in ([9, 8], [8, 9]), per_engine
    assert live == 0


def test_required_labels_place_only_on_engines_carrying_them(daemon):
    config = fleet_config(daemon, engines=engines(daemon, labels=([], ["swe"])), require_labels=["swe"])

    async def main():
        async with open_pool(config) as pool:
            urls = []
            for i in range(3):
                async with pool.acquire(f"pytest-fleet-label-{i}") as ws:
                    urls.append(ws.engine_url)
            return urls

    assert trio.run(main) == [config.engines[1].url] * 3


def test_a_hung_engine_is_drained_and_takes_work_again_when_it_answers(daemon):
    """SIGSTOP of the second dockerd: its attach streams stay open and silent, so a call in flight there would
    wait out its 60 s deadline and then an inspect; the drain ends it as infra_error within the health check
    (a 5 s ping, a 10 s confirmation). Work goes to the shared engine meanwhile; after SIGCONT, the second
    engine takes work again."""
    config = fleet_config(daemon)
    tls_url = config.engines[1].url
    figures = {}

    async def main():
        async with open_pool(config) as pool:
            async with pool.acquire("pytest-fleet-a") as first, pool.acquire("pytest-fleet-b") as second:
                assert {first.engine_url, second.engine_url} == {SHARED, tls_url}
                remote, local = (first, second) if first.engine_url == tls_url else (second, first)
                assert (await remote.exec(sh("true"))).failure == FailureKind.OK
                daemon.dockerd.send_signal(signal.SIGSTOP)
                try:
                    stopped = time.monotonic()
                    result = await remote.exec(sh("sleep 50", timeout_s=60))
                    figures["call_ended_s"] = time.monotonic() - stopped
                    assert result.failure == FailureKind.INFRA_ERROR, result
                    assert "drained" in result.detail and tls_url in result.detail, result.detail
                    later = await local.exec(sh("echo still here"))
                    assert later.failure == FailureKind.OK, later  # the other engine's workspace is untouched
                    placed = []
                    for i in range(4):  # all on the shared engine while the second is drained
                        async with pool.acquire(f"pytest-fleet-c{i}") as ws:
                            placed.append(ws.engine_url)
                    assert placed == [SHARED] * 4, placed
                    assert pool.stats()["drains"] == 1 and pool.engines()[1]["abandoned"] == 1
                finally:
                    daemon.dockerd.send_signal(signal.SIGCONT)
            with trio.fail_after(30):
                while not pool.engines()[1]["up"]:
                    await trio.sleep(0.1)
            async with pool.acquire("pytest-fleet-d") as a, pool.acquire("pytest-fleet-e") as b:
                assert {a.engine_url, b.engine_url} == {SHARED, tls_url}
                assert (await a.exec(sh("true"))).failure == (await b.exec(sh("true"))).failure == FailureKind.OK

    trio.run(main)
    assert figures["call_ended_s"] < 40, figures  # the call's own deadline: 60 s, then a 10 s inspect
    print(f"\ndrain: a call in flight on the hung engine ended {figures['call_ended_s']:.1f}s after SIGSTOP")
    # the abandoned workspace's container was left for gc (removal skipped while drained): it is ours to remove
    client = daemon.client()
    try:
        for container in daemon.gym_containers():
            if container["Labels"].get("gym.owner") == current_owner():
                client.api.remove_container(container["Id"], force=True, v=True)
    finally:
        client.close()


def test_rollout_over_two_engines_survives_killing_one(daemon, tmp_path):
    """The issue's run: 16 episodes over both engines, the second daemon SIGKILLed mid-run."""
    tls_url = daemon.tls_url
    sandbox = {  # engine calls wait 15 s: a busy host must not mask episodes on its own (10 s did once)
        "pool": {"size": 2},
        "engine": {"timeout_s": 15, "health_interval_s": 1.0, "outage_wait_s": 10},
        "engines": engines(daemon),
    }
    rollout = Rollout(tmp_path, 16, sandbox, concurrency=16, tools_timeout_s=60)
    try:
        try:
            deadline = time.monotonic() + 120
            # Two calls in flight there (each slow task's program sleeps 2 s): running containers alone do not say so,
            # warm ones and graders' containers reset to serve again run too (six running once met no episode in flight)
            while len(daemon.busy_containers()) < 2:
                assert rollout.proc.poll() is None, rollout.tail()
                assert time.monotonic() < deadline, f"the second engine never got work:\n{rollout.tail()}"
                time.sleep(0.2)
            daemon.stop(signal.SIGKILL)
            killed = time.monotonic()
            code = rollout.wait(timeout=180)
            ended_s = time.monotonic() - killed
        finally:
            rollout.kill()
        trajectories, masked = rollout.finished(code, episodes=16)
        engines_used = {t["placement"].get("engine") for t in trajectories} - {None}  # None: no workspace started
        assert engines_used == {SHARED, tls_url}, engines_used
        assert masked, "episodes in flight on the killed engine should be masked"
        bundles = {
            json.loads(p.read_text())["trajectory"]["seeds"]["episode"]: p.read_text() for p in rollout.bundles()
        }
        for t in masked:  # only episodes the dead engine touched: their workspace, or their grading, was there
            touched = t["placement"].get("engine") == tls_url or tls_url in bundles.get(t["seeds"]["episode"], "")
            assert touched, {k: t[k] for k in ("task_id", "placement", "failures")}
        on_shared = [t for t in trajectories if t["placement"].get("engine") == SHARED]
        assert sum(not t["masked"] for t in on_shared) >= 1
        # gc over both engines once the second is back (its containers outlived its daemon)
        daemon.start()
        env_file = tmp_path / "env.yaml"
        gc = run_gym("gc", "--config", str(env_file))
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert owned_containers(SHARED, rollout.proc.pid) == [], gc.stdout
        assert owned_containers(daemon.url, rollout.proc.pid) == [], gc.stdout
        config = yaml.safe_load(env_file.read_text())
        assert [e["url"] for e in config["sandbox"]["engines"]] == [SHARED, tls_url]
        print(
            f"\nfleet rollout: run ended {ended_s:.1f}s after the kill; {len(masked)}/16 masked; "
            f"{sum(t['placement'].get('engine') == tls_url for t in trajectories)} episodes placed on the killed engine"
        )
    finally:  # nothing of the run left for the next test's gc, whatever failed above
        remove_owned(daemon, rollout.proc.pid)


# ------------------------------------------------------------ gc and images build over every engine


def dead_owner() -> Labels:
    now = time.time()
    return Labels(owner=f"{socket.gethostname()}:999999999:1", created=now, deadline=now + 3600)


def expired() -> Labels:
    now = time.time()
    return Labels(owner=current_owner(), created=now - 10, deadline=now - 1)


def live() -> Labels:
    now = time.time()
    return Labels(owner=current_owner(), created=now, deadline=now + 3600)


class Created:
    """Containers this test made on one daemon (created, never started); ``remove_all`` removes only those."""

    def __init__(self, client: docker.DockerClient):
        self.client = client
        self.ids: dict[str, str] = {}

    def make(self, key: str, labels: Labels) -> str:
        name = f"gym-fleet-gc-test-{key}-{uuid.uuid4().hex[:8]}"
        self.ids[key] = self.client.api.create_container(
            runner_image(), command=["true"], labels=labels.as_dict(), name=name
        )["Id"]
        return self.ids[key]

    def present(self) -> set[str]:
        """The keys of this test's containers still on the daemon."""
        there = {c["Id"] for c in self.client.api.containers(all=True, filters={"label": Labels.MARK})}
        return {key for key, cid in self.ids.items() if cid in there}

    def remove_all(self) -> None:
        for cid in self.ids.values():
            try:
                self.client.api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass
        self.client.close()


@pytest.fixture
def clean_daemon(daemon) -> Iterator[SecondDaemon]:
    """The module's daemon, answering; after the test, nothing of the gym's is left on it."""
    second = daemon
    yield second
    left = second.gym_containers()
    assert not left, f"gym containers left on the second daemon: {[c['Names'] for c in left]}"


@pytest.fixture
def on_shared() -> Iterator[Created]:
    created = Created(docker.from_env(version="1.41", timeout=60))
    try:
        yield created
    finally:
        created.remove_all()


@pytest.fixture
def on_second(clean_daemon) -> Iterator[Created]:
    created = Created(clean_daemon.client())
    try:
        yield created
    finally:
        created.remove_all()


def fleet_file(tmp_path: Path, *engines: dict) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"sandbox": {"engines": list(engines)}}))
    return path


def tls_entry(daemon: SecondDaemon) -> dict:
    reach = daemon.tls_config()
    return {"url": reach["base_url"], "capacity": 2, "tls": reach["tls"]}


def run_gym(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_gc_of_a_config_collects_orphans_on_both_engines_and_keeps_live_ones(
    clean_daemon, on_shared, on_second, tmp_path
):
    for created in (on_shared, on_second):
        created.make("dead", dead_owner())
        created.make("expired", expired())
        created.make("live", live())  # its owner is this pytest process: alive while gc runs
    config = fleet_file(tmp_path, {"url": SHARED, "capacity": 2}, tls_entry(clean_daemon))
    done = run_gym("gc", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert on_shared.present() == {"live"} and on_second.present() == {"live"}
    lines = done.stdout.splitlines()
    ours = [line for line in lines if "gym-fleet-gc-test-" in line and clean_daemon.tls_url in line]
    assert (
        len(ours) == 2 and any("is gone" in line for line in ours) and any("deadline passed" in line for line in ours)
    )
    assert f"{clean_daemon.tls_url}: removed 2 containers" in lines
    # The shared daemon was walked too. Which of its lines name this test's orphans is not asserted: a pool
    # started by a suite running beside this one collects dead owners' containers at its start, and may win.
    assert any(re.fullmatch(rf"{re.escape(SHARED)}: removed \d+ containers", line) for line in lines), lines
    assert lines[-1].endswith("containers on 2 of 2 engines"), lines[-1]


def test_gc_with_one_engine_dead_still_collects_the_other_and_exits_3(clean_daemon, on_second, tmp_path):
    on_second.make("dead", dead_owner())
    on_second.make("live", live())
    gone = f"unix://{tmp_path}/no-such-engine.sock"
    config = fleet_file(tmp_path, {"url": gone, "capacity": 1}, tls_entry(clean_daemon))
    done = run_gym("gc", "--config", str(config))
    assert done.returncode == 3, done.stdout + done.stderr
    assert on_second.present() == {"live"}
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"gym: error: {gone}: the Docker engine at {gone} does not answer")
    assert f"{clean_daemon.tls_url}: removed 1 containers" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == f"removed 1 containers on 1 of 2 engines; 1 did not answer: {gone}"


def test_images_build_on_a_tls_engine_from_the_environment_reports_its_images_cached(clean_daemon):
    base = f"{BASE_REPOSITORY}:{base_inputs(host_release())}"
    client = clean_daemon.client()
    try:
        have = {tag for image in client.images.list() for tag in image.tags}
        if base not in have:  # the fixture loads the runner; the base it is built FROM comes the same way
            clean_daemon.load(base)
        images = {image.tags[0]: image.id for image in client.images.list() if image.tags}
    finally:
        client.close()
    assert {base, runner_image()} <= set(images), images
    env = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(clean_daemon.certs)}
    started = time.monotonic()
    done = run_gym("images", "build", "--engine", clean_daemon.tls_url, env=env)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        [f"{clean_daemon.tls_url}:", base],
        [f"{clean_daemon.tls_url}:", runner_image()],
    ]
    assert all(line.endswith(" cached") for line in lines), lines
    client = clean_daemon.client()
    try:
        assert {image.tags[0]: image.id for image in client.images.list() if image.tags} == images  # nothing rebuilt
    finally:
        client.close()
    print(f"\nimages build over TLS: {took:.1f}s")
