"""`python -m gym bench grader` end to end on four of the shipped bench tasks: every mode's figure and ratio is
written, every reference passes in every mode (the bench refuses its figures otherwise), and the default pool's
containers were reset and reused between the rounds' tasks (disjoint recycling) with no reset refused.

No figure is compared with a threshold here: ratios are the bench's output, measured side by side in one run
(docs/benchmarks.md), not a timed unit test.
"""

from __future__ import annotations

import json

import pytest

from tasks.catalog import SAMPLES_DIR
from tests.cli_support import gym

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEYS = {
    "tests_per_s_grader",
    "tests_per_s_grader_fresh",
    "tests_per_s_grader_new_containers",
    "tests_per_s_grader_recycled",
    "tests_per_s_bare",
    "tests_per_s_docker_run",
    "recycling_speedup",
    "fork_server_speedup",
    "grader_vs_bare",
    "grader_recycled_vs_bare",
    "grader_vs_docker_run",
}


def test_bench_grader_writes_every_mode_and_reuses_the_default_pools_containers(tmp_path):
    tasks = tmp_path / "bench.jsonl"
    tasks.write_text("".join((SAMPLES_DIR / "bench.jsonl").read_text().splitlines(keepends=True)[:4]))
    out = tmp_path / "grader.json"
    done = gym(
        "bench", "grader", "--tasks", str(tasks), "--concurrency", "2", "--docker-tests", "2", "--json", str(out),
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert KEYS <= set(figures) and all(figures[key] > 0 for key in KEYS)
    assert figures["tasks"] == 4 and figures["tests"] == 160 and figures["docker_run_tests"] == 2
    assert figures["recycled"] >= 2 and figures["resets_refused"] == 0  # round 2's tasks got round 1's containers
