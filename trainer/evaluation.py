"""Held-out evaluation: pass@1 and pass@k with the unbiased estimator.

For each held-out task, n samples are drawn and graded; a sample passes when its correctness
term is 1 (every hidden test passed). pass@k = mean over tasks of 1 - C(n - c, k) / C(n, k)
(Chen et al. 2021), c = passing samples. Masked samples (infrastructure errors) are left out of n
(a task with fewer than k graded samples is skipped and counted). Each task's own counts (``per_task``) go to
the run's ``evals.jsonl``, for comparisons paired by task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from trainer.sample import Group


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i = n-c+1}^{n} (1 - k / i): the binomial ratio without huge factorials
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def passed(reward_breakdown: dict[str, float], correctness_weight: float = 1.0) -> bool:
    """A sample passes when its correctness contribution reaches the term's weight (all tests passed)."""
    value = reward_breakdown.get("correctness", 0.0)
    return correctness_weight > 0 and value >= correctness_weight - 1e-9


def graded_counts(group: Group, correctness_weight: float = 1.0) -> tuple[int, int]:
    """(passing samples, graded samples) of one group; masked samples are left out."""
    graded = [s for s in group.samples if not s.masked]
    return sum(passed(s.trajectory.reward_breakdown, correctness_weight) for s in graded), len(graded)


def per_task(groups: Iterable[Group], correctness_weight: float = 1.0) -> dict[str, tuple[int, int]]:
    """Task id -> (passing samples, graded samples): what a paired comparison of two evaluations with the same
    tasks and seeds reads (masked samples are left out, as in pass@k)."""
    counts: dict[str, tuple[int, int]] = {}
    for group in groups:
        c, n = graded_counts(group, correctness_weight)
        before_c, before_n = counts.get(group.task_id, (0, 0))
        counts[group.task_id] = (before_c + c, before_n + n)
    return counts


def evaluate(groups: Iterable[Group], ks: Sequence[int], correctness_weight: float = 1.0) -> dict[str, float]:
    """pass@k for each k over held-out groups (one group = the n samples of one task)."""
    per_k: dict[int, list[float]] = {k: [] for k in ks}
    rewards: list[float] = []
    skipped = masked = tasks = 0
    for group in groups:
        tasks += 1
        c, n = graded_counts(group, correctness_weight)
        masked += len(group.samples) - n
        rewards.extend(s.reward for s in group.samples if not s.masked)
        for k in ks:
            if n < k:
                skipped += 1
                continue
            per_k[k].append(pass_at_k(n, c, k))
    figures = {f"pass@{k}": (sum(v) / len(v) if v else 0.0) for k, v in per_k.items()}
    figures.update(
        {
            "tasks": float(tasks),
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "masked": float(masked),
            "skipped": float(skipped),
        }
    )
    return figures
