"""`python -m gym plot RUN_DIR [--out FILE]`: a training run's curves as one PNG (`gym.plot`).

Reward, pass rate, held-out pass@k, entropy, KL/mismatch and the time split per GRPO step, read from
``RUN_DIR/metrics.jsonl``; written to ``RUN_DIR/curves.png`` unless ``--out`` names another file.
Exit 5 with one line when the directory holds no logged step (docs/cli.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    parser.add_argument("run_dir", type=Path, help="a training run directory (holds metrics.jsonl)")
    parser.add_argument("--out", type=Path, default=None, help="PNG to write (default RUN_DIR/curves.png)")


def run(args: argparse.Namespace) -> int:
    from gym.plot import curves

    print(curves(args.run_dir, args.out))
    return 0
