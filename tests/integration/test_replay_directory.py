"""`gym replay` of a directory, in real containers: one bundle that cannot run here (its image is not on this
engine) is reported NOT REPLAYED with its reason while every other bundle replays; a tool call that timed out
in the rollout but not in the replay is reported as timing-dependent, never as a difference of the
environment (issue 42, class 6)."""

from __future__ import annotations

import json
import time

import pytest
import trio

from gym.bundle import bundle_of, write_bundle
from gym.environment import Environment, task_text
from gym.episode import run_episode
from gym.format.message import Message
from gym.scripted import ReferencePolicy
from sandbox.pool import WorkspacePool
from tasks.family import CodeFamily
from tasks.grader import Grader
from tests.replay_support import ROOT, TASK, gym, honest  # noqa: F401  (honest: a fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MISSING = "gym-runner:0000000000000000"  # a local image name (vetting lets it through) that no engine holds


def test_a_bundle_that_cannot_run_here_is_reported_and_the_others_replay(honest, tmp_path):  # noqa: F811
    folder = tmp_path / "bundles"
    folder.mkdir()
    (folder / "a_honest.json").write_text(json.dumps(honest))
    missing = json.loads(json.dumps(honest))
    missing["image"] = missing["sandbox"]["image"] = MISSING
    (folder / "b_missing.json").write_text(json.dumps(missing))
    (folder / "c_honest.json").write_text(json.dumps(honest))

    done = gym("replay", str(folder), "--json", str(tmp_path / "reports.json"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    heads = [line for line in lines if not line.startswith(" ")]  # one per bundle, in input order, then the total
    assert "a_honest.json" in heads[0] and heads[0].endswith(": identical"), heads
    assert "b_missing.json" in heads[1] and "NOT REPLAYED: ImageMissing: image " + MISSING in heads[1], heads
    assert "c_honest.json" in heads[2] and heads[2].endswith(": identical"), heads
    assert heads[3] == "2/3 bundles replayed identically, 1 not replayed", heads
    reports = json.loads((tmp_path / "reports.json").read_text())
    assert [bool(r["failed"]) for r in reports] == [False, True, False]
    assert "Traceback" not in done.stderr


class SlowThenSolves(ReferencePolicy):
    """A bash call that sleeps past its deadline until ``until`` (the host's clock), then the reference."""

    def __init__(self, env: Environment, until: float) -> None:
        text = {task_id: task_text(task) for task_id, task in env.tasks.items()}
        tools = tuple(env.config.tools.enabled)
        super().__init__(env.harmony, env.tasks, env.reference_programs(), text, tools=tools)
        self.until = int(until)

    def script(self, task):
        wait = f"if [ $(date +%s) -lt {self.until} ]; then sleep 30; fi; echo done"
        return [[Message.tool_call("bash", {"command": wait, "timeout": 2})], *super().script(task)]


def test_a_call_that_timed_out_only_in_the_rollout_is_timing_dependent(tmp_path):
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    sandbox = env.config.sandbox.model_copy(update={"pool": env.config.sandbox.pool.model_copy(update={"size": 1})})
    until = time.time() + 25  # the rollout runs before it (its call times out), the replay after it (it does not)

    async def main():
        async with WorkspacePool(sandbox) as pool:
            family = CodeFamily(pool, Grader(pool, env.config.grader))
            return await run_episode(env, SlowThenSolves(env, until), family, env.tasks[TASK], seed=1, group_id="a")

    played = trio.run(main)
    assert played.tool_calls[0].outcome.failure == "timeout" and played.trajectory.reward == 1.0
    path = write_bundle(tmp_path / "slow.json", bundle_of(env, played, "sampled", ""))
    time.sleep(max(0.0, until + 1 - time.time()))

    done = gym("replay", str(path), "--json", str(tmp_path / "reports.json"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "TIMING-DEPENDENT" in done.stdout and "DIFFERENCES" not in done.stdout, done.stdout
    assert (
        done.stdout.splitlines()[-1] == "0/1 bundles replayed identically, 1 differ only in timing-dependent outcomes"
    )
    (report,) = json.loads((tmp_path / "reports.json").read_text())
    assert report["differences"] == [] and report["reward_replayed"] == 1.0
    assert {d["what"] for d in report["timing"]} == {
        "tool call 0 (functions.bash) output",
        "tool call 0 (functions.bash) failure",
    }


def test_a_masked_swe_episode_without_an_image_names_none_and_its_replay_says_why(tmp_path):
    """An SWE episode whose instance image could not be built is masked; its bundle names no image (''), not the CP
    runner image it never ran on, and `gym replay` reports it NOT REPLAYED with that reason (before: the runner
    image was recorded and the replay of a directory ended at it, exit 3)."""
    from gym.rollout import collect_async
    from gym.scripted import load_scripted
    from tests.swe_support import TOOLZ, shipped

    instance = shipped()[TOOLZ]
    bogus = instance.model_copy(update={"instance_id": "nobody__nothing-1", "repo": "nobody/nothing"})
    env = Environment.load(ROOT / "configs" / "swe_smoke.yaml")
    env.sources, env.tasks = [[bogus]], {bogus.instance_id: bogus}

    async def main():
        async with WorkspacePool(env.config.sandbox) as pool:
            return await collect_async(env, load_scripted("empty", env), pool, 1, 1, seed=0, bundle_dir=tmp_path)

    (trajectory,), _ = trio.run(main)
    assert trajectory.masked and trajectory.reward is None, trajectory.end_reason
    (path,) = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["image"] == ""
    done = gym("replay", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "NOT REPLAYED: InfraError: the episode had no workspace image" in done.stdout, done.stdout
