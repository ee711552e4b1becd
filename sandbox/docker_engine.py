"""Docker engine access: every call under a deadline, hardened container specs, attached streams.

Blocking docker-SDK calls run in worker threads under ``trio.fail_after``; an
engine that is down, slow or restarted surfaces as ``InfraError`` naming the
call, never as a hang. The runner's stream is a raw hijacked HTTP connection to
the engine, read and written natively by trio: over its unix socket, or over
TCP inside a ``trio.SSLStream`` (sandbox/engine_url.py says which and with what
TLS); not over ssh://, which the SDK calls alone support.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import select
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import requests
import trio
from docker.types import LogConfig, Ulimit

from sandbox.config import SandboxConfig
from sandbox.engine_url import DEFAULT_SOCKET, SSH_STREAMS, EngineTarget, parse_engine_url, resolve_engine
from sandbox.errors import EngineUnreachable, ImageMissing, InfraError, SandboxConfigError
from sandbox.labels import Labels
from sandbox.seccomp import security_opt

log = logging.getLogger(__name__)
T = TypeVar("T")
SANDBOX_UID = 1000
RUNNER_CAPS = ["KILL", "SETUID", "SETGID", "SETPCAP"]
# The runner package run as a directory (sandbox/runner/__main__.py), as images/runner/Dockerfile lays it out;
# its path in the command line is how the kill-test's attacks and host checks know the runner's process.
RUNNER_COMMAND = ["python3", "-I", "-S", "-B", "/opt/gym/sandbox/runner"]
STREAM_HEADER = struct.Struct(">BxxxI")
# An image carrying this label (images/runner/Dockerfile, and every image built FROM it) resolves localhost without
# /etc/hosts (glibc's nss-myhostname): under ``hardening.network: none`` its workspaces start with networking
# disabled. Such a container still gets a network namespace of its own holding only an up loopback (runc's), but
# Docker sets up no libnetwork sandbox for it: no prestart hook re-executing dockerd, no IPv6 set-up, no /etc/hosts
# or /etc/resolv.conf bound from the host. Measured: container start p50 222 -> 103-111 ms, 100-160 ms less CPU per
# container (docs/performance.md). An image without the label keeps network mode none (Docker's /etc/hosts, so
# localhost resolves in any image).
HOSTS_LABEL = "gym.hosts"
HOSTS_VALUE = "myhostname"  # the value images/runner/Dockerfile sets
# Per-IPC-namespace limits (the kernel's defaults allow 32000 identifiers of each kind).
IPC_SYSCTLS = {"kernel.shmmni": "256", "kernel.msgmni": "256", "kernel.sem": "250 32000 32 256"}
# trio renamed the flag; support both so a newer trio does not break thread calls.
_ABANDON = (
    "abandon_on_cancel"
    if "abandon_on_cancel" in inspect.signature(trio.to_thread.run_sync).parameters
    else "cancellable"
)


def root_cause(exc: BaseException) -> BaseException:
    """The first error of a chain (requests wraps urllib3, which wraps the socket's ``ENOENT``)."""
    while exc.__cause__ or exc.__context__:
        exc = exc.__cause__ or exc.__context__
    return exc


def engine_url(config: SandboxConfig) -> str:
    return config.engine.base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


class Engine:
    """A docker SDK client whose every call has a deadline and a clear failure.

    Making one resolves the engine (URL, TLS) and refuses a config that cannot be used (SandboxConfigError),
    before any I/O.
    """

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.target: EngineTarget = resolve_engine(config.engine)
        self.url = self.target.url
        self._client: docker.DockerClient | None = None
        self._ssl_context: ssl.SSLContext | None = None
        self._holds_hosts: bool | None = None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                # A fixed API version: constructing the client does no I/O (no version probe that
                # could block the event loop on a hung engine).
                self._client = self.target.docker_client(
                    timeout=int(self.config.engine.timeout_s), version=self.config.engine.api_version
                )
            except docker.errors.DockerException as exc:
                if self.target.scheme == "ssh":  # the SDK's ssh transport imports paramiko, even to shell out
                    raise SandboxConfigError(
                        f"{self.url}: the docker SDK cannot speak ssh:// here ({exc}): `pip install paramiko`; "
                        f"and {SSH_STREAMS}"
                    ) from exc
                raise EngineUnreachable(f"cannot reach the Docker engine at {self.url}: {exc}") from exc
        return self._client

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of attached streams (built once: loading a CA and a key pair costs milliseconds)."""
        if self._ssl_context is None:
            try:
                self._ssl_context = self.target.tls.ssl_context()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a file that is not PEM
                raise SandboxConfigError(f"unusable TLS files ({self.target.tls.source}): {exc}") from exc
        return self._ssl_context

    async def call(self, what: str, fn: Callable[..., T], *args: Any, timeout: float | None = None, **kwargs: Any) -> T:
        """Run a blocking engine call in a thread, under a deadline; failures become InfraError."""
        deadline = timeout or self.config.engine.timeout_s
        try:
            with trio.fail_after(deadline):
                return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), **{_ABANDON: True})
        except trio.TooSlowError:
            raise InfraError(f"Docker engine call {what!r} did not answer within {deadline:.0f}s") from None
        except docker.errors.NotFound:
            raise
        except requests.exceptions.SSLError as exc:  # a ConnectionError, but the engine did answer
            raise InfraError(f"{tls_failure(self, root_cause(exc))} (call {what!r})") from exc
        except requests.exceptions.ConnectionError as exc:  # no socket, refused: nothing listens (not a slow engine)
            raise EngineUnreachable(
                f"the Docker engine at {self.url} does not answer: {root_cause(exc)} (call {what!r})"
            ) from exc
        except (docker.errors.DockerException, OSError, ValueError) as exc:
            raise InfraError(f"Docker engine call {what!r} failed: {exc}") from exc

    async def healthy(self, timeout: float | None = None) -> bool:
        """Whether the engine answers a ping within ``timeout`` (default 5 s at most: a restarting daemon may
        accept and not answer)."""
        try:
            await self.call("ping", self.client.api.ping, timeout=timeout or min(5.0, self.config.engine.timeout_s))
        except InfraError:
            return False
        return True

    def image_missing(self) -> ImageMissing:
        return ImageMissing(
            f"image {self.config.image} is not on the Docker engine at {self.url} — build it with "
            "`python -m gym images build` (`bin/setup` runs it; SWE instance images need `--swe FILE`)"
        )

    async def require_image(self) -> None:
        """Raise ImageMissing unless the configured image is on the engine (and learn its ``HOSTS_LABEL``)."""
        try:
            self._learn_hosts(await self.call("inspect image", self.client.api.inspect_image, self.config.image))
        except docker.errors.NotFound:
            raise self.image_missing() from None

    async def holds_hosts(self) -> bool:
        """Whether the configured image carries ``HOSTS_LABEL`` (asked of the engine once, unless ``require_image``
        did; a missing image: False, and its create fails as it always did)."""
        if self._holds_hosts is None:
            try:
                self._learn_hosts(await self.call("inspect image", self.client.api.inspect_image, self.config.image))
            except docker.errors.NotFound:
                return False
        return self._holds_hosts

    def _learn_hosts(self, image: Any) -> None:
        config = image.get("Config") if isinstance(image, dict) else None  # an odd reply: no label
        labels = config.get("Labels") if isinstance(config, dict) else None
        self._holds_hosts = isinstance(labels, dict) and labels.get(HOSTS_LABEL) == HOSTS_VALUE

    async def create(self, spec: dict[str, Any]) -> str:
        """Create a container from ``container_spec`` output; returns its id."""
        try:
            created = await self.call("create", self.client.api.create_container, **spec)
        except docker.errors.ImageNotFound:
            raise self.image_missing() from None
        return created["Id"]

    def container_spec(self, labels: Labels, name: str, holds_hosts: bool = False) -> dict[str, Any]:
        """Keyword arguments of ``APIClient.create_container`` for one hardened workspace (``holds_hosts``: the image
        resolves localhost alone, see ``HOSTS_LABEL``)."""
        cfg = self.config
        budgets, hard = cfg.budgets, cfg.hardening
        api = self.client.api
        tmpfs_opts = f"rw,exec,nosuid,nodev,uid={SANDBOX_UID},gid={SANDBOX_UID}"
        host_config = api.create_host_config(
            network_mode=hard.network,
            cap_drop=["ALL"] if hard.drop_caps else None,
            cap_add=RUNNER_CAPS if hard.drop_caps else None,
            security_opt=(["no-new-privileges"] if hard.no_new_privileges else []) + security_opt(hard.seccomp),
            read_only=hard.read_only_rootfs,
            tmpfs={
                cfg.workdir: f"{tmpfs_opts},mode=0755,size={budgets.workspace_mb}m,nr_inodes={budgets.workspace_inodes}",
                "/tmp": f"{tmpfs_opts},mode=1777,size={budgets.tmp_mb}m",
            },
            shm_size="16m",
            pids_limit=budgets.pids if budgets.pids is not None else -1,
            mem_limit=f"{budgets.memory_mb}m",
            memswap_limit=f"{budgets.memory_mb}m",
            nano_cpus=int(budgets.cpus * 1e9) if budgets.cpus is not None else None,
            cpuset_cpus=budgets.cpuset_cpus,
            ulimits=[
                Ulimit(name="nofile", soft=budgets.nofile, hard=budgets.nofile),
                Ulimit(name="fsize", soft=budgets.fsize_mb << 20, hard=budgets.fsize_mb << 20),
                Ulimit(name="core", soft=0, hard=0),
            ],
            init=True,
            log_config=LogConfig(type="none"),  # the protocol stream is never logged: nothing can fill the disk
            ipc_mode="private",
            # System V IPC objects outlive processes, and the runner removes them after each call on the
            # call's time: bound how many one IPC namespace may hold, so that clean-up stays short.
            sysctls=IPC_SYSCTLS,
        )
        return dict(
            image=cfg.image,
            command=RUNNER_COMMAND,
            user="0:0",  # the runner; every sandboxed command runs as SANDBOX_UID (see sandbox/runner/)
            stdin_open=True,
            tty=False,
            network_disabled=hard.network == "none" and holds_hosts,
            hostname="workspace",
            working_dir=cfg.workdir,
            # GYM_RESET: the runner records its start for `reset` (a few ms) only where the pool recycles
            environment={
                "GYM_FS_PATHS": f"{cfg.workdir}:/tmp",
                **({"GYM_RESET": "1"} if cfg.pool.recycle_uses or cfg.pool.disjoint_uses else {}),
            },
            labels=labels.as_dict(),
            name=name,
            host_config=host_config,
        )

    async def attach(self, container_id: str) -> AttachedStream:
        """Hijack the container's stdin/stdout (call before start so no byte is missed)."""
        return await AttachedStream.open(self, container_id)

    async def remove(self, container_id: str) -> None:
        """Force-remove a container (with its anonymous volumes); a missing one is fine, and so is one the engine is
        removing already (a pool's start-up gc collecting an orphan while its dying owner's removal is under way)."""
        try:
            await self.call("remove", self._remove_once, container_id)
        except docker.errors.NotFound:
            pass

    def _remove_once(self, container_id: str) -> None:
        try:
            self.client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "already in progress" in str(exc.explanation or exc):
                return
            raise

    async def labelled(self) -> list[dict[str, Any]]:
        """All containers (running or not) that carry the gym label."""
        return await self.call("list", self.client.api.containers, all=True, filters={"label": Labels.MARK})

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


async def connect_api(engine: Engine) -> tuple[trio.abc.Stream, trio.SocketStream]:
    """A byte stream to the engine's API and the socket under it (the same object but over TLS).

    unix: the socket. tcp: a TCP connection, inside a ``trio.SSLStream`` when the engine has TLS (handshake
    done here, so a certificate refused on either side fails here, as an SSL error under trio's
    BrokenResourceError). ``https_compatible``: dockerd closes hijacked connections without close_notify.
    """
    url = parse_engine_url(engine.url)
    if url.scheme == "unix":
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.connect(url.host)
        except BaseException:
            sock.close()
            raise
        transport = trio.SocketStream(sock)
        return transport, transport
    context = engine.ssl_context() if engine.target.tls is not None else None  # unusable files: before connecting
    transport = await trio.open_tcp_stream(url.host, url.port)
    if context is None:
        return transport, transport
    stream = trio.SSLStream(transport, context, server_hostname=url.host, https_compatible=True)
    try:
        await stream.do_handshake()
    except BaseException:
        transport.socket.close()
        raise
    return stream, transport


def tls_failure(engine: Engine, cause: BaseException) -> str:
    """What went wrong with the TLS of an engine, and where its certificates came from."""
    if cause.args and isinstance(cause.args[0], BaseException):  # urllib3 wraps the ssl error as an argument
        cause = cause.args[0]
    if isinstance(cause, ssl.SSLEOFError | ConnectionError | EOFError):
        # An engine refusing our client certificate sends an alert and closes: the close can overtake the alert.
        detail = f"the engine closed the connection ({cause}), as it does when it refuses the client certificate"
    else:
        detail = str(cause)
    source = engine.target.tls.source
    return f"TLS with the Docker engine at {engine.url} failed: {detail} — check its certificates ({source})"


def _attach_failure(engine: Engine, container_id: str, exc: BaseException, answered: bool) -> InfraError:
    if isinstance(exc, EOFError) and not engine.url.startswith("tcp://"):
        return InfraError(f"engine closed the attach of {container_id[:12]}")
    what = f"cannot attach to container {container_id[:12]}"
    cause = root_cause(exc)
    tls = engine.target.tls if engine.url.startswith("tcp://") else None
    if tls is not None and (
        isinstance(cause, ssl.SSLError)  # a certificate refused, by us or by the engine
        or (not answered and isinstance(cause, ConnectionError | EOFError))  # closed before a word: refused too
    ):
        return InfraError(f"{what}: {tls_failure(engine, cause)}")
    return InfraError(f"{what}: {exc!r}")


class AttachedStream:
    """The runner's stdin (raw bytes) and stdout (docker's multiplexed frames) over one connection."""

    def __init__(self, stream: trio.abc.Stream, transport: trio.SocketStream):
        self._stream = stream  # the runner's bytes: the socket itself, or TLS over it
        self._transport = transport
        self._pending = bytearray()

    @classmethod
    async def open(cls, engine: Engine, container_id: str) -> AttachedStream:
        if engine.url.startswith("ssh://"):  # a config the pool cannot serve: not an engine outage
            raise SandboxConfigError(f"{engine.url}: {SSH_STREAMS}")
        version = engine.client.api.api_version
        request = (
            f"POST /v{version}/containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=0 HTTP/1.1\r\n"
            "Host: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n"
        ).encode()
        transport: trio.SocketStream | None = None
        head = bytearray()
        try:
            with trio.fail_after(engine.config.engine.timeout_s):
                stream, transport = await connect_api(engine)
                await stream.send_all(request)
                while b"\r\n\r\n" not in head:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        raise EOFError("the engine closed the connection")
                    head += chunk
        except (
            OSError,
            EOFError,
            trio.TooSlowError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ) as exc:
            # The engine went away mid-handshake (a daemon killed at that moment resets the socket, which trio
            # raises as BrokenResourceError, not OSError): the engine's failure, never an exception past the pool.
            if transport is not None:
                transport.socket.close()
            raise _attach_failure(engine, container_id, exc, answered=bool(head)) from exc
        status_line, _, rest = bytes(head).partition(b"\r\n")
        if b" 101 " not in status_line and b" 200 " not in status_line:
            transport.socket.close()
            raise InfraError(f"attach to {container_id[:12]} refused: {status_line.decode(errors='replace')}")
        attached = cls(stream, transport)
        attached._pending += rest.partition(b"\r\n\r\n")[2]
        return attached

    def abort(self) -> None:
        """Close the connection now, from synchronous code: a task waiting on it wakes with ClosedResourceError
        (trio's socket close notifies its waiters), a later send or receive raises it."""
        self._transport.socket.close()

    def hung_up(self) -> bool:
        """Whether an idle stream has anything to read, without blocking.

        A ready runner sends nothing until asked, so anything readable on an idle stream is its end: the
        runner, its container or the engine's attach connection (a daemon restart) is gone. Looked at: our
        frame buffer; over TLS, the bytes trio's SSL layer holds (decrypted, or read from the socket and not
        yet decrypted); then the socket, where a runner's last frames, a TLS close_notify, a FIN or a reset
        of the connection all read as readable. Not seen: a peer gone without a FIN or reset (a host
        powered off mid-way); its next call meets the call deadline instead.
        """
        if self._pending:
            return True
        if isinstance(self._stream, trio.SSLStream):
            # trio's incoming BIO is private; without it only a race (bytes read with the runner's hello) is missed.
            incoming = getattr(self._stream, "_incoming", None)
            if self._stream.pending() or (incoming is not None and incoming.pending):
                return True
        readable, _, _ = select.select([self._transport.socket.fileno()], [], [], 0)
        return bool(readable)

    async def send(self, data: bytes) -> None:
        await self._stream.send_all(data)

    async def receive(self) -> bytes:
        """Next chunk of the runner's stdout; b"" at end of stream."""
        while True:
            if len(self._pending) >= STREAM_HEADER.size:
                kind, size = STREAM_HEADER.unpack_from(self._pending)
                if len(self._pending) >= STREAM_HEADER.size + size:
                    payload = bytes(self._pending[STREAM_HEADER.size : STREAM_HEADER.size + size])
                    del self._pending[: STREAM_HEADER.size + size]
                    if kind == 1 and payload:
                        return payload
                    continue
            chunk = await self._stream.receive_some(1 << 16)
            if not chunk:
                return b""
            self._pending += chunk

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._stream.aclose()


def container_name(labels: Labels) -> str:
    pid = labels.owner.split(":")[1] if labels.owner.count(":") == 2 else "x"
    return f"gym-{labels.role}-{pid}-{int(time.time() * 1000) % 10**9}-{os.urandom(3).hex()}"
