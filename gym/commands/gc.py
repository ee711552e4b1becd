"""`python -m gym gc`: remove gym containers whose owner process is gone or whose deadline passed."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    parser.add_argument("--all", action="store_true", help="remove every gym container, live owners included")


def run(args: argparse.Namespace) -> int:
    import trio

    from sandbox.config import SandboxConfig
    from sandbox.docker_engine import Engine
    from sandbox.gc import collect

    async def main() -> int:
        engine = Engine(SandboxConfig())
        try:  # an engine that does not answer is the CLI's one-line error (exit 3)
            removed = await collect(engine, everything=args.all, dry_run=args.dry_run)
        finally:
            engine.close()
        verb = "would remove" if args.dry_run else "removed"
        for item in removed:
            print(f"{verb} {item.name} ({item.container_id[:12]}): {item.reason}")
        print(f"{verb} {len(removed)} containers")
        return 0

    return trio.run(main)
