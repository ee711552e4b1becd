"""SWE instances played through the gym: the same episode loop as CP tasks, real instance workspaces.

The shipped instances (`python -m gym tasks build-swe`) with ``configs/swe_smoke.yaml``:
``scripted:reference`` (gold patch through ``apply_patch``, tests through ``bash``, ``submit``)
is rewarded 1.0 on every instance and every bundle replays identically; ``scripted:empty`` gets 0;
agents that tamper (edit the tests, plant a forcing conftest, commit in the repository's own
``.git``, rewrite ``.git`` so the change looks like base) score 0 and are never masked; a mixture
of CP and SWE sources runs through one loop.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.format.message import Message
from gym.rollout import collect_async
from gym.trajectory import read_jsonl
from sandbox.pool import WorkspacePool
from tasks.swe.instance import SweInstance
from tests.swe_support import TOOLZ, Tamperer, images, shipped

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def gym(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def built() -> dict[str, SweInstance]:
    instances = shipped()  # tasks build-swe: tasks/swe/instances.jsonl and the clones
    images()
    return instances


def test_reference_rollout_resolves_every_instance_and_replays_identically(built, tmp_path):
    out = tmp_path / "reference"
    done = gym(
        "rollout", "configs/swe_smoke.yaml", "--episodes", "3", "--policy", "scripted:reference", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["episodes"] == 3 and summary["masked"] == 0 and summary["reward_1"] == 3, summary
    trajectories = list(read_jsonl(out / "trajectories.jsonl"))
    assert {t.task_id for t in trajectories} == set(built) and {t.reward for t in trajectories} == {1.0}
    bundles = sorted((out / "bundles").glob("*.json"))
    first = json.loads(bundles[0].read_text())
    assert first["task"]["instance_id"] in built and first["image"].startswith("gym-swe-instance:")
    assert first["answer"].startswith("diff --git") and first["grading"]["passed"]
    replayed = gym("replay", str(out / "bundles"))
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert "3/3 bundles replayed identically" in replayed.stdout

    # A bundle whose recorded diff was edited no longer matches what its tool calls produce.
    # (Any bundle may sort first: edit the diff's first added line, which every reference diff has.)
    lines = first["answer"].splitlines(keepends=True)
    added = next(i for i, line in enumerate(lines) if line.startswith("+") and not line.startswith("+++"))
    lines[added] = lines[added].rstrip("\n") + "  # tampered\n"
    edited = "".join(lines)
    assert edited != first["answer"]
    first["answer"] = edited
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(first))
    differs = gym("replay", str(tampered))
    assert differs.returncode == 1 and "answer" in differs.stdout, differs.stdout[-2000:]

    empty = gym(
        "rollout",
        "configs/swe_smoke.yaml",
        "--episodes",
        "3",
        "--policy",
        "scripted:empty",
        "--out",
        str(tmp_path / "empty"),
    )
    assert empty.returncode == 0, empty.stderr[-3000:]
    summary = json.loads(empty.stdout)
    assert summary["masked"] == 0 and summary["mean_reward"] == 0.0 and summary["reward_1"] == 0, summary


def _bash(command: str) -> list[Message]:
    return [Message.tool_call("bash", {"command": command, "cwd": "repo", "timeout": 60})]


TAMPERING = {
    # the F2P tests made trivially true in the agent's copy of the test file
    "edit the tests": _bash(
        "sed -i 's/assert list(accumulate/assert True or list(accumulate/' toolz/tests/test_itertoolz.py"
    ),
    # a conftest that turns every report into a pass
    "forcing conftest": [
        Message.tool_call(
            "write_file",
            {
                "path": "repo/conftest.py",
                "content": (
                    "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
                ),
            },
        )
    ],
    # the wrong fix committed in the agent's own .git, then the work tree put back: its .git says "fixed"
    ".git commit": _bash(
        "git -c user.email=a@b -c user.name=a commit -qam wip --allow-empty && "
        "sed -i 's/initial == no_default/initial is no_default/' toolz/itertoolz.py && "
        "git -c user.email=a@b -c user.name=a commit -qam fix"
    ),
    # a .git that no longer knows base_commit (the diff must come from the pristine copy, not from here)
    ".git removed": _bash(
        "rm -rf .git && git init -q && git add -A && git -c user.email=a@b -c user.name=a commit -qm base"
    ),
}


def test_tampering_agents_score_zero_and_are_never_masked(built):
    config = EnvironmentConfig.from_file(ROOT / "configs/swe_smoke.yaml")
    env = Environment(config.model_copy(update={"replay": config.replay.model_copy(update={"rate": 0.0})}))
    env.sources = [[built[TOOLZ]]]  # only toolz: the scripts above know its files
    env.tasks = {TOOLZ: built[TOOLZ]}

    async def play(turns: list[list[Message]]):
        async with WorkspacePool(env.config.sandbox) as pool:
            trajectories, workers = await collect_async(env, Tamperer(env, turns), pool, 1, 1, seed=0)
            return trajectories[0], workers.results[0]

    for name, turns in TAMPERING.items():
        trajectory, result = trio.run(play, [turns])  # one turn of tampering, then submit
        assert not trajectory.masked and trajectory.reward is not None, (name, trajectory.end_reason)
        tamper = result.tool_calls[0].outcome
        assert tamper.failure == "ok" and "[exit code" not in tamper.output.replace("[exit code 0]", ""), (name, tamper)
        assert trajectory.reward_breakdown["correctness"] == 0.0, (name, result.grading)
        assert result.grading is not None and not result.grading.passed and not result.grading.infra_error, name
        assert "FAIL_TO_PASS" in result.grading.tests[0].detail and result.grading.tests[0].verdict != "passed", name


def test_cp_and_swe_tasks_share_one_loop(built, tmp_path):
    """A mixture of a CP sample file and the SWE instances: one stream, one set of workers, per-family tools."""
    config = EnvironmentConfig.from_file(
        ROOT / "configs/swe_smoke.yaml",
        overrides=[
            (
                ("task_pool",),
                {
                    "type": "mixture",
                    "seed": 3,
                    "sources": [
                        {
                            "weight": 1,
                            "pool": {
                                "type": "jsonl",
                                "path": "tasks/samples/taco.jsonl",
                                "format": "taco",
                                "solutions": "tasks/samples/taco.solutions.jsonl",
                                "id_prefix": "taco/",
                            },
                        },
                        {
                            "weight": 1,
                            "pool": {
                                "type": "jsonl",
                                "path": "tasks/swe/instances.jsonl",
                                "format": "swe",
                                "repos_dir": "tasks/swe/repos",
                            },
                        },
                    ],
                },
            ),
            (("sandbox", "pool", "size"), 2),
            (("replay", "rate"), 0.0),
        ],
    )
    env = Environment(config)
    from gym.scripted import load_scripted

    async def play():
        async with WorkspacePool(env.config.sandbox) as pool:
            trajectories, _ = await collect_async(env, load_scripted("reference", env), pool, 6, 1, seed=0)
            return trajectories

    trajectories = trio.run(play)
    kinds = {"swe" if t.task_id in built else "cp" for t in trajectories}
    assert kinds == {"cp", "swe"}, [t.task_id for t in trajectories]
    assert [t.reward for t in trajectories] == [1.0] * 6 and not any(t.masked for t in trajectories)
    swe_prompt = env.prompt(built[TOOLZ])
    cp_prompt = env.prompt(next(t for t in env.tasks.values() if not isinstance(t, SweInstance)))
    assert "Submit your changes to the repository" in swe_prompt[1].content
    assert "Submit the final program" in cp_prompt[1].content


def test_another_swe_gym_file_and_clones_folder_through_set(built, tmp_path):
    """The same rollout pointed at another SWE-Gym-format file (a plain git source: a clone DIR/owner__name)
    with --set only; and grading is not bound by the agent's per-episode call budget."""
    import shutil

    clones = tmp_path / "clones"
    shutil.copytree(ROOT / "tasks/swe/repos/pytoolz__toolz", clones / "pytoolz__toolz", symlinks=True)
    row = built[TOOLZ].row()
    row.pop("source", None)  # a published row: the repository comes from the clones folder
    rows = tmp_path / "other.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    out = tmp_path / "other"
    done = gym(
        "rollout",
        "configs/swe_smoke.yaml",
        "--episodes",
        "1",
        "--policy",
        "scripted:reference",
        "--out",
        str(out),
        "--set",
        f"task_pool.path={rows}",
        "--set",
        f"task_pool.repos_dir={clones}",
        "--set",
        "sandbox.episode.max_calls=4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["episodes"] == 1 and summary["reward_1"] == 1 and summary["masked"] == 0, summary
    resolved = json.loads((out / "environment.json").read_text())["task_pool"]
    assert resolved["path"] == str(rows) and resolved["repos_dir"] == str(clones)


def test_bench_swe_reports_its_figures(built, tmp_path):
    out = tmp_path / "bench.json"
    done = gym("bench", "swe", "--episodes", "3", "--prepares", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["episodes"] == 3 and figures["instances"] == 3 and figures["mean_reward"] == 1.0
    assert figures["masked"] == 0 and figures["episodes_per_min"] > 0
    assert 0 < figures["prepare_p50_s"] <= figures["prepare_p95_s"] and figures["grade_p50_s"] > 0
    shares = [figures[f"share_{phase}"] for phase in ("policy", "tools", "grading", "workspace")]
    assert abs(sum(shares) - 1.0) < 1e-6


def test_grpo_trains_on_a_cp_and_swe_mixture(built, tmp_path):
    """configs/swe_grpo_tiny.yaml cut to one step of SWE-heavy groups: summary.json, nothing masked, SWE
    trajectories among the trained samples."""
    run_dir = tmp_path / "run"
    done = gym(
        "train",
        "configs/swe_grpo_tiny.yaml",
        "--run-dir",
        str(run_dir),
        "--steps",
        "1",
        "--set",
        "warm_start.steps=2",
        "--set",
        "rollout.groups_per_step=2",
        "--set",
        "rollout.group_size=2",
        "--set",
        "algorithm.dynamic_sampling.enabled=false",
        "--set",
        "environment.task_pool.sources.2.weight=50",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["masked"] == 0 and summary["samples"] >= 4, summary
    trained = {t.task_id for t in read_jsonl(run_dir / "trajectories.jsonl")}
    assert trained & set(built), trained


# Outside review of SWE episodes: an agent's bytes and output once crashed the rollout (a diff with non-UTF-8
# bytes could not be written into its bundle), masked its failure (a 5000-digit "count" crashed the log parser:
# grader crash -> infra_error) or froze the host's event loop (a 60,000-character line of colons took the
# log parser's regex 39 s).
FIX = "sed -i 's/if not initial or initial == no_default:/if initial == no_default:/' toolz/itertoolz.py"
HUGE_COUNT = (
    "python3 -c \"p = 'toolz/itertoolz.py'; s = open(p).read(); open(p, 'w').write(s.replace("
    '\'    seq = iter(seq)\', \'    print(\\"9\\" * 5000 + \\" passed in 1.0s\\")\\n    seq = iter(seq)\', 1))"'
)
COLON_LINE = (
    "python3 -c \"p = 'toolz/itertoolz.py'; s = open(p).read(); open(p, 'w').write(s.replace("
    '\'    seq = iter(seq)\', \'    import os, stat\\n    [os.write(f, b\\"\\\\nx\\" + b\\":\\" * 60000 + b\\"\\\\n\\") '
    'for f in range(3, 64) if os.path.exists(\\"/proc/self/fd/%d\\" % f) and '
    "stat.S_ISFIFO(os.fstat(f).st_mode)]\\n    seq = iter(seq)', 1))\""
)


def test_hostile_bytes_and_output_are_scored_never_masked_nor_a_crash(built, tmp_path):
    config = EnvironmentConfig.from_file(ROOT / "configs/swe_smoke.yaml")
    env = Environment(config)
    env.sources = [[built[TOOLZ]]]
    env.tasks = {TOOLZ: built[TOOLZ]}
    cases = {
        "non-UTF-8 file + fix": (FIX + "; printf '# caf\\xe9 \\xff\\n' > toolz/latin1_notes.py", 1.0, "latin1_notes"),
        "5000-digit count, no fix": (HUGE_COUNT, 0.0, '"9" * 5000'),
        "60,000 colons on pytest's stdout, no fix": (COLON_LINE, 0.0, 'b":" * 60000'),
    }
    for name, (command, reward, marker) in cases.items():
        bundles = tmp_path / name.split(",")[0].replace(" ", "_")

        async def play(command=command, bundles=bundles):
            async with WorkspacePool(env.config.sandbox) as pool:
                trajectories, workers = await collect_async(
                    env, Tamperer(env, [_bash(command)]), pool, 1, 1, seed=0, bundle_dir=bundles
                )
                return trajectories[0], workers

        trajectory, workers = trio.run(play)
        assert workers.results[0].tool_calls[0].outcome.failure == "ok", (name, workers.results[0].tool_calls[0])
        assert marker in (workers.results[0].answer or ""), (name, workers.results[0].answer)  # the attack is in
        assert not trajectory.masked and trajectory.reward_breakdown["correctness"] == reward, (name, trajectory)
        # the parser's linear time on these lines is tests/unit/test_swe_testlog.py's (a ratio of about 500 to its
        # bound); grading's wall time here is mostly the test run, 42 s idle and 69 s under load, not a signal
        assert len(workers.bundles) == 1, name  # rate 1.0: written, whatever bytes the diff holds
    replayed = gym("replay", str(tmp_path / "non-UTF-8_file_+_fix"))
    assert replayed.returncode == 0 and "1/1 bundles replayed identically" in replayed.stdout, replayed.stdout[-2000:]
