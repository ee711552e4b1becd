"""Workspaces on a remote engine: a second dockerd of the test's own, reached over TLS ``tcp://127.0.0.1:PORT``.

The daemon (tests/second_daemon.py) has its own roots, sockets and certificates; the shared daemon is only
read (the runner image is copied from it). Asserted: a workspace starts over TLS, runs commands through the
runner's attached stream (a ``trio.SSLStream``), reads and writes files, and is removed; a warm workspace
whose TLS stream hung up is not handed out; the environment (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``,
``DOCKER_CERT_PATH``) reaches it as the docker CLI's would; a client with the wrong CA or without a client
certificate gets a classified InfraError naming TLS (a one-line CLI error, exit 3), never a traceback;
plaintext tcp:// to a non-loopback address is refused before any connection (exit 2). After every test no
container with the gym's labels is left on the second daemon, and none of the test's reached the shared one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import trio
import yaml

from sandbox.docker_engine import AttachedStream, Engine
from sandbox.errors import InfraError, SandboxConfigError
from sandbox.failure import FailureKind
from sandbox.labels import Labels
from sandbox.pool import WorkspacePool
from tests.sandbox_support import kill_the_warm_workspace, sh, small_config
from tests.second_daemon import SecondDaemon

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def shared_gym_containers() -> set[str]:
    client = docker.from_env(version="1.41", timeout=30)
    try:
        return {c["Id"] for c in client.api.containers(all=True, filters={"label": Labels.MARK})}
    finally:
        client.close()


@pytest.fixture
def daemon(request):
    """The session's second daemon, answering; after each test, nothing of the gym's is left on it."""
    second: SecondDaemon = request.getfixturevalue("second_tls_daemon")
    if not second.answers():  # another module's test may have left it down
        second.stop(signal.SIGKILL)
        second.start()
    yield second
    left = second.gym_containers()
    assert not left, f"gym containers left on the second daemon: {[c['Names'] for c in left]}"


def run_gym(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_workspace_over_tls_runs_commands_and_files_and_is_removed(daemon):
    config = small_config(engine=daemon.tls_config())

    async def main():
        async with WorkspacePool(config) as pool:
            assert pool.engine.target.tls is not None and pool.engine.url == daemon.tls_url
            async with pool.acquire("pytest") as ws:
                on_second = {c["Id"] for c in daemon.gym_containers()}
                echoed = await ws.exec(sh("cat; echo from-runner >&2", stdin=b"over tls\n"))
                written = await ws.write_file("notes/a.txt", b"written over tls\n")
                counted = await ws.exec(sh("wc -c < notes/a.txt"))
                read = await ws.read_file("notes/a.txt")
                archive = await ws.get_archive("/workspace/notes")  # an engine API call of the SDK, over TLS
                return ws.id, on_second, echoed, written, counted, read, archive

    ws_id, on_second, echoed, written, counted, read, archive = trio.run(main)
    assert ws_id in on_second and ws_id not in shared_gym_containers()
    assert echoed.failure == FailureKind.OK and echoed.stdout == b"over tls\n"
    assert echoed.stderr == b"from-runner\n"
    assert written.failure == FailureKind.OK and written.bytes_written == 17
    assert counted.stdout_text.strip() == "17"
    assert read.failure == FailureKind.OK and read.data == b"written over tls\n"
    assert b"written over tls" in archive
    assert ws_id not in {c["Id"] for c in daemon.gym_containers()}


def test_a_warm_workspace_whose_tls_stream_hung_up_is_not_handed_out(daemon):
    """hung_up() over TLS: the container dies while it waits in the pool; its stream must read as ended."""

    def fresh_over_tls(pool, victim):
        fresh = pool._streams[victim]
        assert isinstance(fresh._stream, trio.SSLStream) and not fresh.hung_up()

    config = small_config(engine=daemon.tls_config(), pool={"size": 1})
    victim, handed, result, hung_up = kill_the_warm_workspace(config, fresh_over_tls)
    assert handed != victim and hung_up == 1
    assert result.failure == FailureKind.OK and result.stdout_text == "ok\n"


def test_the_docker_cli_environment_reaches_the_tls_engine(daemon):
    """DOCKER_HOST + DOCKER_TLS_VERIFY + DOCKER_CERT_PATH, read as the CLI reads them, through `gym gc`."""
    env = {"DOCKER_HOST": daemon.tls_url, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(daemon.certs)}
    done = run_gym("gc", "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert "would remove 0 containers" in done.stdout


@pytest.mark.parametrize(
    ("tls", "says"),
    [
        ({"ca": "other-ca.pem"}, "CERTIFICATE_VERIFY_FAILED"),
        # The engine refuses the client: an alert (bad certificate), or a close that overtook the alert.
        ({"cert": None}, "(ALERT_BAD_CERTIFICATE|refuses the client certificate)"),
        ({"cert": "other-cert.pem", "key": "other-key.pem"}, "(ALERT_BAD_CERTIFICATE|refuses the client certificate)"),
    ],
    ids=["wrong-ca", "no-client-cert", "client-cert-of-another-ca"],
)
def test_a_refused_tls_client_is_a_classified_infra_error(daemon, tls, says):
    config = small_config(engine=daemon.tls_config(**tls), pool={"size": 1})
    refused = f"TLS with the Docker engine at {daemon.tls_url} failed: .*{says}"

    async def pool_start():
        with pytest.raises(InfraError, match=refused):
            async with WorkspacePool(config):
                pass

    async def attach():  # the runner stream's own TLS (a container id that needs no container: refused first)
        with pytest.raises(InfraError, match=refused):
            await AttachedStream.open(Engine(config), "0" * 64)

    trio.run(pool_start)
    trio.run(attach)


def test_a_refused_tls_client_is_a_one_line_cli_error(daemon, tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(daemon.certs / "other-ca.pem", certs / "ca.pem")  # trusts another CA: the engine is not verified
    shutil.copy(daemon.certs / "cert.pem", certs / "cert.pem")
    shutil.copy(daemon.certs / "key.pem", certs / "key.pem")
    env = {"DOCKER_HOST": daemon.tls_url, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)}
    done = run_gym("gc", env=env)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert f"TLS with the Docker engine at {daemon.tls_url} failed" in done.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr and f"DOCKER_CERT_PATH={certs}" in done.stderr


def test_plaintext_to_a_tls_port_is_an_infra_error_not_a_hang(daemon):
    """Loopback plaintext is allowed by config; the TLS engine refuses it, and that is the engine's error."""
    config = small_config(engine={"base_url": daemon.tls_url, "timeout_s": 10})

    async def main():
        with pytest.raises(InfraError, match="HTTP request to an HTTPS server"):
            async with WorkspacePool(config):
                pass

    trio.run(main)


def test_plaintext_tcp_to_a_remote_address_is_refused_before_any_connection(daemon):
    config = small_config(engine={"base_url": "tcp://192.0.2.1:2375"})  # TEST-NET-1: nothing answers there
    with pytest.raises(SandboxConfigError, match="allow_insecure_tcp"):
        WorkspacePool(config)
    done = run_gym("gc", env={"DOCKER_HOST": "tcp://192.0.2.1:2375"})
    # Exit 2 (a config error), not 3 (an engine that does not answer): refused, never tried.
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "sandbox.engine.allow_insecure_tcp" in done.stderr
    assert "DOCKER_HOST = 'tcp://192.0.2.1:2375' is plaintext tcp://" in done.stderr


def test_the_exit_cleanup_reaches_the_tls_engine(daemon):
    """`cleanup_sync` (atexit, SIGTERM) removes this process's containers on a TLS engine too."""
    config = small_config(engine=daemon.tls_config(), pool={"size": 1})

    async def main():
        async with WorkspacePool(config) as pool:
            await pool.wait_ready()
            before = {c["Id"] for c in daemon.gym_containers()}
            await trio.to_thread.run_sync(pool.cleanup_sync)
            return before, {c["Id"] for c in daemon.gym_containers()}

    before, after = trio.run(main)
    assert before and not after, (before, after)


def test_bench_sandbox_compares_the_tls_engine_with_the_default_one(daemon, monkeypatch):
    """`bench sandbox --engine URL`: round trips on both engines in one run, TLS read from the environment."""
    from sandbox.bench import compare_engines, engine_configs

    for name in ("DOCKER_TLS_VERIFY", "DOCKER_TLS", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SandboxConfigError, match="--engine tcp://192.0.2.1:2375: .*allow_insecure_tcp"):
        engine_configs(["tcp://192.0.2.1:2375"])  # plaintext to a remote host: refused before anything is measured
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(daemon.certs))
    figures = trio.run(compare_engines, engine_configs([daemon.tls_url]), 20, 2)
    assert figures["engine1"].startswith(f"{daemon.tls_url} (TLS, verified")
    assert figures["base_runner_p50_ms"] > 0 and figures["engine1_runner_p50_ms"] > 0
    assert figures["engine1_p50_ratio"] == figures["engine1_runner_p50_ms"] / figures["base_runner_p50_ms"]


def test_the_kill_test_passes_unchanged_against_the_tls_engine(daemon, tmp_path):
    """`gym killtest --config` naming the remote engine: the whole catalog, its host checks and the posture
    snapshot, as against the local socket (tests/integration/test_killtest_catalog.py)."""
    config = tmp_path / "remote.yaml"
    config.write_text(yaml.safe_dump({"sandbox": {"engine": daemon.tls_config()}}))
    report = tmp_path / "killtest.json"
    done = run_gym("killtest", "--config", str(config), "--json", str(report), env={})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    data = json.loads(report.read_text())
    attacks = data["attacks"]
    escaped = [(a["name"], a["verdict"], a["evidence"]) for a in attacks if a["verdict"] != "contained"]
    assert len(attacks) >= 70 and not escaped, escaped
    assert all(check["passed"] for a in attacks for check in a["checks"]), "a host check failed"
    assert "PASS" in done.stdout and "posture: ok" in done.stdout, done.stdout[-2000:]
