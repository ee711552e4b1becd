"""A vLLM server the trainer starts and stops, and the admin calls a weight push makes on any vLLM server (torch-free).

`VllmServer` launches ``PYTHON -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs) from the
interpreter the config names (vLLM lives in its own virtual environment: it pins its own torch), with
``VLLM_SERVER_DEV_MODE=1`` (the admin routes below exist only then), waits for ``/health`` within a bound, and
terminates its process group at the end (`stop`, idempotent, with an `atexit` backstop). Its output goes to a
log file whose tail every launch error quotes.

`VllmAdmin` is the weight push's side of the server's RL routes: ``POST /pause`` (``mode=wait`` drains the
requests in flight, ``mode=keep`` freezes them), ``POST /collective_rpc`` ``{"method": "reload_weights",
"kwargs": {"weights_path": DIR}}`` (every worker reloads the checkpoint directory in place; vLLM 0.32's
``Worker.reload_weights``), ``POST /reset_prefix_cache`` (keys and values cached under the old weights must not
serve a new request) and ``POST /resume``. Each failure is a `VllmAdminError` naming the route and the reply.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from policies.vllm_engine import wait_healthy

FORCED_FLAGS = ("--model", "--host", "--port", "--logprobs-mode", "--served-model-name")
"""Flags the launcher sets itself (`launch_command`); the config's extra args may not repeat them."""


class VllmAdminError(RuntimeError):
    """A vLLM server refused or failed an admin call of a weight push (the message names the URL, the route and
    the reply), or a launched server did not come up."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def launch_command(python: Path, model_dir: Path, host: str, port: int, args: Sequence[str]) -> list[str]:
    """The server's argv: the model directory, the address, behaviour logprobs (``processed_logprobs``: after
    temperature and top-k/top-p, what `policies.vllm_engine` records) and the config's extra ``args``."""
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "policy",
        "--host",
        host,
        "--port",
        str(port),
        "--logprobs-mode",
        "processed_logprobs",
        *args,
    ]


def forced_flag(args: Sequence[str]) -> str | None:
    """The first of ``args`` that sets a flag the launcher owns (``--port 1`` or ``--port=1``), or None."""
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in FORCED_FLAGS:
            return name
    return None


def replica_devices(replicas: int, per_replica: int, devices: Sequence[str] | None) -> list[str]:
    """Each replica's ``CUDA_VISIBLE_DEVICES``: replica i takes ``devices[i * per_replica : (i + 1) * per_replica]``
    (default devices: the entries of this process's ``CUDA_VISIBLE_DEVICES`` when set, else 0, 1, ...); ValueError
    when there are too few."""
    if devices is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",") if visible else [str(i) for i in range(replicas * per_replica)]
    devices = [d.strip() for d in devices if d.strip()]
    if len(devices) < replicas * per_replica:
        raise ValueError(
            f"{replicas} replicas x {per_replica} GPU(s) need {replicas * per_replica} devices, "
            f"got {len(devices)} ({','.join(devices) or 'none'})"
        )
    return [",".join(devices[i * per_replica : (i + 1) * per_replica]) for i in range(replicas)]


def start_all(servers: Sequence[VllmServer], timeout_s: float) -> list[float]:
    """Start ``servers`` together (each in its own thread: a GPU server loads for minutes); seconds each took.
    When one fails, all are stopped and its VllmAdminError raised."""
    with ThreadPoolExecutor(len(servers)) as pool:
        futures = [pool.submit(server.start, timeout_s) for server in servers]
        errors = [f.exception() for f in futures]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        for server in servers:
            server.stop()
        raise failed
    return [f.result() for f in futures]


class VllmServer:
    """One launched vLLM server process (module docstring)."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        args: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.command = launch_command(python, model_dir, host, self.port, args)
        self.log_path = log_path or model_dir.parent / "vllm_server.log"
        self.env = {**os.environ, **(env or {}), "VLLM_SERVER_DEV_MODE": "1"}
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> float:
        """Launch and wait for ``/health``; seconds it took. VllmAdminError (with the log's tail) when the process
        exits first or is not healthy within ``timeout_s`` (the process is then stopped)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        atexit.register(self.stop)
        try:
            return wait_healthy(self.url, timeout_s, self._alive)
        except (TimeoutError, VllmAdminError) as exc:
            self.stop()
            raise VllmAdminError(f"{exc}; the end of {self.log_path}:\n{self.log_tail()}") from None

    def _alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise VllmAdminError(f"vLLM server {self.url} exited with code {self.process.returncode} before /health")

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate the server's process group (its engine core and workers with it), then kill it after
        ``grace_s``; idempotent."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass


class VllmAdmin:
    """The admin calls of a weight push on one vLLM server started with ``VLLM_SERVER_DEV_MODE=1``."""

    def __init__(self, url: str, timeout_s: float = 300.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def call(self, route: str, body: dict | None = None, params: dict | None = None) -> object:
        """POST ``route``; the JSON reply (or None for an empty one); VllmAdminError when it fails."""
        try:
            with httpx.Client(timeout=self.timeout_s) as client:
                response = client.post(f"{self.url}{route}", json=body, params=params)
        except httpx.HTTPError as exc:
            raise VllmAdminError(f"{self.url}{route}: {type(exc).__name__}: {exc or 'no reply'}") from None
        if response.status_code == 404:
            raise VllmAdminError(
                f"{self.url}{route}: 404: the server has no admin routes; start it with VLLM_SERVER_DEV_MODE=1"
            )
        if response.is_error:
            raise VllmAdminError(f"{self.url}{route}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def healthy(self, timeout_s: float) -> bool:
        """Whether ``/health`` answers 200 within ``timeout_s``."""
        try:
            with httpx.Client(timeout=timeout_s) as client:
                return client.get(f"{self.url}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def reload(self, weights_dir: Path, drain: bool) -> dict[str, float]:
        """Pause, reload every worker's weights from ``weights_dir``, reset the prefix cache, resume; seconds of
        each call. ``drain``: pause in ``wait`` mode (requests in flight finish first; the caller already drained
        its own), else ``keep`` (they freeze, and are preempted by the cache reset so their keys and values are
        recomputed under the new weights when they resume). The server is resumed even when the reload fails."""
        times: dict[str, float] = {}
        started = time.monotonic()
        self.call("/pause", params={"mode": "wait" if drain else "keep"})
        times["pause_s"] = time.monotonic() - started
        try:
            started = time.monotonic()
            self.call("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)}})
            times["reload_s"] = time.monotonic() - started
            started = time.monotonic()
            reset = self.call("/reset_prefix_cache", params={"reset_running_requests": str(not drain).lower()})
            if isinstance(reset, dict) and reset.get("success") is False:
                raise VllmAdminError(f"{self.url}/reset_prefix_cache: the server kept its prefix cache: {reset}")
            times["reset_s"] = time.monotonic() - started
        finally:
            started = time.monotonic()
            self.call("/resume")
            times["resume_s"] = time.monotonic() - started
        return times
