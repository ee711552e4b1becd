"""Disk per failed episode (issue 41 class 8): what a bundle stores is bounded per sampled token, a run's bundles
by a disk budget, and what was cut is counted. The real episode code and rollout workers with a scripted policy on
the in-memory workspace (the big file stands in for one a short command made; the real-sandbox run of the same
attack is tests/integration/test_bundle_bounds.py), beside honest controls that must come out unchanged."""

from __future__ import annotations

import hashlib
import json
from contextlib import asynccontextmanager

import pytest
import trio
from pydantic import ValidationError

from gym import bundle as bundles
from gym.bundle import bundle_of, read_bundle, write_bundle
from gym.environment_config import ReplayConfig
from gym.format.message import Message
from gym.replay import consistency, replay
from gym.rollout import collect_async
from gym.scripted import load_scripted
from tasks.family import CodeFamily
from tests.fakes import FakeGrader, FakePool, GarbageEngine, TurnsEngine, make_env, run_workers

DEFAULT_FLOOR, DEFAULT_PER_TOKEN = 256 << 10, 1024  # replay.bytes_floor and bytes_per_token as shipped
BIG = "#" + "x" * 1_000_000 + "\n"  # just under tools.read_bytes: `python3 -c "open('big.py','w').write(...)"`


class FilledPool(FakePool):
    """Workspaces that hold ``files`` already (what a short command of the episode made)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__()
        self.files = files

    @asynccontextmanager
    async def acquire(self, owner: str = "", keys: frozenset[str] | None = None):
        async with super().acquire(owner) as ws:
            ws.files.update(self.files)
            yield ws


def bundles_of(env, engine, pool, tmp_path, episodes: int = 1):
    grader = FakeGrader(env, pool)

    async def main():
        return await collect_async(env, engine, pool, episodes, 1, 0, grader=grader, bundle_dir=tmp_path)

    _, workers = trio.run(main)
    return workers


def big_submit(env):
    return TurnsEngine(env, [[Message.tool_call("submit", {"path": "big.py"})]])


def honest_size(tmp_path) -> int:
    env = make_env(replay={"rate": 1.0})
    workers = bundles_of(env, load_scripted("reference", env), FakePool(), tmp_path / "honest")
    (path,) = workers.bundles
    return path.stat().st_size


def test_a_huge_submitted_file_is_cut_to_the_bound_and_the_cut_is_counted(tmp_path):
    """One sampled call submits a 1 MB file: stored twice (submitted, answer) that is a 2+ MB bundle on the
    code before the bound; now both are markers with the original's size and sha256, and the file fits."""
    env = make_env(replay={"rate": 0.0, "failures": True})
    workers = bundles_of(env, big_submit(env), FilledPool({"/workspace/big.py": BIG.encode()}), tmp_path / "b")
    (path,) = workers.bundles
    bundle = read_bundle(path)
    sampled = bundle.trajectory.num_sampled
    assert sampled < 400  # one submit call (the tiny BPE tokenizer spends ~8 tokens a word)
    bound = DEFAULT_FLOOR + DEFAULT_PER_TOKEN * sampled
    assert path.stat().st_size <= bound + honest_size(tmp_path), path.stat().st_size
    stored = BIG
    sha = hashlib.sha256(stored.encode()).hexdigest()
    assert {cut.field for cut in bundle.cuts} == {"answer", "tool_calls.0.outcome.submitted"}
    assert all(cut.sha256 == sha and cut.bytes >= len(stored) for cut in bundle.cuts)
    assert bundle.answer == bundles.cut_marker(bundle.cuts[0].bytes, sha)
    figures = workers.bundle_budget.figures()
    assert figures["truncated"] == 1 and figures["cut_fields"] == 2 and figures["cut_bytes"] > 2 * len(stored)
    assert figures["skipped"] == 0 and figures["written_bytes"] == path.stat().st_size
    assert consistency(bundle) == ([], [])  # a cut field is checked by its hash, never reported as a difference


def test_a_truncated_bundle_replays_as_truncated_and_a_changed_file_still_shows(tmp_path):
    env = make_env(replay={"rate": 0.0, "failures": True})
    pool = FilledPool({"/workspace/big.py": BIG.encode()})
    (path,) = bundles_of(env, big_submit(env), pool, tmp_path / "b").bundles
    bundle = read_bundle(path)

    def replayed(files):
        again = FilledPool(files)
        return trio.run(lambda: replay(bundle, CodeFamily(again, FakeGrader(env, again)), path=str(path)))

    report = replayed({"/workspace/big.py": BIG.encode()})
    assert report.differences == () and not report.identical
    assert [t.split(" ")[0] for t in report.truncated] == ["answer", "tool_calls.0.outcome.submitted"]
    other = replayed({"/workspace/big.py": BIG.replace("x", "y", 1).encode()})
    assert {d.what for d in other.differences} >= {"answer", "tool call 0 (functions.submit) submitted program"}


def test_a_swe_sized_answer_diff_of_a_short_episode_is_cut(tmp_path):
    """The outside attack's shape: a short episode (~120 sampled tokens) and a 14.7 MB answer diff (14.7 MB of
    bundle on the code before the bound), measured field by field and cut before any bundle text is built."""
    env = make_env()
    _, workers, _ = run_workers(env, GarbageEngine(env), groups=1, group_size=1)
    result = workers.results[0]
    plain = len(bundle_of(env, result, "failure", "").model_dump_json(indent=1))
    diff = "".join(f"+line {i} " + "z" * 90 + "\n" for i in range(150_000))
    assert len(diff) > 14_000_000
    huge = result.model_copy(update={"answer": diff, "answer_source": "submit"})
    bundle = bundle_of(env, huge, "failure", "")
    assert (
        len(bundle.model_dump_json(indent=1))
        <= plain + DEFAULT_FLOOR + DEFAULT_PER_TOKEN * result.trajectory.num_sampled
    )
    assert [c.field for c in bundle.cuts] == ["answer"]
    assert bundle.cuts[0].sha256 == hashlib.sha256(diff.encode()).hexdigest()
    assert len(bundle.answer) < 200 and bundle.cuts[0].bytes == len(json.dumps(diff))
    uncut, cuts = bundles.bounded(huge, len(json.dumps(diff)) + (1 << 20))  # control: a bound it fits is no cut
    assert cuts == () and uncut == huge


def test_an_honest_bundle_is_unchanged_and_consistent(tmp_path):
    """Control: the reference episode's bundle has no cut, equals the one built with no practical bound, and its
    fields are the episode's as they were."""
    env = make_env()
    workers = bundles_of(env, load_scripted("reference", env), FakePool(), tmp_path / "b")
    result = workers.results[0]
    bundle = bundle_of(env, result, "sampled", "")
    roomy = make_env(replay={"bytes_floor": 32 << 20, "bytes_per_token": 64 << 10})
    assert bundle.cuts == () and bundle == bundle_of(roomy, result, "sampled", "")
    assert (
        bundle.answer == result.answer and bundle.tool_calls == result.tool_calls and bundle.grading == result.grading
    )
    again = read_bundle(write_bundle(tmp_path / "h.json", bundle))
    assert again == bundle and consistency(again) == ([], [])
    assert workers.bundle_budget.figures()["truncated"] == 0


def test_the_run_budget_stops_writing_and_counts_what_it_skipped(tmp_path):
    env = make_env(replay={"rate": 1.0, "failures": True})
    _, all_of_them, _ = run_workers(env, GarbageEngine(env), groups=4, group_size=1, bundle_dir=tmp_path / "all")
    sizes = [path.stat().st_size for path in all_of_them.bundles]
    assert len(sizes) == 4 and all_of_them.bundle_budget.figures()["skipped"] == 0  # control: default budget
    tight = make_env(replay={"rate": 1.0, "failures": True, "run_bytes": max(sizes) + min(sizes) // 2})
    _, workers, _ = run_workers(tight, GarbageEngine(tight), groups=4, group_size=1, bundle_dir=tmp_path / "tight")
    figures = workers.bundle_budget.figures()
    on_disk = list((tmp_path / "tight").glob("*.json"))
    assert len(on_disk) == len(workers.bundles) == figures["written"] == 1
    assert figures["skipped"] == 3 and figures["skipped_bytes"] >= 3 * min(sizes)
    assert sum(path.stat().st_size for path in on_disk) <= tight.config.replay.run_bytes


def test_the_budget_counts_what_the_run_folder_holds_already(tmp_path):
    (tmp_path / "old.json").write_bytes(b"x" * 1000)
    budget = bundles.BundleBudget(1500, tmp_path)
    assert not budget.admit(600) and budget.admit(400) and budget.figures()["skipped_bytes"] == 600


@pytest.mark.parametrize(
    "field,value",
    [("bytes_floor", 1024), ("bytes_floor", 1 << 30), ("bytes_per_token", -1), ("run_bytes", -1)],
)
def test_bound_fields_refuse_values_out_of_bounds(field, value):
    with pytest.raises(ValidationError, match=field):
        ReplayConfig(**{field: value})


def test_the_main_job_keeps_the_default_bounds():
    from trainer.config import TrainConfig

    config = TrainConfig.load("configs/cp_grpo_tiny.yaml")
    replay = config.env.replay
    assert (replay.bytes_floor, replay.bytes_per_token, replay.run_bytes) == (256 << 10, 1024, 512 << 20)
