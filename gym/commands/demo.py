"""`python -m gym demo`: a short sandbox tour: warm workspaces, tool calls, budgets, release.

Acquires workspaces from the warm pool concurrently, runs a scripted set of tool
calls in each (write a program, run it, hit a deadline, get refused by the
allowlist), prints one line per call and checks nothing is left behind.
"""

from __future__ import annotations

import argparse
import logging
import time

log = logging.getLogger(__name__)

PROGRAM = b"import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums))\n"


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument("--workspaces", type=int, default=4, help="workspaces run concurrently")


def run(args: argparse.Namespace) -> int:
    import trio

    from sandbox.config import SandboxConfig
    from sandbox.pool import WorkspacePool
    from sandbox.protocol import ExecRequest

    rows: list[tuple[int, int, str, str, float]] = []

    async def episode(pool: WorkspacePool, index: int) -> None:
        async with pool.acquire(f"demo-{index}") as ws:
            steps = [
                ("write_file sum.py", ws.write_file("sum.py", PROGRAM)),
                ("python3 sum.py", ws.exec(ExecRequest(argv=["python3", "sum.py"], stdin=f"{index} 2 3".encode()))),
                ("sleep past deadline", ws.exec(ExecRequest(argv=["sleep", "30"], timeout_s=0.5))),
                ("read /etc/shadow", ws.read_file("/etc/shadow")),
            ]
            for step, (name, call) in enumerate(steps):
                started = time.perf_counter()
                result = await call
                out = getattr(result, "stdout_text", "").strip()
                rows.append(
                    (
                        index,
                        step,
                        name,
                        result.failure.value + (f" -> {out}" if out else ""),
                        time.perf_counter() - started,
                    )
                )

    async def main() -> int:
        config = SandboxConfig()
        config = config.model_copy(update={"pool": config.pool.model_copy(update={"size": args.workspaces})})
        async with WorkspacePool(config) as pool:
            log.info("warming %d workspaces", args.workspaces)
            await pool.wait_ready()
            async with trio.open_nursery() as nursery:
                for index in range(args.workspaces):
                    nursery.start_soon(episode, pool, index)
            live_before_close = len(pool.live)
        for index, _, name, outcome, seconds in sorted(rows):
            print(f"ws{index}  {name:<22} {outcome:<28} {seconds * 1000:7.1f} ms")
        print(
            f"{args.workspaces} workspaces, {len(rows)} tool calls; containers left after release: "
            f"{len(pool.live)} (were {live_before_close} live incl. warm spares before close)"
        )
        return 0 if not pool.live else 1

    return trio.run(main)
