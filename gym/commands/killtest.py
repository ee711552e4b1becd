"""`python -m gym killtest`: run the attack catalog against a sandbox config; exit 0 only when all is contained.

Prints one row per attack (attack, group, expected, observed, verdict,
evidence), the posture verdict and the totals on stdout; ``--json FILE``
writes the same content (``attacks``, ``posture``, ``checks``, ``summary``).
Exit codes: 0 every attack contained and the posture as expected, 1 an
escape, an error or posture drift, 2 a usage error (an unknown attack, a bad
config), 3 the Docker engine does not answer, 4 the image is missing (docs/cli.md).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument("--config", type=Path, help="sandbox config YAML (default: the built-in hardened defaults)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these attacks or groups")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the full report as JSON")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    parser.add_argument("--concurrency", type=int, default=3, help="attacks run at once (bombs always run alone)")
    parser.add_argument("--posture", type=Path, help="expected posture file (default: sandbox/killtest/posture.json)")
    parser.add_argument("--no-posture", action="store_true", help="skip the posture snapshot")
    parser.add_argument("--record-posture", type=Path, metavar="FILE", help="write the observed posture to FILE")


def run(args: argparse.Namespace) -> int:
    from sandbox.killtest.catalog import select

    attacks = select(args.only)
    if args.list:
        for attack in attacks:
            print(f"{attack.name:<22} {attack.group:<12} {attack.expected:<34} {attack.goal}")
        print(f"{len(attacks)} attacks")
        return 0

    import trio

    from sandbox.config import SandboxConfig
    from sandbox.killtest.posture import EXPECTED_PATH
    from sandbox.killtest.report import table
    from sandbox.killtest.suite import SuiteOptions, run_suite

    config = SandboxConfig.from_yaml(args.config) if args.config else SandboxConfig()
    options = SuiteOptions(
        concurrency=args.concurrency,
        expected_posture=None if args.no_posture else (args.posture or EXPECTED_PATH),
        record_posture=args.record_posture,
    )
    report = trio.run(run_suite, config, attacks, options)
    print(table(report))
    if args.json:
        report.write_json(args.json)
        log.info("report written to %s", args.json)
    return 0 if report.ok else 1
