"""`python -m gym bench sandbox-serve`: a /run_code call over HTTP against the same call on the pool directly, in
one run.

The call: a short Python program reading stdin (`print(input()[::-1])`) in a fresh workspace, as SandboxFusion's
clients send it. Direct: `sandbox.fusion.run_code` on a pool in this process (what the service runs per request).
HTTP: a real `python -m gym sandbox-serve` process on 127.0.0.1 (port 0) with the same sandbox config, one new
connection per call (as verl's and SandboxFusion's clients post). Both pools are open for the whole run; the two sides are measured in interleaved blocks (ABBA), each
phase after both warm pools have refilled, so neither side pays for the other's container starts.

Figures: direct_p50_ms / http_p50_ms (one call at a time) and their ratio and difference; direct_calls_per_s /
http_calls_per_s (``--concurrency`` calls in flight, as many workspaces running at once on each side) and their
ratio; calls (per side and figure), concurrency.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from gym.service.app import SandboxServeConfig
from sandbox.fleet import open_pool
from sandbox.fusion import RunCodeRequest, plan, run_code

log = logging.getLogger(__name__)
REQUEST = {"code": "print(input()[::-1])", "stdin": "hello", "language": "python"}
START_TIMEOUT_S = 120.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=60, help="calls measured per side, for each figure")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight for the calls/s figure")
    parser.add_argument("--blocks", type=int, default=4, help="interleaved blocks each figure's calls are split into")


def start_service(config: SandboxServeConfig, directory: Path) -> tuple[subprocess.Popen, str]:
    """A `gym sandbox-serve` process on ``config`` (port 0) and its URL, once it says it listens."""
    path = directory / "sandbox_serve.yaml"
    path.write_text(config.model_dump_json())
    log_path = directory / "sandbox_serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym", "sandbox-serve", str(path), "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=log_path.open("w"),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://[\d.]+:\d+)", log_path.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"sandbox-serve exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"sandbox-serve did not listen within {START_TIMEOUT_S:.0f}s")


def http_call(url: str) -> float:
    """One /run_code call on a new connection; its seconds (the answer must be a successful run)."""
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/run_code", json.dumps(REQUEST), {"Content-Type": "application/json"})
        answer = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    if answer.get("status") != "Success" or answer["run_result"]["stdout"] != "olleh\n":
        raise RuntimeError(f"benchmark call failed over HTTP: {answer}")
    return time.perf_counter() - started


def service_owner(url: str) -> str:
    """The owner label of the service's containers (its /health)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/health")
        return json.loads(connection.getresponse().read())["owner"]
    finally:
        connection.close()


def running_containers(owner: str) -> int:
    """Containers of ``owner`` that run (the service's warm pool once it is idle)."""
    listed = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=gym.owner={owner}", "--filter", "status=running"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(listed.stdout.split())


async def _concurrently(call, n: int, concurrency: int) -> tuple[list[float], float]:
    """``n`` calls of ``call()`` with ``concurrency`` in flight: each one's seconds, and the wall time of all."""
    samples: list[float] = []
    limiter = trio.CapacityLimiter(concurrency)

    async def one() -> None:
        async with limiter:
            samples.append(await call())

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    return samples, time.perf_counter() - started


async def measure(args: argparse.Namespace, config: SandboxServeConfig, url: str) -> dict[str, float]:
    checked = plan(RunCodeRequest.model_validate(REQUEST), config.run_code, config.sandbox.budgets.memory_mb)

    async def direct() -> float:
        started = time.perf_counter()
        answer = await run_code(pool, checked, config.run_code, owner="bench")
        if answer.status != "Success" or answer.run_result.stdout != "olleh\n":
            raise RuntimeError(f"benchmark call failed on the pool: {answer}")
        return time.perf_counter() - started

    async def over_http() -> float:
        return await trio.to_thread.run_sync(http_call, url)

    async def settled() -> None:
        """Both warm pools full again: the refills one side's calls left do not run into the other's figure."""
        await pool.wait_ready(timeout=120)
        deadline = trio.current_time() + 120
        while await trio.to_thread.run_sync(running_containers, owner) < config.sandbox.pool.size:
            if trio.current_time() > deadline:
                raise RuntimeError("the service's warm pool did not refill within 120 s")
            await trio.sleep(0.1)

    owner = await trio.to_thread.run_sync(service_owner, url)
    async with open_pool(config.sandbox, gc_at_start=False) as pool:
        await _concurrently(direct, 4, 1)  # warm-up: connections, caches, the first refills
        await _concurrently(over_http, 4, 1)
        per_block = max(1, args.calls // args.blocks)
        latency: dict[str, list[float]] = {"direct": [], "http": []}
        walls: dict[str, float] = {"direct": 0.0, "http": 0.0}
        for block in range(args.blocks):
            log.info("block %d/%d", block + 1, args.blocks)
            sides = [("direct", direct), ("http", over_http)][:: 1 if block % 2 == 0 else -1]  # ABBA
            for side, call in sides:
                await settled()
                latency[side] += (await _concurrently(call, per_block, 1))[0]
            for side, call in sides:
                await settled()
                walls[side] += (await _concurrently(call, per_block, args.concurrency))[1]
    done = per_block * args.blocks
    direct_p50, http_p50 = (statistics.median(latency[s]) * 1000 for s in ("direct", "http"))
    direct_rate, http_rate = done / walls["direct"], done / walls["http"]
    return {
        "direct_p50_ms": direct_p50,
        "http_p50_ms": http_p50,
        "http_overhead_p50_ms": http_p50 - direct_p50,
        "http_over_direct_p50_ratio": http_p50 / direct_p50,
        "direct_calls_per_s": direct_rate,
        "http_calls_per_s": http_rate,
        "http_over_direct_calls_per_s_ratio": http_rate / direct_rate,
        "calls": done,
        "concurrency": args.concurrency,
    }


def run(args: argparse.Namespace) -> dict[str, float]:
    config = SandboxServeConfig.model_validate(
        {
            "server": {"max_running": args.concurrency, "max_requests": max(64, 2 * args.concurrency)},
            "sandbox": {"pool": {"size": args.concurrency}, "episode": {"max_calls": 64}},
        }
    )
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-serve-") as directory:
        proc, url = start_service(config, Path(directory))
        try:
            return trio.run(measure, args, config, url)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
