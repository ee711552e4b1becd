"""How many connections a server's kernel queue holds while the server accepts none (its process stopped)."""

from __future__ import annotations

import os
import select
import signal
import socket
import time

BURST = 600  # connections at once: past aiohttp's default backlog (128), under the servers' (1024)


def queued_while_stopped(host: str, port: int, pid: int, n: int = BURST) -> int:
    """Stop the server process ``pid``, open ``n`` non-blocking connections to ``host:port``, and count those the
    kernel established within 0.5 s, then let the server go on. A connection past a full accept queue has its SYN
    dropped and retried only after 1 s, so within 0.5 s only the connections the kernel queued are established."""
    sockets: list[socket.socket] = []
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex((host, port))
            sockets.append(sock)
        time.sleep(0.5)
        poller = select.poll()
        for sock in sockets:
            poller.register(sock, select.POLLOUT)
        writable = {fd for fd, _ in poller.poll(0)}
        return sum(
            1
            for sock in sockets
            if sock.fileno() in writable and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        )
    finally:
        os.kill(pid, signal.SIGCONT)
        for sock in sockets:
            sock.close()
