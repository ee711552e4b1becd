"""The attach handshake with an engine that goes away mid-way is the engine's failure (InfraError), never an
exception past the pool: a daemon SIGKILLed while a warm workspace was attaching once crashed a rollout
(trio raises a reset socket as BrokenResourceError, which is not an OSError)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import trio

from sandbox.docker_engine import AttachedStream
from sandbox.errors import InfraError


def fake_engine(path: str) -> SimpleNamespace:
    return SimpleNamespace(
        url=f"unix://{path}",
        client=SimpleNamespace(api=SimpleNamespace(api_version="1.41")),
        config=SimpleNamespace(engine=SimpleNamespace(timeout_s=5.0)),
    )


@pytest.mark.parametrize("behaviour", ["reset", "close", "refuse", "no-listener"])
def test_an_engine_that_goes_away_during_attach_is_an_infra_error(tmp_path, behaviour):
    path = str(tmp_path / "engine.sock")

    async def main():
        if behaviour == "no-listener":
            with pytest.raises(InfraError, match="cannot attach"):
                await AttachedStream.open(fake_engine(path), "c" * 64)
            return
        listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await listener.bind(path)
        listener.listen(1)

        async def serve():
            conn, _ = await listener.accept()
            if behaviour == "reset":  # closed with the request unread: the client's read gets ECONNRESET
                await trio.sleep(0.2)
                conn.close()
                return
            await conn.recv(4096)
            if behaviour == "refuse":
                await conn.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            conn.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            with pytest.raises(InfraError):
                await AttachedStream.open(fake_engine(path), "c" * 64)
        listener.close()

    trio.run(main)
