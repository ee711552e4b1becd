"""A TCP listener on this host's Docker bridge gateway: the one destination network attacks really contact.

It lives on this machine, so reaching it sends nothing outside. Each
connecting attack sends its name as the first line; the host then knows,
independently of the attack's own report, which attacks got through.
"""

from __future__ import annotations

import logging
import socket
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import docker
import trio

from sandbox.docker_engine import Engine
from sandbox.errors import InfraError

log = logging.getLogger(__name__)
FALLBACK_GATEWAY = "172.17.0.1"  # Docker's default bridge gateway, used when the bridge cannot be inspected
FIRST_LINE_TIMEOUT_S = 2.0
CLOSED_PORT = 9  # discard: nothing listens there on the gateway


class GatewayListener:
    """The listener's address to hand to attacks, and ``seen`` (first line -> peers) to judge them by."""

    def __init__(self, host: str, port: int, listening: bool):
        self.host = host
        self.port = port
        self.listening = listening
        self.seen: dict[str, list[str]] = defaultdict(list)

    async def serve(self, sock: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        while True:
            conn, peer = await sock.accept()
            nursery.start_soon(self._first_line, conn, f"{peer[0]}:{peer[1]}")

    async def _first_line(self, conn: trio.socket.SocketType, peer: str) -> None:
        data = b""
        with conn, trio.move_on_after(FIRST_LINE_TIMEOUT_S):
            while b"\n" not in data and len(data) < 256:
                chunk = await conn.recv(256)
                if not chunk:
                    break
                data += chunk
        self.seen[data.split(b"\n")[0].decode(errors="replace").strip()].append(peer)


@asynccontextmanager
async def gateway_listener(engine: Engine) -> AsyncIterator[GatewayListener]:
    """Listen on the bridge gateway for the duration of the block (an unused port when that fails)."""
    host = await _gateway(engine)
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        await sock.bind((host, 0))
    except OSError as exc:
        sock.close()
        log.warning("cannot listen on the bridge gateway %s (%s): network attacks get a closed port", host, exc)
        yield GatewayListener(host, CLOSED_PORT, listening=False)
        return
    with sock:
        sock.listen(16)
        listener = GatewayListener(host, sock.getsockname()[1], listening=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.serve, sock, nursery)
            try:
                yield listener
            finally:
                nursery.cancel_scope.cancel()


async def _gateway(engine: Engine) -> str:
    try:
        network = await engine.call("inspect bridge", engine.client.api.inspect_network, "bridge")
    except (InfraError, docker.errors.NotFound) as exc:  # no bridge: nothing can reach a gateway then
        log.warning("no bridge network found (%s); using %s", exc, FALLBACK_GATEWAY)
        return FALLBACK_GATEWAY
    configs = (network.get("IPAM") or {}).get("Config") or []
    gateways = [c["Gateway"] for c in configs if c.get("Gateway") and ":" not in c["Gateway"]]
    return gateways[0] if gateways else FALLBACK_GATEWAY
