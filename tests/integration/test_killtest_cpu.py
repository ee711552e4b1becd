"""The CPU hog's verdict holds with both cores busy from outside: contained when capped, caught when not.

The test starts its own busy loops beside the suite (twice as many as there
are cores, stopped at the end) and runs only the hog; its containers are the
suite's own, labelled with this session as owner.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.killtest.catalog import select
from sandbox.killtest.judge import Verdict
from sandbox.killtest.suite import SuiteOptions, run_suite

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


# Nice 0 even when the suite runs under `nice`: outside load competes at full weight (as root; else inherited).
BUSY = "import os\ntry:\n    os.setpriority(os.PRIO_PROCESS, 0, 0)\nexcept OSError:\n    pass\nwhile True:\n    pass\n"


@pytest.fixture
def busy_cores():
    """2 x cores busy loops for the test's duration."""
    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 * (os.cpu_count() or 2))]
    try:
        yield len(loops)
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def hog(config: SandboxConfig):
    report = trio.run(run_suite, config, select(["cpu_hog"]), SuiteOptions(expected_posture=None))
    (row,) = report.attacks
    return row, {c.name: c for c in row.checks}


def test_capped_hog_is_contained_with_the_cores_busy_from_outside(busy_cores):
    row, checks = hog(SandboxConfig())
    assert row.verdict == Verdict.CONTAINED, row.evidence
    assert checks["cpu_usage"].passed and "limit 1 cores" in checks["cpu_usage"].detail
    assert checks["neighbour_latency"].passed and "frozen" in checks["neighbour_latency"].detail


def test_uncapped_hog_is_caught_with_the_cores_busy_from_outside(busy_cores):
    row, checks = hog(SandboxConfig.from_yaml(ROOT / "configs/killtest_weak_cpu.yaml"))
    assert row.verdict == Verdict.ESCAPED
    assert not checks["cpu_usage"].passed and "no CPU limit" in checks["cpu_usage"].detail
