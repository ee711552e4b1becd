"""`python -m gym envs list|show`: the environments one can name instead of a config file (gym/registry.py).

``list`` prints one row per registered environment: its name, the distribution that provides it
(``code-rl-gym`` for the shipped configs), where it comes from (the shipped file, or the entry point's
``module:attribute``) and what it is (the file's first comment line, or the entry point's docstring).
Listing imports and runs every installed entry point, so a broken one shows up here: its row says
why, and the command ends with that one-line error and exit 2 (as does a name registered twice).
``--json`` prints the rows as a JSON list instead. ``show NAME`` prints the resolved configuration of
one environment (a name or a config file) as JSON, the ``environment.json`` a rollout would write.
"""

from __future__ import annotations

import argparse
import json

from gym.cli import HELP_FORMATTER, epilog


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="list the shipped and installed environments (name, distribution, source, what it is)",
        epilog=epilog(("", "--json")),
        formatter_class=HELP_FORMATTER,
    )
    listing.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    show = actions.add_parser(
        "show",
        help="print an environment's resolved configuration as JSON",
        epilog=epilog(("cp_smoke", "example_strings", "configs/cp_smoke.yaml")),
        formatter_class=HELP_FORMATTER,
    )
    show.add_argument("environment", help="a registered name (envs list) or an environment config file")


def run(args: argparse.Namespace) -> int:
    from gym import registry

    if args.action == "show":
        config = registry.environment_config(args.environment)
        print(json.dumps(config.model_dump(mode="json"), indent=2))
        return 0
    everything = registry.registered()
    rows = [_row(entry, everything) for entry in everything]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows))
    problems = [row["problem"] for row in rows if row["problem"]]
    if problems:
        more = f" (and {len(problems) - 1} more above)" if len(problems) > 1 else ""
        raise registry.RegistryError(problems[0] + more)
    return 0


def _row(entry, everything) -> dict:
    from gym import registry

    why = registry.problem(entry, everything)
    description = ""
    if why is None:
        try:
            description = registry.describe(entry)
        except registry.RegistryError as exc:
            why = str(exc)
    return {
        "name": entry.name,
        "distribution": entry.distribution,
        "version": entry.version,
        "shipped": entry.shipped,
        "source": entry.source,
        "description": description,
        "problem": why,
    }


def _table(rows: list[dict]) -> str:
    header = ("NAME", "DISTRIBUTION", "SOURCE", "DESCRIPTION")
    cells = [
        (
            row["name"],
            f"{row['distribution']} {row['version']}".strip(),
            row["source"],
            f"ERROR: {row['problem']}" if row["problem"] else row["description"],
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths)) + "  " + line[3]
        for line in [header, *cells]
    )
