"""Engine URLs, TLS material and the refusals (sandbox/engine_url.py), and the runner stream over TLS.

Resolution is pure: each rule is checked on hand values, with an environment mapping instead of the
process's. The TLS stream is checked against a fake engine on 127.0.0.1 (a trio TLS server that speaks
the attach upgrade), with certificates generated here: no Docker needed.
"""

from __future__ import annotations

import ssl
import struct
from pathlib import Path

import pytest
import trio
from pydantic import ValidationError

from sandbox.config import DockerEngineConfig, SandboxConfig
from sandbox.docker_engine import AttachedStream, Engine
from sandbox.engine_url import DEFAULT_SOCKET, is_loopback, parse_engine_url, resolve_engine, tls_from_env
from sandbox.errors import InfraError, SandboxConfigError
from tests.second_daemon import make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("engine-tls") / "tls"
    make_certificates(directory)
    return directory


def engine_config(**fields) -> DockerEngineConfig:
    return DockerEngineConfig.model_validate(fields)


# ---------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("unix:///var/run/docker.sock", "unix", "/var/run/docker.sock", None),
        ("tcp://10.1.2.3:2376", "tcp", "10.1.2.3", 2376),
        ("tcp://[::1]:2376", "tcp", "::1", 2376),
        ("tcp://docker.internal:2376/", "tcp", "docker.internal", 2376),
        ("ssh://gym@build-7", "ssh", "build-7", None),
        ("ssh://gym@build-7:2222", "ssh", "build-7", 2222),
    ],
)
def test_accepted_urls(url, scheme, host, port):
    parsed = parse_engine_url(url)
    assert (parsed.scheme, parsed.host, parsed.port) == (scheme, host, port)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://10.1.2.3:2375", "an engine URL is unix:///PATH"),
        ("/var/run/docker.sock", "an engine URL is unix:///PATH"),
        ("npipe:////./pipe/docker_engine", "an engine URL is unix:///PATH"),
        ("unix://var/run/docker.sock", "absolute path"),
        ("tcp://10.1.2.3", "needs a port"),
        ("tcp://10.1.2.3:http", "not a number"),
        ("tcp://10.1.2.3:70000", "not a number"),
        ("tcp://:2376", "no host"),
        ("tcp://10.1.2.3:2376/v1.41", "no path"),
        ("tcp://admin@10.1.2.3:2376", "takes no user"),
    ],
)
def test_unusable_urls_name_the_field(url, says):
    with pytest.raises(ValueError, match=says) as caught:
        parse_engine_url(url, "DOCKER_HOST")
    assert str(caught.value).startswith(f"DOCKER_HOST = {url!r}")


def test_the_config_refuses_an_unusable_url_when_it_is_read(tmp_path):
    path = tmp_path / "sandbox.yaml"
    path.write_text("sandbox:\n  engine:\n    base_url: tcp://10.1.2.3\n")
    with pytest.raises(SandboxConfigError, match="needs a port"):
        SandboxConfig.from_yaml(path)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.8.7", "::1", "localhost", "LOCALHOST"])
def test_loopback(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "0.0.0.0", "192.168.1.20", "::", "docker.internal", "localhost.evil"])
def test_not_loopback(host):
    assert not is_loopback(host)


def test_base_url_wins_then_docker_host_then_the_default_socket():
    env = {"DOCKER_HOST": "unix:///run/other.sock"}
    assert resolve_engine(engine_config(base_url="unix:///run/mine.sock"), env).url == "unix:///run/mine.sock"
    assert resolve_engine(engine_config(), env).url == "unix:///run/other.sock"
    assert resolve_engine(engine_config(), {}).url == DEFAULT_SOCKET
    assert resolve_engine(engine_config(), {}).tls is None


# ---------------------------------------------------------------- plaintext tcp


@pytest.mark.parametrize("url", ["tcp://10.1.2.3:2375", "tcp://docker.internal:2375", "tcp://0.0.0.0:2375"])
def test_plaintext_tcp_to_a_remote_address_is_refused_naming_the_field(url):
    with pytest.raises(SandboxConfigError, match="allow_insecure_tcp") as caught:
        resolve_engine(engine_config(base_url=url), {})
    assert "sandbox.engine.base_url" in str(caught.value) and "plaintext" in str(caught.value)


def test_plaintext_tcp_from_docker_host_is_refused_naming_docker_host():
    with pytest.raises(SandboxConfigError, match="DOCKER_HOST = 'tcp://10.1.2.3:2375'.*allow_insecure_tcp"):
        resolve_engine(engine_config(), {"DOCKER_HOST": "tcp://10.1.2.3:2375"})


def test_plaintext_tcp_is_allowed_to_loopback_and_when_the_config_says_so():
    assert resolve_engine(engine_config(base_url="tcp://127.0.0.1:2375"), {}).tls is None
    assert resolve_engine(engine_config(base_url="tcp://[::1]:2375"), {}).tls is None
    target = resolve_engine(engine_config(base_url="tcp://10.1.2.3:2375", allow_insecure_tcp=True), {})
    assert target.tls is None and (target.host, target.port) == ("10.1.2.3", 2375)


def test_docker_cert_path_alone_does_not_turn_tls_on(certs):
    """As the docker CLI reads it (the SDK's from_env would): so plaintext to a remote host is still refused."""
    with pytest.raises(SandboxConfigError, match="allow_insecure_tcp"):
        resolve_engine(engine_config(base_url="tcp://10.1.2.3:2376"), {"DOCKER_CERT_PATH": str(certs)})


# ---------------------------------------------------------------- TLS material


def test_tls_from_the_config(certs):
    config = engine_config(
        base_url="tcp://10.1.2.3:2376",
        tls={"ca": str(certs / "ca.pem"), "cert": str(certs / "cert.pem"), "key": str(certs / "key.pem")},
    )
    tls = resolve_engine(config, {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/nonexistent"}).tls
    assert (tls.ca, tls.cert, tls.key, tls.verify) == (certs / "ca.pem", certs / "cert.pem", certs / "key.pem", True)
    assert tls.source == "sandbox.engine.tls"  # the config wins over the environment


def test_tls_files_that_are_not_there_are_named(certs):
    config = engine_config(base_url="tcp://10.1.2.3:2376", tls={"ca": str(certs / "nope.pem")})
    with pytest.raises(SandboxConfigError, match=r"sandbox.engine.tls.ca = '.*nope.pem': no such file"):
        resolve_engine(config, {})


def test_a_client_certificate_needs_its_key(certs):
    with pytest.raises(ValidationError, match="tls.cert and tls.key go together"):
        engine_config(base_url="tcp://10.1.2.3:2376", tls={"cert": str(certs / "cert.pem")})


def test_tls_for_a_url_that_is_not_tcp_is_refused(certs):
    with pytest.raises(ValidationError, match="tls is set but base_url = 'unix:///x.sock' is not tcp"):
        engine_config(base_url="unix:///x.sock", tls={"ca": str(certs / "ca.pem")})
    with pytest.raises(SandboxConfigError, match="DOCKER_HOST = 'ssh://u@h' is not tcp"):
        resolve_engine(engine_config(tls={"ca": str(certs / "ca.pem")}), {"DOCKER_HOST": "ssh://u@h"})


def test_docker_tls_verify_reads_the_cert_path_as_the_cli_does(certs):
    for value in ("1", "0", "yes"):  # any non-empty value turns verification on (the CLI's rule)
        tls = tls_from_env({"DOCKER_TLS_VERIFY": value, "DOCKER_CERT_PATH": str(certs)})
        assert (tls.ca, tls.cert, tls.key, tls.verify) == (
            certs / "ca.pem",
            certs / "cert.pem",
            certs / "key.pem",
            True,
        )
    assert tls_from_env({"DOCKER_TLS_VERIFY": "", "DOCKER_CERT_PATH": str(certs)}) is None
    assert tls_from_env({}) is None


def test_docker_tls_encrypts_without_verifying(certs):
    tls = tls_from_env({"DOCKER_TLS": "1", "DOCKER_CERT_PATH": str(certs)})
    assert tls.verify is False and tls.ca is None and tls.cert == certs / "cert.pem"
    context = tls.ssl_context()
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_the_cert_path_defaults_to_home_docker(tmp_path, certs):
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "ca.pem").write_bytes((certs / "ca.pem").read_bytes())
    tls = tls_from_env({"DOCKER_TLS_VERIFY": "1", "HOME": str(tmp_path)})
    assert tls.ca == tmp_path / ".docker" / "ca.pem"
    assert tls.cert is None and tls.key is None  # no client pair there: none presented


def test_docker_tls_verify_without_a_ca_is_named(tmp_path):
    with pytest.raises(SandboxConfigError, match=r"DOCKER_TLS_VERIFY is set but .*ca.pem does not exist"):
        tls_from_env({"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path)})


def test_env_tls_makes_a_remote_tcp_engine_acceptable(certs):
    env = {"DOCKER_HOST": "tcp://10.1.2.3:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)}
    target = resolve_engine(engine_config(), env)
    assert target.tls is not None and target.tls.source == f"DOCKER_CERT_PATH={certs}"


def test_sdk_client_arguments(certs):
    tls = {"ca": str(certs / "ca.pem"), "cert": str(certs / "cert.pem"), "key": str(certs / "key.pem")}
    target = resolve_engine(engine_config(base_url="tcp://10.1.2.3:2376", tls=tls), {})
    kwargs = target.client_kwargs()
    assert kwargs["tls"].ca_cert == str(certs / "ca.pem") and kwargs["tls"].verify is True
    assert kwargs["tls"].cert == (str(certs / "cert.pem"), str(certs / "key.pem"))
    client = target.docker_client(timeout=5, version="1.41")  # no I/O
    # The configured CA is the one used: REQUESTS_CA_BUNDLE (set on many machines) would replace it.
    assert client.api.base_url == "https://10.1.2.3:2376" and client.api.trust_env is False
    client.close()
    ssh = resolve_engine(engine_config(base_url="ssh://gym@build-7"), {})
    assert ssh.client_kwargs() == {"base_url": "ssh://gym@build-7", "use_ssh_client": True}


def test_verifying_context_checks_the_ca_and_the_host(certs):
    tls = tls_from_env({"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)})
    context = tls.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


# ---------------------------------------------------------------- the attached stream over TLS (a fake engine)

FRAME = struct.Struct(">BxxxI")
UPGRADED = b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"


def server_context(certs: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs / "ca.pem"))
    context.load_cert_chain(str(certs / "server-cert.pem"), str(certs / "server-key.pem"))
    context.verify_mode = ssl.CERT_REQUIRED  # as dockerd --tlsverify: a client certificate of the CA
    return context


async def fake_engine(certs: Path, host: str = "127.0.0.1", *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """One attach: answer the upgrade, say "hello" as a stdout frame, echo one frame, then hang up."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    task_status.started(listeners[0].socket.getsockname()[1])
    stream = trio.SSLStream(await listeners[0].accept(), server_context(certs), server_side=True)
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:  # the client hung up (one we refused): nothing to answer
                return
            head += chunk
        assert head.startswith(b"POST /v1.41/containers/") and b"Upgrade: tcp" in head
        await stream.send_all(UPGRADED + FRAME.pack(1, 5) + b"hello")
        data = await stream.receive_some(4096)
        await stream.send_all(FRAME.pack(1, len(data)) + data)
        await trio.sleep(0.2)
    except trio.BrokenResourceError:
        pass  # a client we refused, or one that refused us
    finally:
        await stream.transport_stream.aclose()
        for listener in listeners:
            await listener.aclose()


def tls_engine(certs: Path, port: int, host: str = "127.0.0.1", **tls) -> Engine:
    files = {"ca": str(certs / "ca.pem"), "cert": str(certs / "cert.pem"), "key": str(certs / "key.pem"), **tls}
    files = {k: v for k, v in files.items() if v is not None}
    return Engine(SandboxConfig.model_validate({"engine": {"base_url": f"tcp://{host}:{port}", "tls": files}}))


def test_the_runner_stream_over_tls_and_hung_up(certs):
    async def main():
        async with trio.open_nursery() as nursery:
            port = await nursery.start(fake_engine, certs)
            stream = await AttachedStream.open(tls_engine(certs, port), "c" * 64)
            assert await stream.receive() == b"hello"
            assert not stream.hung_up()  # idle and connected: nothing to read
            await stream.send(b"ping")
            assert await stream.receive() == b"ping"
            await trio.sleep(0.5)  # the engine hangs up
            assert stream.hung_up()
            assert await stream.receive() == b""
            await stream.aclose()

    trio.run(main)


@pytest.mark.parametrize(
    ("tls", "host", "says"),
    [
        ({"ca": "other-ca.pem"}, "127.0.0.1", "CERTIFICATE_VERIFY_FAILED"),  # not the engine's CA
        ({}, "127.0.0.2", "CERTIFICATE_VERIFY_FAILED"),  # the engine's certificate names 127.0.0.1, not .2
        # The engine refuses the client (none, or one of another CA): it closes (dockerd sends an alert first).
        ({"cert": None, "key": None}, "127.0.0.1", "(alert|refuses the client certificate)"),
        ({"cert": "other-cert.pem", "key": "other-key.pem"}, "127.0.0.1", "(alert|refuses the client certificate)"),
    ],
)
def test_a_refused_certificate_is_an_infra_error_naming_tls(certs, tls, host, says):
    files = {k: (str(certs / v) if v else None) for k, v in tls.items()}

    async def main():
        async with trio.open_nursery() as nursery:
            port = await nursery.start(fake_engine, certs, host)
            refused = f"TLS with the Docker engine at tcp://{host}:{port} failed: .*{says}"
            with pytest.raises(InfraError, match=refused):
                await AttachedStream.open(tls_engine(certs, port, host, **files), "c" * 64)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_without_verification_the_host_name_is_not_checked(certs):
    async def main():
        async with trio.open_nursery() as nursery:
            port = await nursery.start(fake_engine, certs, "127.0.0.2")
            stream = await AttachedStream.open(tls_engine(certs, port, "127.0.0.2", verify=False), "c" * 64)
            assert await stream.receive() == b"hello"
            await stream.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_ssh_engines_refuse_the_runner_stream_with_what_works_instead():
    engine = Engine(SandboxConfig.model_validate({"engine": {"base_url": "ssh://gym@build-7"}}))

    async def main():
        with pytest.raises(SandboxConfigError, match=r"ssh://gym@build-7: the runner's attached stream") as caught:
            await AttachedStream.open(engine, "c" * 64)
        assert "use tcp://HOST:PORT with TLS" in str(caught.value) and "unix:///tmp/remote-docker.sock" in str(
            caught.value
        )

    trio.run(main)


def test_tls_files_that_are_not_pem_are_a_config_error_before_connecting(tmp_path, certs):
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    engine = tls_engine(certs, 9, ca=str(tmp_path / "ca.pem"))  # port 9 (discard): never connected to

    async def main():
        with pytest.raises(SandboxConfigError, match=r"unusable TLS files \(sandbox.engine.tls\)"):
            await AttachedStream.open(engine, "c" * 64)

    trio.run(main)
