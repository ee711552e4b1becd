"""`python -m gym bench TARGET`: benchmarks that print ratios measured side by side in one run.

Each target module exposes ``configure(parser)`` and ``run(args) -> dict``;
the figures are printed as a table on stdout and, with ``--json FILE``,
written as JSON with the keys the target documents.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from gym.cli import HELP_FORMATTER, epilog

# target -> (dotted module path, one-line help, example lines: the arguments after `python -m gym bench TARGET`)
BENCHES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sandbox": (
        "sandbox.bench",
        "tool-call round trip (runner vs docker exec vs host) and workspace acquire",
        ("", "--calls 100 --acquires 5 --json sandbox.json", "--calls 200 --engine tcp://127.0.0.1:2376"),
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
    "timing": (
        "tasks.timing_bench",
        "time limits idle vs beside busy containers, CPU vs wall model: accepted, wrong and "
        "too-slow jury submissions of a generated contest set, and the CPU/wall ratio of tests",
        ("", "--problems 8 --load 2 --seed 1 --json timing.json"),
    ),
    "rollout": (
        "gym.bench",
        "episodes/s of scripted:reference rollouts and the share of time in policy, tools, grading",
        ("", "--episodes 8 --config configs/cp_smoke.yaml --json rollout.json"),
    ),
    "swe": (
        "gym.swe_bench",
        "SWE episodes/min of scripted:reference on the shipped instances, workspace-ready and grading p50",
        ("", "--episodes 3 --prepares 2 --json swe.json"),
    ),
    "generate": (
        "policies.bench",
        "tiny policy generation tokens/s: KV cache vs full recompute",
        ("", "--batch 4 --new-tokens 64 --json generate.json"),
    ),
    "trainer": (
        "trainer.bench",
        "GRPO step tokens/s of this trainer vs TRL's GRPOTrainer (same tiny policy, prompts, reward)",
        ("", "--steps 2 --skip-trl", "--steps 3 --device cuda --dtype bfloat16 --json trainer.json"),
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
        target.set_defaults(_bench_module=module_path)
        if name == chosen:  # only the chosen target's module is imported (torch stays unloaded otherwise)
            importlib.import_module(module_path).configure(target)


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(args._bench_module)
    figures: dict = module.run(args)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {_format(value)}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0
