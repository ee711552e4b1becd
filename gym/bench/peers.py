"""`python -m gym bench peers`: the same workloads through the gym and through the tools people pick instead.

One run, one tool at a time, on this machine: the gym's workspace pool (a hardened workspace, the
in-container runner), SWE-ReX (its Docker deployment, a ``bash`` session), llm-sandbox (its Docker
backend), ``docker exec`` (the docker CLI, as a user types it: ``docker exec -i`` for stdin; `bench
sandbox`'s ``docker_exec_p50_ms`` goes through the engine's API instead, without the CLI's start-up)
and a bare host subprocess. The workloads are `gym.bench.peer_workloads`' (``tiny``, ``stdio_1mib``,
``file_rw``, ``session_50``); every output is checked, so a tool that answers wrongly fails its
workload instead of being timed. SWE-ReX and llm-sandbox run in venvs of their own (`gym.bench.peer_env`)
through driver scripts, on the gym's runner image (SWE-ReX's with its server added). Containers: each
tool starts its own, labelled ``gym.bench.peers=<run>``, and removes it; the run ends by removing any
container with its label still there 5 s later (``leaked_containers`` counts them) and touches no other
(the gym's workspaces are its pool's, labelled with their owner session and removed by it).

Set-up (``setup_ms``): from nothing to the first ``tiny`` command's answer: the gym opens a pool
without warming (``pool.size`` 0) and acquires a workspace (container create + start + runner hello);
SWE-ReX starts its deployment and opens its session; llm-sandbox opens its session; docker-exec runs
``docker run -d``; the host has none. The workloads are then timed on that sandbox (the steady state),
after ``--warmup`` untimed rounds.

``--json FILE`` keys: ``p50_ms`` {workload: {tool: ms}}, ``p95_ms`` (same shape), ``setup_ms`` {tool:
ms}, ``ratio_vs_gym`` {workload: {tool: its p50 over the gym's}}, ``errors`` {tool: {workload or
"setup": the exact error}} (a tool that could not run is there, never left out), ``versions`` {tool:
version}, ``iterations``, ``sessions``, ``leaked_containers``. A tool is either measured in a workload
or has an error for it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from gym.bench import peer_workloads as w

TOOLS = ("gym", "swe-rex", "llm-sandbox", "docker-exec", "host")
LABEL = "gym.bench.peers"
HERE = Path(__file__).resolve().parent
DRIVER_TIMEOUT_S = 900


def count(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"an integer of at least {minimum}, got {text!r}")
        return value

    return parse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--iterations", type=count(1), default=30, help="timed calls of tiny, stdio_1mib, file_rw (default 30)"
    )
    parser.add_argument("--sessions", type=count(1), default=5, help="timed 50-turn sessions (default 5)")
    parser.add_argument("--warmup", type=count(0), default=2, help="untimed rounds of each workload first (default 2)")
    parser.add_argument(
        "--tools",
        default=",".join(TOOLS),
        help=f"comma-separated tools to measure, of {', '.join(TOOLS)} (default all)",
    )


def run(args: argparse.Namespace) -> dict:
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown or not tools:
        from gym.fault import CommandError, ExitCode

        raise CommandError(
            f"--tools {args.tools}: unknown {', '.join(unknown) or 'none given'}",
            f"name some of {', '.join(TOOLS)}",
            ExitCode.USAGE,
        )
    from images.inputs import runner_image

    spec = {
        "iterations": args.iterations,
        "sessions": args.sessions,
        "warmup": args.warmup,
        "image": runner_image(),
        "label_key": LABEL,
        "label_value": f"{os.getpid()}-{uuid.uuid4().hex[:8]}",
    }
    spec["label"] = f"{LABEL}={spec['label_value']}"
    reports: dict[str, dict] = {}
    try:
        for tool in tools:
            reports[tool] = MEASURE[tool](spec)
    finally:
        leaked = remove_labelled(spec["label"])
    return figures(reports, args, leaked)


def failed(error: BaseException) -> dict:
    return {"samples_ms": {}, "errors": {"setup": f"{type(error).__name__}: {error}"}}


def measure_gym(spec: dict) -> dict:
    import trio

    from sandbox.config import SandboxConfig
    from sandbox.failure import FailureKind
    from sandbox.pool import WorkspacePool
    from sandbox.protocol import ExecRequest

    # One workspace takes every call of the run: the episode's call and wall budgets are lifted; no warm pool,
    # so the set-up is a cold acquire as the other tools' are.
    config = SandboxConfig.model_validate(
        {"episode": {"max_calls": 1_000_000, "wall_s": 86_400}, "pool": {"size": 0}, "image": spec["image"]}
    )
    stdio, text = w.payload(w.STDIO_BYTES), w.payload(w.FILE_BYTES, seed=1)

    async def main() -> dict:
        started = time.perf_counter()
        async with WorkspacePool(config, gc_at_start=False) as pool, pool.acquire("bench-peers") as ws:

            async def run(request: ExecRequest) -> bytes:
                result = await ws.exec(request)
                if result.exit_code != 0 or result.truncated:
                    raise RuntimeError(f"{request.argv} failed: {result.failure} {result.detail}")
                return result.stdout

            async def tiny() -> None:
                await run(ExecRequest(argv=["true"]))

            async def stdio_1mib() -> None:
                out = await run(ExecRequest(argv=["cat"], stdin=stdio.encode(), output_limit_bytes=2 * w.STDIO_BYTES))
                w.check_output("stdio_1mib", out, stdio)

            async def file_rw() -> None:
                written = await ws.write_file("file_rw", text.encode())
                if written.failure != FailureKind.OK:
                    raise RuntimeError(f"write_file: {written.failure} {written.detail}")
                w.check_output("file_rw", (await ws.read_file("file_rw")).data, text)

            sessions = itertools.count()

            async def session_50() -> None:
                k = next(sessions)
                for turn in range(w.TURNS):
                    out = await run(ExecRequest(argv=["sh", "-c", w.turn_command(k, turn)]))  # as the host's
                    w.check_output("session_50", out, str(turn + 1))

            await tiny()
            setup = (time.perf_counter() - started) * 1000
            calls = {"tiny": tiny, "stdio_1mib": stdio_1mib, "file_rw": file_rw, "session_50": session_50}
            return {"setup_ms": setup, "version": _revision(), **await w.run_workloads_async(calls, spec)}

    try:
        return trio.run(main)
    except Exception as exc:  # the gym's own failure is reported like a peer's
        return failed(exc)


def _revision() -> str:
    """The checkout's commit (short), or "unknown" outside a git checkout."""
    done = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _sh(argv: list[str], stdin: str = "", cwd: Path | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def _workloads_sync(spec: dict, command, write, read) -> dict:
    """Time the workloads of a tool driven by synchronous calls: ``command(argv, stdin) -> stdout``,
    ``write(name, text)``, ``read(name) -> text``."""
    stdio, text = w.payload(w.STDIO_BYTES), w.payload(w.FILE_BYTES, seed=1)
    sessions = itertools.count()

    def session_50() -> None:
        k = next(sessions)
        for turn in range(w.TURNS):
            w.check_output("session_50", command(["sh", "-c", w.turn_command(k, turn)], ""), str(turn + 1))

    def file_rw() -> None:
        write("file_rw", text)
        w.check_output("file_rw", read("file_rw"), text)

    calls = {
        "tiny": lambda: command(["true"], ""),
        "stdio_1mib": lambda: w.check_output("stdio_1mib", command(["cat"], stdio), stdio),
        "file_rw": file_rw,
        "session_50": session_50,
    }
    return w.run_workloads(calls, spec)


def measure_docker_exec(spec: dict) -> dict:
    docker = shutil.which("docker")
    if docker is None:
        return failed(FileNotFoundError("no docker CLI on PATH"))
    name = f"gym-bench-peers-{spec['label_value']}"
    started = time.perf_counter()
    try:
        _sh([docker, "run", "-d", "--rm", "--init", "--pull", "never", "--network", "none", "--label", spec["label"], "--name", name,
             "-w", "/tmp", spec["image"], "sleep", "infinity"])  # fmt: skip
        _sh([docker, "exec", name, "true"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        remove_labelled(spec["label"], settle_s=0)
        return failed(exc)
    setup = (time.perf_counter() - started) * 1000

    def command(argv: list[str], stdin: str) -> str:
        return _sh([docker, "exec", *(["-i"] if stdin else []), name, *argv], stdin)

    try:
        report = _workloads_sync(
            spec,
            command,
            lambda path, text: command(["sh", "-c", f"cat > {path}"], text),
            lambda path: command(["cat", path], ""),
        )
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True, timeout=60, check=False)
    version = subprocess.run([docker, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
    return {**report, "setup_ms": setup, "version": version.stdout.strip()}


def measure_host(spec: dict) -> dict:
    """Bare host subprocesses in a temporary folder; the file round trip is the file system itself (the floor)."""
    with tempfile.TemporaryDirectory(prefix="gym-bench-peers-") as tmp:
        where = Path(tmp)
        report = _workloads_sync(
            spec,
            lambda argv, stdin: _sh(argv, stdin, cwd=where),
            lambda name, text: (where / name).write_text(text),
            lambda name: (where / name).read_text(),
        )
    return {**report, "setup_ms": 0.0}


def _driven(peer: str, driver: str, spec: dict, image: str) -> dict:
    """Run a peer's driver script with the python of its venv; its JSON report, or its failure as one."""
    from gym.bench.peer_env import peer_python
    from gym.bench.venv import VenvError

    try:
        python = peer_python(peer)
    except VenvError as exc:
        return failed(exc)
    try:
        done = subprocess.run(
            [str(python), str(HERE / driver), json.dumps({**spec, "image": image})],
            capture_output=True,
            text=True,
            timeout=DRIVER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return failed(exc)
    report = w.reported(done.stdout)
    if report is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]  # a traceback's last line: the exception
        return failed(RuntimeError(f"{driver} exited {done.returncode}: {last[-800:]}"))
    return report


def measure_swerex(spec: dict) -> dict:
    from gym.bench.peer_env import swerex_image

    try:
        image = swerex_image(spec["image"])
    except Exception as exc:  # the image SWE-ReX needs could not be built: that is the peer's error
        return failed(exc)
    return _driven("swe-rex", "peer_swerex.py", spec, image)


def measure_llm_sandbox(spec: dict) -> dict:
    return _driven("llm-sandbox", "peer_llm_sandbox.py", spec, spec["image"])


MEASURE = {
    "gym": measure_gym,
    "swe-rex": measure_swerex,
    "llm-sandbox": measure_llm_sandbox,
    "docker-exec": measure_docker_exec,
    "host": measure_host,
}


def remove_labelled(label: str, settle_s: float = 5.0) -> int:
    """Remove the containers labelled ``label`` (this run's only) that are still there ``settle_s`` after their tool
    was done with them (a ``--rm`` container is removed by the engine a moment after it stops); how many."""
    deadline = time.monotonic() + settle_s
    while True:
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={label}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        ids = listed.stdout.split()
        if not ids or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=120, check=False)
    return len(ids)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(reports: dict[str, dict], args: argparse.Namespace, leaked: int) -> dict:
    p50 = {name: {} for name in w.WORKLOADS}
    p95 = {name: {} for name in w.WORKLOADS}
    for tool, report in reports.items():
        for name, samples in report.get("samples_ms", {}).items():
            p50[name][tool] = round(w.p50(samples), 3)
            p95[name][tool] = round(_percentile(samples, 0.95), 3)
    ratio = {  # four significant figures: a host subprocess at 0.0225x the gym keeps its precision (3 decimals did not)
        name: {tool: float(f"{ms / row['gym']:.4g}") for tool, ms in row.items()}
        for name, row in p50.items()
        if row.get("gym")
    }
    return {
        "p50_ms": p50,
        "p95_ms": p95,
        "ratio_vs_gym": ratio,
        "setup_ms": {t: round(r["setup_ms"], 1) for t, r in reports.items() if r.get("setup_ms") is not None},
        "errors": {t: r["errors"] for t, r in reports.items() if r.get("errors")},
        "versions": {t: r["version"] for t, r in reports.items() if r.get("version")},
        "iterations": args.iterations,
        "sessions": args.sessions,
        "leaked_containers": leaked,
    }
