"""`python -m gym bench math` end to end: both modes' figures and their ratio are written, every shipped reference
answer passed and every gold plus one failed in both (the bench refuses its figures otherwise: the second test).

No figure is compared with a threshold here: the ratio is the bench's output, measured side by side in one run
(docs/benchmarks.md), not a timed unit test.
"""

from __future__ import annotations

import argparse
import json

import pytest

import tasks.math.bench as math_bench
from tests.cli_support import gym

pytestmark = pytest.mark.slow

KEYS = {
    "checks_per_s_forked",
    "checks_per_s_fresh",
    "forked_vs_fresh",
    "check_p50_ms_forked",
    "check_p50_ms_fresh",
    "checks",
    "concurrency",
}


def test_bench_math_writes_both_modes_and_their_ratio(tmp_path):
    out = tmp_path / "math.json"
    done = gym("bench", "math", "--rounds", "1", "--answers", "12", "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == KEYS
    assert figures["checks"] == 12 and figures["concurrency"] == 2  # 6 samples, right and wrong, one round
    assert all(figures[key] > 0 for key in KEYS)
    assert "forked_vs_fresh" in done.stdout


def test_an_unexpected_verdict_refuses_the_figures(monkeypatch):
    """Control: a wrong answer expected to pass (the check says it fails) stops the bench, naming it."""
    right = math_bench.answers()[:2]
    task, answer, _ = right[1]  # the gold plus one, which fails
    monkeypatch.setattr(math_bench, "answers", lambda: [right[0], (task, answer, True)])
    with pytest.raises(RuntimeError, match="unexpected verdicts"):
        math_bench.run(argparse.Namespace(rounds=1, concurrency=2, answers=None))
