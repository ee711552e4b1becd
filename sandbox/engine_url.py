"""Where the Docker engine is and how it is reached: its URL, transport and TLS material, and the refusals.

Pure functions over the engine config and an environment mapping (no I/O but checking that named
files exist), so every rule is unit-tested on hand values:

- ``unix:///PATH``: the engine's socket on this host.
- ``tcp://HOST:PORT``: TLS from ``sandbox.engine.tls``, else from ``DOCKER_TLS_VERIFY`` / ``DOCKER_TLS`` /
  ``DOCKER_CERT_PATH`` exactly as the docker CLI reads them. Plaintext to a non-loopback address is refused
  unless ``sandbox.engine.allow_insecure_tcp``: whoever can talk to an engine can run root containers on it.
- ``ssh://[USER@]HOST[:PORT]``: the docker SDK's ssh transport (the system ``ssh`` binary running
  ``docker system dial-stdio`` on the host); the runner's attached stream is not offered over it.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlsplit

from sandbox.errors import SandboxConfigError

if TYPE_CHECKING:
    import docker
    import docker.tls


DEFAULT_SOCKET = "unix:///var/run/docker.sock"
Scheme = Literal["unix", "tcp", "ssh"]
URL_FORMS = "unix:///PATH, tcp://HOST:PORT or ssh://[USER@]HOST[:PORT]"
SSH_STREAMS = (
    "the runner's attached stream is not supported over ssh:// engines — use tcp://HOST:PORT with TLS "
    "(sandbox.engine.tls), or forward the remote socket (`ssh -nNT -L /tmp/remote-docker.sock:"
    "/var/run/docker.sock USER@HOST`) and set sandbox.engine.base_url to unix:///tmp/remote-docker.sock"
)


@dataclass(frozen=True)
class ParsedURL:
    scheme: Scheme
    host: str  # the socket path of a unix:// URL
    port: int | None


@dataclass(frozen=True)
class TLSFiles:
    """Client-side TLS of a tcp:// engine; ``source`` names where it came from, for error messages."""

    ca: Path | None
    cert: Path | None
    key: Path | None
    verify: bool
    source: str

    def ssl_context(self) -> ssl.SSLContext:
        """The context the attached stream's ``trio.SSLStream`` uses: same CA, client pair and verification as
        the SDK client (with ``verify``: the CA, or the system trust store, and the host name or IP checked)."""
        if self.verify:
            context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert is not None:
            context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def docker_tls(self) -> docker.tls.TLSConfig:
        import docker.tls

        pair = (str(self.cert), str(self.key)) if self.cert is not None else None
        ca = str(self.ca) if self.ca is not None else None
        return docker.tls.TLSConfig(client_cert=pair, ca_cert=ca, verify=self.verify)


@dataclass(frozen=True)
class EngineTarget:
    """A resolved engine: the URL, what it names, and the TLS it is spoken with (None: plaintext or not tcp)."""

    url: str
    scheme: Scheme
    host: str
    port: int | None
    tls: TLSFiles | None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``docker.DockerClient`` / ``docker.APIClient`` that reach this engine."""
        kwargs: dict[str, Any] = {"base_url": self.url}
        if self.tls is not None:
            kwargs["tls"] = self.tls.docker_tls()
        if self.scheme == "ssh":
            kwargs["use_ssh_client"] = True  # the system ssh (as the docker CLI does); paramiko is not a dependency
        return kwargs

    def docker_client(self, *, timeout: int, version: str) -> docker.DockerClient:
        """A docker SDK client of this engine (constructing it does no I/O)."""
        import docker

        client = docker.DockerClient(**self.client_kwargs(), timeout=timeout, version=version)
        if self.tls is not None:
            # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace a session's own CA (and would send the
            # engine's traffic to an HTTPS_PROXY): the engine's CA is the one configured here, as for the CLI.
            client.api.trust_env = False
        return client


def parse_engine_url(url: str, field: str = "sandbox.engine.base_url") -> ParsedURL:
    """Split an engine URL; ValueError names ``field`` and the accepted forms."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("unix", "tcp", "ssh"):
        raise ValueError(f"{field} = {url!r}: an engine URL is {URL_FORMS}")
    if scheme == "unix":
        if not rest.startswith("/"):
            raise ValueError(f"{field} = {url!r}: a unix socket URL names an absolute path (unix:///var/run/...)")
        return ParsedURL("unix", rest, None)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{field} = {url!r}: the port is not a number in 1..65535") from None
    if not parts.hostname:
        raise ValueError(f"{field} = {url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{field} = {url!r}: an engine URL has no path or query ({URL_FORMS})")
    if scheme == "tcp":
        if port is None:
            raise ValueError(f"{field} = {url!r}: tcp:// needs a port (2376 is Docker's TLS port)")
        if parts.username or parts.password:
            raise ValueError(f"{field} = {url!r}: tcp:// takes no user; authenticate with TLS client certificates")
    return ParsedURL(scheme, parts.hostname, port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` or a loopback IP. No DNS: any other name may resolve
    anywhere, so it counts as remote."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_from_env(environ: Mapping[str, str]) -> TLSFiles | None:
    """TLS as the docker CLI reads its environment, or None (plaintext).

    ``DOCKER_TLS_VERIFY`` non-empty (any value, "0" too): TLS, the engine verified against
    ``$DOCKER_CERT_PATH/ca.pem``. ``DOCKER_TLS`` non-empty: TLS without verifying the engine.
    ``DOCKER_CERT_PATH`` (default ``~/.docker``) holds ``cert.pem`` and ``key.pem``, presented when both exist.
    ``DOCKER_CERT_PATH`` alone does not turn TLS on (the docker SDK's ``from_env`` would; the CLI does not).
    """
    verify = environ.get("DOCKER_TLS_VERIFY", "") != ""
    if not verify and environ.get("DOCKER_TLS", "") == "":
        return None
    directory = Path(environ.get("DOCKER_CERT_PATH") or Path(environ.get("HOME", "~")) / ".docker").expanduser()
    source = f"DOCKER_CERT_PATH={directory}" if environ.get("DOCKER_CERT_PATH") else f"{directory} (DOCKER_CERT_PATH)"
    ca = directory / "ca.pem"
    if verify and not ca.is_file():
        raise SandboxConfigError(
            f"DOCKER_TLS_VERIFY is set but {ca} does not exist: put the engine's CA there or point "
            "DOCKER_CERT_PATH at the directory holding ca.pem, cert.pem and key.pem"
        )
    cert, key = directory / "cert.pem", directory / "key.pem"
    pair = cert.is_file() and key.is_file()
    return TLSFiles(
        ca=ca if verify else None, cert=cert if pair else None, key=key if pair else None, verify=verify, source=source
    )


class TLSSettings(Protocol):
    """The TLS fields of an engine's config (`sandbox.config.EngineTLS`)."""

    ca: Path | None
    cert: Path | None
    key: Path | None
    verify: bool


class EngineSettings(Protocol):
    """What resolving an engine reads of its config (`sandbox.config.DockerEngineConfig`): described here, so this
    module, which the config's validators import, never imports the config."""

    base_url: str | None
    tls: TLSSettings | None
    allow_insecure_tcp: bool


def tls_from_config(engine: EngineSettings) -> TLSFiles | None:
    if engine.tls is None:
        return None
    for name in ("ca", "cert", "key"):
        path = getattr(engine.tls, name)
        if path is not None and not Path(path).is_file():
            raise SandboxConfigError(f"sandbox.engine.tls.{name} = {str(path)!r}: no such file")
    return TLSFiles(engine.tls.ca, engine.tls.cert, engine.tls.key, engine.tls.verify, "sandbox.engine.tls")


def resolve_engine(engine: EngineSettings, environ: Mapping[str, str] | None = None) -> EngineTarget:
    """The engine the config names (``base_url``, else ``DOCKER_HOST``, else the default socket), with its TLS.

    Raises SandboxConfigError naming the field at fault: an unusable URL, TLS files that are not there, TLS
    configured for a URL that is not tcp://, plaintext tcp:// to a non-loopback address without
    ``allow_insecure_tcp``.
    """
    environ = os.environ if environ is None else environ
    if engine.base_url:
        url, field = engine.base_url, "sandbox.engine.base_url"
    elif environ.get("DOCKER_HOST"):
        url, field = environ["DOCKER_HOST"], "DOCKER_HOST"
    else:
        url, field = DEFAULT_SOCKET, "the default engine URL"
    try:
        parsed = parse_engine_url(url, field)
    except ValueError as exc:
        raise SandboxConfigError(str(exc)) from None
    if parsed.scheme != "tcp":
        if engine.tls is not None:
            raise SandboxConfigError(f"sandbox.engine.tls is set but {field} = {url!r} is not tcp://: remove one")
        return EngineTarget(url, parsed.scheme, parsed.host, parsed.port, None)
    tls = tls_from_config(engine) or tls_from_env(environ)
    if tls is None and not engine.allow_insecure_tcp and not is_loopback(parsed.host):
        raise SandboxConfigError(
            f"{field} = {url!r} is plaintext tcp:// to a non-loopback address: anyone on the path could run "
            "containers on that engine — configure TLS (sandbox.engine.tls, or DOCKER_TLS_VERIFY and "
            "DOCKER_CERT_PATH) or, on a network you trust, set sandbox.engine.allow_insecure_tcp: true"
        )
    return EngineTarget(url, "tcp", parsed.host, parsed.port, tls)
