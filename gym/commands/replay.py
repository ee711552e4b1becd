"""`python -m gym replay BUNDLE...`: re-execute replay bundles and report every difference.

Each bundle's tool calls run again, in order, in a fresh workspace; its answer
is graded again in another fresh container; the bundle is also checked
against its own trajectory (see gym/replay.py). A self-play chain bundle
(``gym selfplay``) is re-checked offline instead: prompts, parsing, the math
check and the acceptance decision (gym/selfplay/chain_bundle.py). A folder argument
means every ``*.json`` bundle in it. Prints one line per bundle (and each difference);
exits 0 when every bundle replayed identically, 1 otherwise (5 for a file that
is not a bundle, docs/cli.md); a bundle whose fields were cut to its byte bound
is TRUNCATED, one whose differences follow from a timeout on one side only is
TIMING-DEPENDENT, one that cannot run here (its image missing) is NOT REPLAYED
with the reason while the others replay; none of them is identical (docs/gym.md).
``--json FILE`` writes the reports.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument("bundles", type=Path, nargs="+", help="bundle files, or folders of them")
    parser.add_argument("--concurrency", type=int, default=4, help="bundles replayed at once")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the reports as JSON")
    parser.add_argument(
        "--trust-bundle-sandbox",
        action="store_true",
        help="replay a bundle whose sandbox-side settings are weaker than the hardened defaults (network, "
        "seccomp, caps, budgets) as recorded; refused otherwise, since a tampered bundle could escape. Never "
        "covers host-side bounds or the engine: a replay always runs on this machine's engine (docs/gym.md)",
    )


def bundle_paths(arguments: list[Path]) -> list[Path]:
    paths: list[Path] = []
    for argument in arguments:
        paths += sorted(argument.glob("*.json")) if argument.is_dir() else [argument]
    return paths


def run(args: argparse.Namespace) -> int:
    from gym.fault import CommandError, ExitCode
    from gym.replay import replay_files
    from gym.selfplay.chain_bundle import is_chain_bundle, replay_chain_files

    paths = bundle_paths(args.bundles)
    if not paths:
        raise CommandError(
            f"no bundles in {', '.join(map(str, args.bundles))}",
            "pass bundle files, or a folder of them (RUN/bundles/)",
            ExitCode.INPUT,
        )
    # self-play chain bundles (gym/selfplay/chain_bundle.py) are re-checked offline; episode bundles re-execute
    chains = [path for path in paths if is_chain_bundle(path)]
    episodes = [path for path in paths if path not in chains]
    replayed = replay_files(episodes, concurrency=args.concurrency, trust_sandbox=args.trust_bundle_sandbox)
    by_path = dict(zip(episodes, replayed)) | dict(zip(chains, replay_chain_files(chains)))
    reports = [by_path[path] for path in paths]
    for report in reports:
        truncated = getattr(report, "truncated", ())  # chain reports have none
        timing, failed = getattr(report, "timing", ()), getattr(report, "failed", "")
        status = "identical" if report.identical else f"{len(report.differences)} DIFFERENCES"
        if truncated and not report.differences:
            status = f"TRUNCATED ({len(truncated)} fields cut when written, each matched by sha256; not identical)"
        if timing and not report.differences:
            status = f"TIMING-DEPENDENT ({len(timing)} outcomes depend on timing: a call or test timed out on one side)"
        if failed:
            status = f"NOT REPLAYED: {failed}"
        print(
            f"{report.bundle}: {report.task_id}: {report.tool_calls} tool calls, reward "
            f"{report.reward_recorded} -> {report.reward_replayed}: {status}"
        )
        for difference in report.differences:
            print(f"  {difference.what}: recorded {difference.recorded!r}, replayed {difference.replayed!r}")
        for difference in timing:
            print(f"  timing: {difference.what}: recorded {difference.recorded!r}, replayed {difference.replayed!r}")
        for field in truncated:
            print(f"  truncated: {field}")
        for note in report.notes:
            print(f"  note: {note}")
    same = sum(r.identical for r in reports)
    unreplayed = sum(bool(getattr(r, "failed", "")) for r in reports)
    timed = sum(bool(getattr(r, "timing", ())) and not r.differences and not getattr(r, "failed", "") for r in reports)
    extra = "".join(
        [
            f", {timed} differ only in timing-dependent outcomes" if timed else "",
            f", {unreplayed} not replayed" if unreplayed else "",
        ]
    )
    print(f"{same}/{len(reports)} bundles replayed identically{extra}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([json.loads(r.model_dump_json()) for r in reports], indent=2) + "\n")
    return 0 if same == len(reports) else 1
