"""Docker daemon faults under a real ``gym rollout``: a second dockerd of the test's own dies mid-run.

The shared daemon is only read (``docker save`` of the runner image). The second daemon has its own
socket, data root, exec root and pid file, no bridge and no iptables rules, its own network namespace
(so nothing it does to network links reaches the host's `docker0`), and its own containerd,
started here: dockerd would reuse a system containerd at /run/containerd/containerd.sock where one
runs, instead of starting one under its exec root. The rollout is pointed at it by its config
(``sandbox.engine.base_url``) and by ``DOCKER_HOST``.

Asserted, for a SIGKILL (the daemon stays dead until the run ends) and for a restart (SIGTERM, then
a new dockerd): the run ends with exit 0 in bounded time; every episode the dead engine touched is
``infra_error``, masked, reward None (never a scored 0); episodes that finished are correct; after a
restart later episodes succeed; after ``python -m gym gc`` against that daemon no gym container is
left. Teardown (a fixture finalizer) stops both daemons, removes any container still in its runc
root, kills its shims, unmounts everything under its directory and removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import pytest
import yaml

from images.inputs import runner_image
from sandbox.labels import Labels

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"
BINARIES = ("dockerd", "containerd", "containerd-shim-runc-v2", "runc", "docker")
EPISODES_BEFORE_FAULT = 3  # bundles written before the daemon is hit


def _unusable() -> str | None:
    if os.geteuid() != 0:
        return "a second Docker daemon needs root"
    missing = [name for name in BINARIES if shutil.which(name) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


class SecondDaemon:
    """A dockerd + containerd pair living entirely under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.url = f"unix://{root}/docker.sock"
        self.exec_root = root / "exec"
        self.dockerd: subprocess.Popen | None = None
        self.containerd: subprocess.Popen | None = None

    # ------------------------------------------------------------ start / stop

    def start_containerd(self) -> None:
        state = self.root / "containerd"
        state.mkdir(parents=True)
        config = state / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{state}/root"\nstate = "{state}/state"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.containerd_socket}"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{state}/opt"\n'
        )
        self.containerd = self._spawn(["containerd", "--config", str(config), "--log-level", "warn"], "containerd.log")
        self._wait(lambda: Path(self.containerd_socket).exists(), self.containerd, "containerd", 30)

    @property
    def containerd_socket(self) -> str:
        return str(self.root / "containerd" / "containerd.sock")

    def start(self, timeout: float = 60) -> float:
        """Start dockerd; returns the seconds until it answered."""
        assert self.dockerd is None or self.dockerd.poll() is not None, "dockerd is already running"
        started = time.monotonic()
        (self.root / "daemon.json").write_text("{}\n")  # not /etc/docker/daemon.json
        # In a network namespace of its own: a dockerd started with `--bridge none` deletes the host's
        # `docker0` at start (it "removes the default bridge"), which would take the shared daemon's bridge
        # network away from every other suite. Its API and containerd are unix sockets: reachable anyway.
        self.dockerd = self._spawn(
            [
                "unshare",
                "--net",
                "dockerd",
                "--host",
                self.url,
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.exec_root),
                "--pidfile",
                str(self.root / "dockerd.pid"),
                "--containerd",
                self.containerd_socket,
                "--config-file",
                str(self.root / "daemon.json"),
                "--bridge",
                "none",
                "--iptables=false",
                "--ip-masq=false",
                "--userland-proxy=false",
                "--log-level",
                "warn",
            ],
            "dockerd.log",
        )
        self._wait(self.answers, self.dockerd, "dockerd", timeout)
        return time.monotonic() - started

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> float:
        """Signal dockerd and reap it (a zombie's pid in the pid file would refuse the next start)."""
        started = time.monotonic()
        if self.dockerd is not None and self.dockerd.poll() is None:
            self.dockerd.send_signal(sig)
            try:
                self.dockerd.wait(timeout)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait(30)
        return time.monotonic() - started

    def answers(self) -> bool:
        try:
            client = docker.DockerClient(base_url=self.url, version="1.41", timeout=5)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except Exception:  # noqa: BLE001 - not up yet, whatever the reason
            return False
        finally:
            client.close()

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen:
        with open(self.root / log_name, "ab") as log:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait(self, ready, proc: subprocess.Popen, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} did not come up (exit {proc.poll()}):\n{tail}")
            time.sleep(0.2)

    # ------------------------------------------------------------ inspection

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, version="1.41", timeout=60)

    def gym_containers(self) -> list[dict]:
        client = self.client()
        try:
            return client.api.containers(all=True, filters={"label": Labels.MARK})
        finally:
            client.close()

    def load(self, image: str) -> float:
        """``docker save`` from the shared daemon (a read) piped into this one."""
        started = time.monotonic()
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", self.url, "load", "-q"], stdin=save.stdout, capture_output=True, text=True, timeout=300
        )
        save.stdout.close()
        assert save.wait(60) == 0 and load.returncode == 0, load.stderr
        return time.monotonic() - started

    # ------------------------------------------------------------ teardown

    def teardown(self) -> None:
        """Leave nothing: containers, daemons, shims, mounts, files; each step mops up what the one before missed."""
        try:
            if (
                self.dockerd is not None
                and self.dockerd.poll() is not None
                and self.containerd is not None
                and self.containerd.poll() is None
            ):
                self.start(timeout=30)  # a killed daemon's containers still run: let a new one shut them down
            if self.dockerd is not None and self.dockerd.poll() is None:
                client = self.client()
                try:
                    for container in client.api.containers(all=True, quiet=True):
                        client.api.remove_container(container["Id"], force=True, v=True)
                finally:
                    client.close()
        except Exception:  # noqa: BLE001 - the steps below do it the hard way
            pass
        self.stop(signal.SIGTERM, timeout=60)
        self._runc_delete_all()
        if self.containerd is not None and self.containerd.poll() is None:
            self.containerd.terminate()
            try:
                self.containerd.wait(30)
            except subprocess.TimeoutExpired:
                self.containerd.kill()
                self.containerd.wait(30)
        self._kill_processes_naming_root()
        self._unmount_all()
        shutil.rmtree(self.root, ignore_errors=True)

    def _runc_delete_all(self) -> None:
        runc_root = self.exec_root / "runtime-runc" / "moby"
        if not runc_root.is_dir():
            return
        for state in runc_root.iterdir():
            subprocess.run(
                ["runc", "--root", str(runc_root), "delete", "--force", state.name], capture_output=True, timeout=30
            )

    def _kill_processes_naming_root(self) -> None:
        """Shims (started by this containerd, ``-address`` under root) and anything else left of ours."""
        mark = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if mark in cmdline:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _unmount_all(self) -> None:
        prefix = str(self.root)
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")  # octal escapes such as \040
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def lasting_links() -> set[str]:
    """The host's network links but containers' veth ends, which come and go with containers of other
    suites sharing the daemon (a suite beside this one removed two in the middle of this module once)."""
    return {name for name in os.listdir("/sys/class/net") if not name.startswith("veth")}


@pytest.fixture(scope="module")
def second_daemon():
    reason = _unusable()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    daemon = SecondDaemon(Path(tempfile.mkdtemp(prefix="gymd-", dir="/tmp")))
    links = lasting_links()  # the host's network links: the shared daemon's docker0 among them
    try:
        daemon.start_containerd()
        up_s = daemon.start()
        load_s = daemon.load(runner_image())
        print(f"\nsecond daemon up in {up_s:.1f}s, runner image loaded in {load_s:.1f}s")
        yield daemon
    finally:
        daemon.teardown()
    assert not daemon.root.exists(), f"{daemon.root} is left behind"
    gone = links - lasting_links()
    assert not gone, f"the second daemon removed host network links {sorted(gone)} (the shared daemon's bridge)"


@pytest.fixture
def daemon(second_daemon: SecondDaemon) -> SecondDaemon:
    if not second_daemon.answers():  # an earlier test failed with it down
        second_daemon.stop(signal.SIGKILL)
        second_daemon.start()
    return second_daemon


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
