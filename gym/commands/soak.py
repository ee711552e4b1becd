"""`python -m gym soak`: hammer real workspaces with a seeded mix of benign calls; exit 0 only if none failed.

Workers each hold one workspace of one warm pool, run a drawn number of calls
(exec with small and large stdin, programs that never read their stdin, syntax
errors, non-zero exits, short deadlines, output over the bound, batches, file
tools, copy-out) with idle gaps, then release it and take a fresh one
(``sandbox/soak.py``). Progress goes to the log (stderr) every 10 s; the
figures go to stdout and, with ``--json FILE``, to FILE (``calls``,
``infra_errors``, ``runner_deaths``, ``leaked_containers``, ``unexpected``,
``workspaces_used``, ``calls_per_s``, ``seconds``, ``by_kind``, examples of
each kind of trouble, the load average at start and end).
Exit codes: 0 clean, 1 an infra error, a runner death or a leaked container.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument(
        "--workspaces", type=int, default=8, help="workspaces hammered at once (also the warm pool size)"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="stop after this long ...")
    parser.add_argument("--calls", type=int, default=None, metavar="N", help="... or after N calls, whichever is first")
    parser.add_argument("--seed", type=int, default=0, help="seed of the call mix (per worker: seed and worker index)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the report as JSON")
    parser.add_argument(
        "--config", type=Path, default=None, help="sandbox config YAML (default: the built-in defaults)"
    )
    parser.add_argument("--image", default=None, help="workspace image (default: the config's)")


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run(args: argparse.Namespace) -> int:
    import trio

    from sandbox.config import SandboxConfig
    from sandbox.soak import SoakOptions, soak

    if args.workspaces < 1 or args.minutes <= 0 or (args.calls is not None and args.calls < 1):
        log.error("--workspaces and --calls must be >= 1 and --minutes > 0")
        return 2
    config = SandboxConfig.from_yaml(args.config) if args.config else SandboxConfig()
    if args.image:
        config = config.model_copy(update={"image": args.image})
    options = SoakOptions(workspaces=args.workspaces, seconds=args.minutes * 60, calls=args.calls, seed=args.seed)
    load_start = load_average()
    log.info(
        "soak: %d workspaces, %.1f min%s, seed %d, image %s, load average %s",
        args.workspaces,
        args.minutes,
        f" or {args.calls} calls" if args.calls else "",
        args.seed,
        config.image,
        load_start,
    )
    report = trio.run(soak, config, options)
    figures = {
        **report.as_json(),
        "workspaces": args.workspaces,
        "seed": args.seed,
        "image": config.image,
        "loadavg_start": load_start,
        "loadavg_end": load_average(),
    }
    for key in (
        "calls",
        "calls_per_s",
        "seconds",
        "workspaces_used",
        "infra_errors",
        "runner_deaths",
        "leaked_containers",
        "unexpected",
        "loadavg_start",
        "loadavg_end",
    ):
        print(f"{key:<18} {figures[key]}")
    for kind, outcomes in figures["by_kind"].items():
        print(f"  {kind:<22} " + ", ".join(f"{outcome} {count}" for outcome, count in outcomes.items()))
    for name in ("infra_examples", "death_examples", "unexpected_examples"):
        for example in figures[name]:
            print(f"{name[:-9]}: {json.dumps(example)[:400]}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if report.exit_code:
        log.error("soak failed: %s, %d leaked containers", report.summary(), report.leaked_containers)
    return report.exit_code
