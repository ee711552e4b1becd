"""Rollout workers and replay bundles without Docker (fake pool and grader from test_episode_loop)."""

from __future__ import annotations

import json

import pytest
import trio

from gym.bundle import Bundle, BundleError, bundle_of, bundle_reason, read_bundle, write_bundle
from gym.replay import consistency
from gym.rollout import RolloutWorkers, collect_async, episode_seed, summarize
from gym.scripted import load_scripted
from tests.fakes import SAMPLES, FakeGrader, FakePool, GarbageEngine, codecontests_env, make_env, run_workers


@pytest.fixture(scope="module")
def env():
    return codecontests_env()


def test_groups_stream_out_with_shared_group_ids_and_distinct_seeds(env):
    trajectories, workers, pool = run_workers(env, load_scripted("reference", env), groups=4, group_size=3, seed=11)
    assert len(trajectories) == 12 and all(t.reward == 1.0 for t in trajectories)
    groups: dict[str, list] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    assert sorted(groups) == ["11-0", "11-1", "11-2", "11-3"]
    for members in groups.values():
        assert len(members) == 3 and len({m.task_id for m in members}) == 1
        assert sorted(m.seeds.member for m in members) == [0, 1, 2]
        assert len({m.seeds.episode for m in members}) == 3
    assert pool.max_held <= 3 and pool.acquired == pool.released == 12  # the concurrency bound holds
    assert workers.stream.position == 4


def test_next_run_continues_the_stream(env):
    pool = FakePool()
    workers = RolloutWorkers(env, load_scripted("reference", env), pool, grader=FakeGrader(env, pool))

    async def twice():
        seen = []
        for seed in (0, 1):
            send, receive = trio.open_memory_channel(0)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda send=send, seed=seed: workers.run(send, groups=2, group_size=1, seed=seed))
                async with receive:
                    seen += [t.seeds.position async for t in receive]
        return seen

    assert sorted(trio.run(twice)) == [0, 1, 2, 3]


def test_episode_seeds_are_reproducible_and_distinct():
    assert episode_seed(1, 2, 3) == episode_seed(1, 2, 3)
    assert len({episode_seed(0, p, m) for p in range(50) for m in range(8)}) == 400


def test_masked_episodes_always_leave_a_bundle(env, tmp_path):
    """A masked episode is exactly the one to look at later: failures on means it is bundled, even at rate 0."""
    quiet = make_env(task_pool=env.config.task_pool.model_dump(mode="json"), replay={"rate": 0.0, "failures": True})
    pool = FakePool()

    async def main():
        return await collect_async(
            quiet,
            load_scripted("reference", quiet),
            pool,
            2,
            2,
            0,
            grader=FakeGrader(quiet, pool, infra=True),
            bundle_dir=tmp_path,
        )

    trajectories, workers = trio.run(main)
    assert len(trajectories) == 4 and all(t.masked for t in trajectories)
    bundles = [read_bundle(p) for p in workers.bundles]
    assert len(bundles) == 4 and all(b.reason == "failure" and b.trajectory.masked for b in bundles)


def test_the_main_job_bundles_every_failure():
    from trainer.config import TrainConfig

    config = TrainConfig.load(SAMPLES.parents[1] / "configs" / "cp_grpo_tiny.yaml")
    assert config.env.replay.failures


def test_bundles_for_failures_always_and_a_deterministic_share(env, tmp_path):
    never = make_env(task_pool=env.config.task_pool.model_dump(mode="json"), replay={"rate": 0.0})
    _, workers, _ = run_workers(
        never, load_scripted("reference", never), groups=3, group_size=1, bundle_dir=tmp_path / "none"
    )
    assert workers.bundles == [] and not (tmp_path / "none").exists()
    _, workers, _ = run_workers(env, GarbageEngine(env), groups=2, group_size=1, bundle_dir=tmp_path / "bad")
    assert len(workers.bundles) == 2 and all(read_bundle(p).reason == "failure" for p in workers.bundles)
    results = workers.results
    picks = [bundle_reason(results[0], f"k{i}", rate=0.25, failures=False, seed=0) for i in range(2000)]
    assert picks == [bundle_reason(results[0], f"k{i}", rate=0.25, failures=False, seed=0) for i in range(2000)]
    assert 0.2 < picks.count("sampled") / 2000 < 0.3


def test_bundle_round_trip_is_consistent_and_tampering_shows(env, tmp_path):
    _, workers, _ = run_workers(env, load_scripted("reference", env), groups=1, group_size=1)
    bundle = bundle_of(env, workers.results[0], "sampled", "sha256:x")
    path = write_bundle(tmp_path / "b.json", bundle)
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]  # no temporary file left behind
    again = read_bundle(path)
    assert again == bundle and consistency(again) == ([], [])
    data = json.loads(path.read_text())
    data["tool_calls"][0]["outcome"]["output"] = "wrote 1 bytes to solution.py"
    data["trajectory"]["reward"] = 0.5
    tampered = Bundle.model_validate(data)
    whats = [d.what for d in consistency(tampered)[0]]
    assert whats == ["tool call 0 result in the trajectory", "reward for the recorded grading"]
    ids = list(data["trajectory"]["ids"])
    ids[-3] = (ids[-3] + 1) % 100 + 20
    data["trajectory"]["ids"] = ids
    assert "token exactness" in [d.what for d in consistency(Bundle.model_validate(data))[0]]


@pytest.mark.parametrize(
    "tamper, named",
    [
        ({"hardening": {"network": "bridge"}}, "hardening.network"),
        ({"hardening": {"seccomp": "unconfined", "drop_caps": False}}, "hardening.seccomp"),
        ({"budgets": {"pids": None}}, "budgets.pids"),
    ],
)
def test_replay_refuses_a_bundle_with_a_weakened_sandbox(env, tmp_path, tamper, named):
    """A tampered bundle must not make `gym replay` run its tool calls with network on or seccomp off:
    refused before any container starts, unless --trust-bundle-sandbox (the engine: tests/unit/test_attacks_replay.py)."""
    from gym.replay import replay_files
    from gym.replay_limits import LIMITS, loosened

    _, workers, _ = run_workers(env, load_scripted("reference", env), groups=1, group_size=1)
    bundle = bundle_of(env, workers.results[0], "sampled", "sha256:x")
    assert not [
        limit.field
        for limit in LIMITS
        if limit.field.startswith("sandbox.hardening")
        and loosened(limit, getattr(bundle.sandbox.hardening, limit.field.rpartition(".")[2]))
    ]
    data = json.loads(bundle.model_dump_json())
    for section, fields in tamper.items():
        data["sandbox"][section].update(fields)
    path = write_bundle(tmp_path / "tampered.json", Bundle.model_validate(data))
    with pytest.raises(BundleError, match=f"refusing to replay.*{named}"):
        replay_files([path])


def test_unreadable_bundles_name_the_field(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format_version": 1, "reason": "sampled"}))
    with pytest.raises(BundleError, match="x.json: not a replay bundle: environment: Field required"):
        read_bundle(path)
    with pytest.raises(BundleError, match="cannot read"):
        read_bundle(tmp_path / "missing.json")


def test_summary_figures(env):
    trajectories, _, _ = run_workers(env, GarbageEngine(env), groups=2, group_size=1)
    figures = summarize(trajectories, wall_s=2.0)
    assert figures["episodes"] == 2 and figures["episodes_per_s"] == 1.0 and figures["masked"] == 0
    assert figures["end_reasons"] == {"max_turns": 2}
    shares = [figures[f"share_{p}"] for p in ("policy", "tools", "grading", "workspace")]
    assert all(0 <= s <= 1 for s in shares) and sum(shares) == pytest.approx(1.0)
