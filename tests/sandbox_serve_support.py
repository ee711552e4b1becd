"""A real `python -m gym sandbox-serve` on 127.0.0.1 (port 0) with small bounds, and plain HTTP to it, for the
tests that drive the sandbox service."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.serve_support import start_server, stop_server

# Small enough that every bound is reached in a test: a 1 MiB body, 64 KiB of code, a 2 s run at most, 256 MiB
CONFIG = {
    "server": {
        "max_requests": 6,
        "max_running": 2,
        "max_body_bytes": 1 << 20,
        "read_timeout_s": 5,
        "max_json_values": 4096,
        "max_json_depth": 8,
    },
    "run_code": {
        "max_code_bytes": 65536,
        "max_stdin_bytes": 262144,
        "max_files": 8,
        "max_files_bytes": 262144,
        "max_fetch_files": 4,
        "max_fetch_bytes": 65536,
        "max_run_timeout_s": 2,
    },
    "sandbox": {
        "pool": {"size": 2},
        "budgets": {"memory_mb": 256, "pids": 64, "workspace_mb": 64, "tmp_mb": 32},
        "calls": {"output_limit_bytes": 65536},
    },
    "grade": {"sandbox": {"pool": {"size": 1}}, "concurrency": 1},
}


class Service:
    """A running sandbox service: its URL, its process, and the owner label its containers carry."""

    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.owner = self.call("GET", "/health")[1]["owner"]

    def call(
        self, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None, timeout: float = 60
    ) -> tuple[int, object, dict[str, str]]:
        """``(status, JSON body, headers)`` of one request on a fresh connection."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null"), dict(response.getheaders())
        finally:
            connection.close()

    def run(self, **request) -> dict:
        """A /run_code request that must be answered 200; its response."""
        status, answer, _ = self.call("POST", "/run_code", {"language": "python", **request})
        assert status == 200, answer
        return answer

    def containers(self) -> list[str]:
        """Every container (running or not) that carries this service's owner label."""
        listed = subprocess.run(
            ["docker", "ps", "-a", "-q", "--filter", f"label=gym.owner={self.owner}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return listed.stdout.split()

    def running(self, command: str) -> bool:
        """Whether a process whose command line is ``command`` runs in one of the service's containers (`docker
        top`): a request the service admitted may not have started its process yet."""
        for container in self.containers():
            top = subprocess.run(["docker", "top", container, "-o", "pid,args"], capture_output=True, text=True)
            if any(line.split(None, 1)[1:] == [command] for line in top.stdout.splitlines()):
                return True
        return False


@contextmanager
def sandbox_service(tmp: Path, config: dict | None = None, python: Path | None = None) -> Iterator[Service]:
    """The service on ``config`` (default `CONFIG`), run by ``python`` (default this interpreter); on exit it is
    stopped (SIGTERM) and none of its containers may be left."""
    path = tmp / "sandbox_serve.yaml"
    path.write_text(json.dumps(config or CONFIG))
    proc, url = start_server(path, command="sandbox-serve", python=python)
    service = Service(proc, url)
    try:
        yield service
    finally:
        stop_server(proc)
    assert proc.returncode == 0, f"sandbox-serve exited {proc.returncode}"
    assert service.containers() == [], "containers left behind after sandbox-serve stopped"
