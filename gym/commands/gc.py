"""`python -m gym gc`: remove gym containers whose owner process is gone or whose deadline passed.

Without ``--config``/``--engine`` the one engine of ``DOCKER_HOST`` (or the local socket). With them every
engine chosen (gym/engine_selection.py), all at once; each output line starts with its engine's URL. Of
several engines, one that does not answer is one ``gym: error:`` line on stderr naming it, the others are
still collected, and the exit code is 3; a single engine that does not answer is the CLI's one-line error
(exit 3), as before.
"""

from __future__ import annotations

import argparse
import sys

from gym.engine_selection import add_engine_options, chosen


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    parser.add_argument("--all", action="store_true", help="remove every gym container, live owners included")
    add_engine_options(parser)


def run(args: argparse.Namespace) -> int:
    import functools

    import trio

    from gym.engine_selection import engine_configs
    from gym.fault import ExitCode, one_line
    from sandbox.docker_engine import Engine
    from sandbox.gc import collect_engines

    engines = [Engine(config) for config in engine_configs(args.config, args.engine)]
    try:
        collected = trio.run(functools.partial(collect_engines, engines, everything=args.all, dry_run=args.dry_run))
    finally:
        for engine in engines:
            engine.close()
    if len(collected) == 1 and collected[0].error is not None:
        raise collected[0].error  # the CLI's one-line error, exit 3 (docs/cli.md)
    verb = "would remove" if args.dry_run else "removed"
    prefix = chosen(args)
    for result in collected:
        at = f"{result.url}: " if prefix else ""
        if result.error is not None:
            print(f"gym: error: {at}{one_line(result.error)}", file=sys.stderr)
            continue
        for item in result.removed:
            print(f"{at}{verb} {item.name} ({item.container_id[:12]}): {item.reason}")
        print(f"{at}{verb} {len(result.removed)} containers")
    failed = [result.url for result in collected if result.error is not None]
    if len(collected) > 1:
        total = sum(len(result.removed) for result in collected)
        gone = f"; {len(failed)} did not answer: {', '.join(failed)}" if failed else ""
        print(f"{verb} {total} containers on {len(collected) - len(failed)} of {len(collected)} engines{gone}")
    return ExitCode.INFRA if failed else ExitCode.OK
