"""The kill-test can fail: against deliberately weakened configs it reports exactly the matching escapes.

Each case runs the attacks of the weakened area plus a few controls that must
still be contained; the escapes must be exactly the selected attacks whose
``breaks_without`` names the weakening, and the posture must drift.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.killtest.catalog import select
from sandbox.killtest.judge import Verdict
from sandbox.killtest.suite import SuiteOptions, run_suite

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

# weakening -> (attacks and controls to run, a posture key that must drift)
CASES = {
    "cpu": (["cpu_hog", "endless_loop", "fork_bomb_python"], "cgroup.cpu"),
    "network": (["network", "env_secrets", "mount", "write_root"], "network.interfaces"),
    "pids": (["fork_bomb_shell", "fork_bomb_python", "thread_bomb", "memory_heap", "zombies"], "cgroup.pids"),
    "rootfs": (["filesystem", "planted_file", "planted_process", "runner_kill"], "mounts./.options"),
    "seccomp": (["kernel", "raw_socket", "proc_environ", "daemon_double_fork"], "seccomp"),
}


@pytest.mark.parametrize("weakening", sorted(CASES))
def test_weakened_config_reports_exactly_the_matching_escapes(weakening):
    names, drift_key = CASES[weakening]
    config = SandboxConfig.from_yaml(ROOT / f"configs/killtest_weak_{weakening}.yaml")
    attacks = select(names)
    report = trio.run(run_suite, config, attacks, SuiteOptions(concurrency=3))

    expected = {a.name for a in attacks if weakening in a.breaks_without}
    assert expected and len(expected) < len(attacks)  # there are matching attacks and controls
    errors = {a.name: a.evidence for a in report.attacks if a.verdict == Verdict.ERROR}
    assert errors == {}
    assert set(report.escaped) == expected, {
        a.name: a.evidence for a in report.attacks if a.name in set(report.escaped) ^ expected
    }
    assert not report.ok
    assert drift_key in {d["key"] for d in report.posture}, report.posture
