"""Docker daemon faults under a real ``gym rollout``: a second dockerd of the test's own dies mid-run.

The daemon is tests/second_daemon.py's (its own socket, data root, exec root, pid file and containerd,
no bridge and no iptables rules, in a network namespace of its own; the shared daemon is only read, by
``docker save`` of the runner image). The rollout reaches it over its unix socket: by its config
(``sandbox.engine.base_url``) and by ``DOCKER_HOST``; its TLS listener is not used here.

Asserted, for a SIGKILL (the daemon stays dead until the run ends) and for a restart (SIGTERM, then
a new dockerd): the run ends with exit 0 in bounded time; every episode the dead engine touched is
``infra_error``, masked, reward None (never a scored 0); episodes that finished are correct; after a
restart later episodes succeed; after ``python -m gym gc`` against that daemon no gym container is
left; the host's network links (the shared daemon's ``docker0`` among them) outlive the daemon (checked at its
teardown, tests/second_daemon.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fault_rollout import Rollout
from tests.second_daemon import SecondDaemon

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EPISODES_BEFORE_FAULT = 3  # bundles written before the daemon is hit


@pytest.fixture
def daemon(request: pytest.FixtureRequest) -> SecondDaemon:
    """The session's second daemon, answering (an earlier test may have left it down)."""
    second: SecondDaemon = request.getfixturevalue("second_tls_daemon")
    if not second.answers():
        second.stop(signal.SIGKILL)
        second.start()
    return second


def daemon_rollout(daemon: SecondDaemon, tmp: Path, outage_wait_s: float) -> Rollout:
    """12 episodes against the second daemon's unix socket (by config and by DOCKER_HOST)."""
    sandbox = {"engine": {"base_url": daemon.url, "outage_wait_s": outage_wait_s}}
    return Rollout(tmp, 12, sandbox, env={"DOCKER_HOST": daemon.url})


def assert_nothing_left_after_gc(daemon: SecondDaemon) -> None:
    gc = subprocess.run(
        [sys.executable, "-m", "gym", "gc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DOCKER_HOST": daemon.url},
    )
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert daemon.gym_containers() == [], gc.stdout


def test_sigkill_of_the_daemon_mid_rollout_masks_what_it_touched_and_the_run_ends(daemon, tmp_path):
    rollout = daemon_rollout(daemon, tmp_path, outage_wait_s=3)
    try:
        rollout.wait_for_bundles(EPISODES_BEFORE_FAULT, timeout=120)
        killed = time.monotonic()
        daemon.stop(signal.SIGKILL)
        code = rollout.wait(timeout=90)
        ended_s = time.monotonic() - killed
    finally:
        rollout.kill()
    trajectories, masked = rollout.finished(code, episodes=12)
    assert masked and len(trajectories) - len(masked) >= EPISODES_BEFORE_FAULT
    # starts wait out the outage once (outage_wait_s), not once per episode
    assert ended_s < 3 + 30, f"the run took {ended_s:.1f}s after the kill"
    restart_s = daemon.start()
    left = len(daemon.gym_containers())
    assert_nothing_left_after_gc(daemon)
    print(
        f"\nSIGKILL: run ended {ended_s:.1f}s after the kill, {len(masked)}/12 masked; "
        f"daemon back in {restart_s:.1f}s, gc removed {left} containers"
    )


def test_daemon_restart_mid_rollout_masks_what_it_touched_and_later_episodes_succeed(daemon, tmp_path):
    rollout = daemon_rollout(daemon, tmp_path, outage_wait_s=90)
    try:
        rollout.wait_for_bundles(EPISODES_BEFORE_FAULT, timeout=120)
        stop_s = daemon.stop(signal.SIGTERM)
        restart_s = daemon.start()
        back = time.time()
        code = rollout.wait(timeout=150)
    finally:
        rollout.kill()
    _, masked = rollout.finished(code, episodes=12)
    assert masked, "episodes in flight when the daemon went down should be masked"
    later = [t for t in rollout.ended_after(back) if not t["masked"]]
    assert later, f"no episode succeeded after the restart:\n{rollout.tail()}"
    assert len(masked) <= 12 - EPISODES_BEFORE_FAULT - len(later)
    left = len(daemon.gym_containers())
    assert_nothing_left_after_gc(daemon)
    print(
        f"\nrestart: dockerd stopped in {stop_s:.1f}s, back in {restart_s:.1f}s; {len(masked)}/12 masked, "
        f"{len(later)} succeeded after the restart; {left} containers left for gc"
    )
