"""Docker daemon faults under a real ``gym rollout``: a second dockerd of the test's own dies mid-run.

The daemon is tests/second_daemon.py's (its own socket, data root, exec root, pid file and containerd,
no bridge and no iptables rules, in a network namespace of its own; the shared daemon is only read, by
``docker save`` of the runner image). The rollout reaches it over its unix socket: by its config
(``sandbox.engine.base_url``) and by ``DOCKER_HOST``; its TLS listener is not used here.

Asserted, for a SIGKILL (the daemon stays dead until the run ends) and for a restart (SIGTERM, then
a new dockerd): the run ends with exit 0 in bounded time; every episode the dead engine touched is
``infra_error``, masked, reward None (never a scored 0); episodes that finished are correct; after a
restart later episodes succeed; after ``python -m gym gc`` against that daemon no gym container is
left; the host's network links (the shared daemon's ``docker0`` among them) outlive the module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.second_daemon import SecondDaemon, second_tls_daemon  # noqa: F401 - the module's daemon (a fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EPISODES_BEFORE_FAULT = 3  # bundles written before the daemon is hit


def lasting_links() -> set[str]:
    """The host's network links but containers' veth ends, which come and go with containers of other
    suites sharing the daemon (a suite beside this one removed two in the middle of this module once)."""
    return {name for name in os.listdir("/sys/class/net") if not name.startswith("veth")}


@pytest.fixture(scope="module")
def host_links_kept() -> Iterator[None]:
    """Requested before ``second_tls_daemon``, so it is torn down after it: the check covers the daemon's whole life."""
    links = lasting_links()
    yield
    gone = links - lasting_links()
    assert not gone, f"the second daemon removed host network links {sorted(gone)} (the shared daemon's bridge)"


@pytest.fixture
def daemon(host_links_kept: None, request: pytest.FixtureRequest) -> SecondDaemon:
    """The module's daemon, answering (an earlier test may have failed with it down)."""
    second: SecondDaemon = request.getfixturevalue("second_tls_daemon")
    if not second.answers():
        second.stop(signal.SIGKILL)
        second.start()
    return second


SLOW_S = 2.0  # every run of a slow task's reference program takes this long: episodes are in flight for seconds


def slow_tasks(tmp: Path) -> dict:
    """A task pool whose reference programs sleep ``SLOW_S`` on every run, so that whenever the fault lands
    (after some bundles were written) the episodes then running are inside a tool call or a grading for
    seconds, whatever the machine's load: the fault always meets episodes in flight."""
    program = f"import time\ntime.sleep({SLOW_S})\ns = input().strip()\nprint(sum(c in 'aeiou' for c in s))\n"
    row = {
        "question": "Print how many of the letters of the input line are vowels (a, e, i, o, u).",
        "solutions": json.dumps([program]),
        "starter_code": "",
        "input_output": json.dumps({"inputs": ["hello\n", "sky\n"], "outputs": ["2\n", "0\n"]}),
    }
    tasks, solutions = tmp / "slow.jsonl", tmp / "slow.solutions.jsonl"
    tasks.write_text("".join(json.dumps({**row, "name": f"slow-{i}"}) + "\n" for i in range(16)))
    solutions.write_text(
        "".join(json.dumps({"task_id": str(i), "completion": program, "expect": "passed"}) + "\n" for i in range(16))
    )
    return {"type": "jsonl", "path": str(tasks), "format": "taco", "solutions": str(solutions)}


class Rollout:
    """``python -m gym rollout`` of the smoke environment against the second daemon, in the background."""

    def __init__(self, daemon: SecondDaemon, tmp: Path, episodes: int, outage_wait_s: float):
        config = yaml.safe_load((ROOT / "configs" / "cp_smoke.yaml").read_text())
        config["sandbox"]["engine"] = {"base_url": daemon.url, "outage_wait_s": outage_wait_s}
        config["task_pool"] = slow_tasks(tmp)
        (tmp / "env.yaml").write_text(yaml.safe_dump(config))
        self.out = tmp / "run"
        self.log = tmp / "rollout.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gym",
                    "rollout",
                    str(tmp / "env.yaml"),
                    "--episodes",
                    str(episodes),
                    "--out",
                    str(self.out),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "DOCKER_HOST": daemon.url},
            )

    def bundles(self) -> list[Path]:
        return sorted((self.out / "bundles").glob("[0-9]*.json")) if (self.out / "bundles").is_dir() else []

    def wait_for_bundles(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.bundles()) < n:
            assert self.proc.poll() is None, f"the rollout ended early:\n{self.tail()}"
            assert time.monotonic() < deadline, f"fewer than {n} episodes in {timeout:.0f}s:\n{self.tail()}"
            time.sleep(0.1)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the rollout did not end within {timeout:.0f}s (a hang):\n{self.tail()}")

    def finished(self, code: int, episodes: int) -> tuple[list[dict], list[dict]]:
        """``(trajectories, the masked ones)`` of a run that ended well: every episode correct or masked."""
        assert code == 0, self.tail()
        trajectories = [json.loads(line) for line in (self.out / "trajectories.jsonl").read_text().splitlines()]
        assert len(trajectories) == episodes
        masked = [t for t in trajectories if t["masked"]]
        for t in masked:
            assert t["end_reason"] == "infra_error" and t["reward"] is None and "infra_error" in t["failures"], t
        for t in trajectories:  # the scripted reference solves every task; a dead engine scored would land here
            if not t["masked"]:
                assert t["reward"] == 1.0 and t["failures"] == [], {k: t[k] for k in ("task_id", "reward", "failures")}
        assert json.loads((self.out / "summary.json").read_text())["masked"] == len(masked)
        return trajectories, masked

    def ended_after(self, moment: float) -> list[dict]:
        """Trajectories of the bundles written after ``moment`` (time.time())."""
        return [json.loads(path.read_text())["trajectory"] for path in self.bundles() if path.stat().st_mtime > moment]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


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
    rollout = Rollout(daemon, tmp_path, episodes=12, outage_wait_s=3)
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
    rollout = Rollout(daemon, tmp_path, episodes=12, outage_wait_s=90)
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
