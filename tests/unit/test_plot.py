"""`python -m gym plot` and the curves every training run draws (gym/plot.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym.plot import PlotError, curves, read_metrics

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def run_dir(tmp_path: Path, steps: int = 6, with_eval: bool = True) -> Path:
    rows = [{"kind": "warm_start", "step": 0, "warm_start/loss_first": 9.0}]
    for step in range(1, steps + 1):
        rows.append(
            {
                "kind": "train",
                "step": step,
                "reward/mean": 0.1 * step,
                "reward/kept_mean": 0.1 * step,
                "reward/correct_share": 0.05 * step,
                "reward/pass_rate": 0.04 * step,
                "entropy": 1.0 / step,
                "mismatch/kl_k3": 1e-4,
                "mismatch/abs_diff_mean": 2e-3,
                "time/wait_rollout": 3.0,
                "time/train": 1.0,
                "time/sync": 0.1,
            }
        )
    if with_eval:
        rows += [
            {"kind": "eval", "step": 0, "pass@1": 0.1, "pass@4": 0.3},
            {"kind": "eval", "step": steps, "pass@1": 0.4, "pass@4": 0.6},
        ]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    return folder


def test_curves_are_a_png_with_every_series(tmp_path):
    folder = run_dir(tmp_path)
    train, evals = read_metrics(folder)
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6] and len(evals) == 2  # the bad line is skipped
    path = curves(folder)
    assert path == folder / "curves.png" and path.read_bytes()[:8] == PNG and path.stat().st_size > 20_000


def test_a_run_without_eval_or_steps(tmp_path):
    assert curves(run_dir(tmp_path, with_eval=False), tmp_path / "x" / "c.png").read_bytes()[:8] == PNG
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text(json.dumps({"kind": "warm_start", "step": 0}) + "\n")
    with pytest.raises(PlotError, match="no GRPO step"):
        curves(empty)
    with pytest.raises(PlotError, match="no such file"):
        curves(tmp_path / "missing")


def test_the_cli_writes_the_png_or_exits_5_with_one_line(tmp_path):
    folder = run_dir(tmp_path)
    out = tmp_path / "out.png"
    done = subprocess.run(
        [sys.executable, "-m", "gym", "plot", str(folder), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == str(out) and out.read_bytes()[:8] == PNG
    missing = subprocess.run(
        [sys.executable, "-m", "gym", "plot", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 5 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith(f"gym: error: {tmp_path / 'nope'}") and missing.stderr.count("\n") == 1
