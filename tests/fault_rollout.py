"""A real ``gym rollout`` in the background over slow tasks, for tests that fault its Docker engines mid-run
(tests/integration/test_daemon_faults.py, tests/integration/test_fleet.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

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
    """``python -m gym rollout`` of the smoke environment over slow tasks, in the background; ``sandbox`` keys
    replace the smoke config's (the engine or engines to run on), ``env`` is added to the environment; a long
    ``tools_timeout_s`` keeps many episodes on a loaded host from meeting tool-call deadlines of their own."""

    def __init__(
        self,
        tmp: Path,
        episodes: int,
        sandbox: dict,
        env: dict[str, str] | None = None,
        concurrency: int | None = None,
        tools_timeout_s: float = 10,
    ):
        config = yaml.safe_load((ROOT / "configs" / "cp_smoke.yaml").read_text())
        config["sandbox"].update(sandbox)
        config["task_pool"] = slow_tasks(tmp)
        if concurrency is not None:
            config["concurrency"] = concurrency
        config["tools"]["timeout_s"] = tools_timeout_s
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
                env={**os.environ, **(env or {})},
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
