"""Training curves of a run directory as one PNG (matplotlib, no display needed).

``curves(run_dir, out)`` reads ``run_dir/metrics.jsonl`` (the trainer's rows: ``kind`` ``train``
per GRPO step, ``eval`` per held-out evaluation) and draws, per step, six panels:

* reward: mean reward of the step (and of the groups kept for the loss);
* pass rate: share of the step's episodes that passed every test (and that passed at least one);
* held-out pass@k: every ``pass@k`` of the eval rows (absent: "no eval");
* entropy of the sampled tokens;
* KL / mismatch: ``mismatch/kl_k3`` and the mean |logprob diff| between engine and trainer;
* time split: where each step's seconds went (waiting for rollouts, training, weight sync).

A panel whose series the run did not log says so instead of drawing nothing. ``python -m gym plot
RUN_DIR [--out FILE]`` writes ``RUN_DIR/curves.png`` by default; the trainer writes it at the end of
every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("reward", (("reward/mean", "mean"), ("reward/kept_mean", "kept groups"))),
    (
        "pass rate (training episodes)",
        (("reward/pass_rate", "every test passed"), ("reward/correct_share", "some test passed")),
    ),
    ("held-out pass@k", ()),  # filled from the eval rows
    ("entropy", (("entropy", "sampled tokens"),)),
    (
        "KL / mismatch",
        (("mismatch/kl_k3", "k3 KL engine vs trainer"), ("mismatch/abs_diff_mean", "mean |logprob diff|")),
    ),
    ("time split (s)", (("time/wait_rollout", "wait for rollouts"), ("time/train", "train"), ("time/sync", "sync"))),
)


class PlotError(ValueError):
    """The run directory holds nothing to plot; the message says what is missing."""


def read_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train rows, eval rows)`` of ``run_dir/metrics.jsonl``; a line that is not JSON is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{path}: no such file (is {run_dir} a training run directory?)")
    train, evals = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            (train if row.get("kind") == "train" else evals if row.get("kind") == "eval" else []).append(row)
    if not train:
        raise PlotError(f"{path}: no GRPO step logged yet")
    return train, evals


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def curves(run_dir: Path, out: Path | None = None) -> Path:
    """Draw the run's curves into ``out`` (default ``run_dir/curves.png``) and return its path."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    train, evals = read_metrics(run_dir)
    out = Path(out) if out is not None else Path(run_dir) / "curves.png"
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), constrained_layout=True)
    for ax, (title, series) in zip(axes.flat, PANELS):
        drawn = 0
        if title.startswith("held-out"):
            keys = sorted({k for r in evals for k in r if k.startswith("pass@")}, key=lambda k: int(k[5:]))
            series = tuple((k, k) for k in keys)
            source = evals
        else:
            source = train
        for key, label in series:
            steps, values = _series(source, key)
            if steps:
                ax.plot(steps, values, marker="o", markersize=3, label=label)
                drawn += 1
        ax.set_title(title)
        ax.set_xlabel("step")
        first = 0 if any(r.get("step") == 0 for r in evals) else 1
        ax.set_xlim(
            first - 0.5, max(r["step"] for r in train) + 0.5
        )  # every panel on the training steps (and step 0's eval)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"{Path(run_dir).resolve().name}: {len(train)} GRPO steps")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
