"""`python -m gym bench sandbox`: tool-call round trip and workspace acquire, measured side by side.

Figures (all in one run, on this machine):
- runner_p50_ms / runner_p95_ms: a trivial command (`true`) through the persistent in-container runner;
- docker_exec_p50_ms: the same command through `docker exec` (exec create + start + inspect);
- host_p50_ms: the same command as a bare host subprocess (the no-sandbox floor);
- warm_acquire_p50_ms: acquiring a workspace from the warm pool; cold_acquire_p50_ms: with no pool
  (create + start + runner hello);
- idle_workspace_mb: memory of an idle workspace container (runner + init), as `docker stats` counts it.

With ``--engine URL`` (repeatable), the runner round trip on each further engine beside the default one
(``DOCKER_HOST``, else the unix socket), in interleaved blocks so that a load change hits both alike:
base_engine / base_runner_p50_ms / base_runner_p90_ms, then per engine N: engineN (its URL and transport),
engineN_runner_p50_ms, engineN_runner_p90_ms, engineN_p50_ratio (its p50 over the base p50). A tcp://
engine's TLS comes from the environment as for the docker CLI (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import time
from contextlib import AsyncExitStack

import trio
from pydantic import ValidationError

from sandbox.config import SandboxConfig
from sandbox.engine_url import EngineTarget, resolve_engine
from sandbox.errors import SandboxConfigError
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=300, help="round trips measured through the runner and the host")
    parser.add_argument("--exec-calls", type=int, default=40, help="round trips measured through docker exec")
    parser.add_argument("--acquires", type=int, default=20, help="warm acquires measured")
    parser.add_argument("--cold", type=int, default=5, help="cold acquires measured")
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="URL",
        help="also measure the runner round trip on this engine (unix:///PATH or tcp://HOST:PORT; TLS from "
        "DOCKER_TLS_VERIFY/DOCKER_CERT_PATH as for the docker CLI), next to the default engine; repeatable",
    )
    parser.add_argument(
        "--engine-blocks",
        type=int,
        default=10,
        metavar="N",
        help="interleaved blocks the --engine comparison splits --calls into",
    )


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def host_roundtrips(n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(["true"], check=True)
        samples.append(time.perf_counter() - started)
    return samples


async def runner_roundtrips(ws, n: int) -> list[float]:
    request = ExecRequest(argv=["true"])
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        result = await ws.exec(request)
        samples.append(time.perf_counter() - started)
        if result.exit_code != 0:
            raise RuntimeError(f"benchmark command failed: {result}")
    return samples


def docker_exec_roundtrips(api, container_id: str, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        exec_id = api.exec_create(container_id, ["true"], user="1000:1000", workdir="/workspace")["Id"]
        api.exec_start(exec_id)
        code = api.exec_inspect(exec_id)["ExitCode"]
        samples.append(time.perf_counter() - started)
        if code != 0:
            raise RuntimeError(f"docker exec of `true` exited {code}")
    return samples


def idle_memory_mb(api, container_id: str) -> float:
    stats = api.stats(container_id, stream=False)["memory_stats"]
    inner = stats.get("stats", {})
    cache = inner.get("total_inactive_file", inner.get("inactive_file", inner.get("cache", 0)))
    return (stats["usage"] - cache) / 2**20


async def measure(args: argparse.Namespace) -> dict[str, float]:
    # One workspace takes every measured call, so the episode's call budget is lifted.
    base = SandboxConfig.model_validate({"episode": {"max_calls": 1_000_000}})
    warm_config = base.model_copy(update={"pool": base.pool.model_copy(update={"size": 4})})
    figures: dict[str, float] = {}
    async with WorkspacePool(warm_config) as pool:
        await pool.wait_ready()
        async with pool.acquire("bench") as ws:
            await runner_roundtrips(ws, 10)  # warm-up
            log.info("measuring %d runner round trips", args.calls)
            runner = await runner_roundtrips(ws, args.calls)
            api = pool.engine.client.api
            log.info("measuring %d docker exec round trips", args.exec_calls)
            docker_exec = await trio.to_thread.run_sync(docker_exec_roundtrips, api, ws.id, args.exec_calls)
            await trio.sleep(1.0)
            idle = await trio.to_thread.run_sync(idle_memory_mb, api, ws.id)
        log.info("measuring %d warm acquires", args.acquires)
        warm = []
        for _ in range(args.acquires):
            await pool.wait_ready()
            started = time.perf_counter()
            async with pool.acquire("bench-warm"):
                warm.append(time.perf_counter() - started)
    host = host_roundtrips(args.calls)
    cold_config = base.model_copy(update={"pool": base.pool.model_copy(update={"size": 0})})
    log.info("measuring %d cold acquires", args.cold)
    cold = []
    async with WorkspacePool(cold_config, gc_at_start=False) as pool:
        for _ in range(args.cold):
            started = time.perf_counter()
            async with pool.acquire("bench-cold"):
                cold.append(time.perf_counter() - started)
    figures.update(
        runner_p50_ms=_ms(runner),
        runner_p95_ms=percentile(runner, 0.95) * 1000,
        docker_exec_p50_ms=_ms(docker_exec),
        host_p50_ms=_ms(host),
        runner_speedup_vs_docker_exec=_ms(docker_exec) / _ms(runner),
        warm_acquire_p50_ms=_ms(warm),
        cold_acquire_p50_ms=_ms(cold),
        idle_workspace_mb=idle,
    )
    return figures


def transport(target: EngineTarget) -> str:
    """An engine as the figures name it: URL, and over tcp:// whether and how TLS is spoken."""
    if target.tls is None:
        return f"{target.url} (plaintext)" if target.scheme == "tcp" else target.url
    return f"{target.url} (TLS, {'verified' if target.tls.verify else 'not verified'}, {target.tls.source})"


def engine_configs(urls: list[str]) -> list[SandboxConfig]:
    """The default engine's config, then one per URL; each refused here, before any measurement, if unusable."""
    data = {"episode": {"max_calls": 1_000_000}, "pool": {"size": 0}}
    configs = [SandboxConfig.model_validate(data)]
    for url in urls:
        try:
            config = SandboxConfig.model_validate({**data, "engine": {"base_url": url}})
            resolve_engine(config.engine)  # plaintext tcp:// to a remote host, TLS files missing
        except ValidationError as exc:
            raise SandboxConfigError(f"--engine {url}: " + "; ".join(e["msg"] for e in exc.errors())) from None
        except SandboxConfigError as exc:
            raise SandboxConfigError(f"--engine {url}: {exc}") from None
        configs.append(config)
    return configs


async def compare_engines(configs: list[SandboxConfig], calls: int, blocks: int) -> dict[str, float | str]:
    """The runner round trip of one workspace per engine, measured in interleaved blocks."""
    samples: list[list[float]] = [[] for _ in configs]
    async with AsyncExitStack() as stack:
        pools = [await stack.enter_async_context(WorkspacePool(c, gc_at_start=False)) for c in configs]
        workspaces = [await stack.enter_async_context(pool.acquire("bench-engines")) for pool in pools]
        for ws in workspaces:
            await runner_roundtrips(ws, 10)  # warm-up: connections, caches
        per_block = max(1, calls // blocks)
        for block in range(blocks):
            log.info("engine comparison: block %d/%d", block + 1, blocks)
            for ws, kept in zip(workspaces, samples, strict=True):
                kept += await runner_roundtrips(ws, per_block)
        targets = [pool.engine.target for pool in pools]
    figures: dict[str, float | str] = {
        "base_engine": transport(targets[0]),
        "base_runner_p50_ms": _ms(samples[0]),
        "base_runner_p90_ms": percentile(samples[0], 0.90) * 1000,
    }
    for n, (target, kept) in enumerate(zip(targets[1:], samples[1:], strict=True), start=1):
        figures[f"engine{n}"] = transport(target)
        figures[f"engine{n}_runner_p50_ms"] = _ms(kept)
        figures[f"engine{n}_runner_p90_ms"] = percentile(kept, 0.90) * 1000
        figures[f"engine{n}_p50_ratio"] = _ms(kept) / _ms(samples[0])
    return figures


def run(args: argparse.Namespace) -> dict[str, float | str]:
    configs = engine_configs(args.engine) if args.engine else []
    figures: dict[str, float | str] = dict(trio.run(measure, args))
    if configs:
        figures.update(trio.run(compare_engines, configs, args.calls, args.engine_blocks))
    return figures
