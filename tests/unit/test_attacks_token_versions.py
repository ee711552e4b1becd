"""Attacks on the per-token weights versions (partial rollouts), beside honest controls.

- A policy server's reply whose ``token_versions`` is malformed, oversized, of another length than its tokens,
  going down, or newer than the reply's ``weights_version`` is the engine's failure: `HttpEngine` raises
  `EngineError` and the episode is masked (``infra_error``), never a crash and never a score. A reply without the
  field (an older server, vLLM) has every token from its ``weights_version``.
- A trajectory file or replay bundle whose versions were tampered with is refused with an error naming
  ``token_versions``; a record written before the field existed still reads, and its bundle still replays.

The episodes are the scripted reference on the in-memory workspace and fake grader (tests/fakes.py); the server's
replies are built from the reference's completions, so the honest ones solve their task.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
from pydantic import ValidationError

from gym.bundle import BundleError, bundle_of, read_bundle, write_bundle
from gym.episode import run_episode
from gym.policy_client import EngineError, HttpEngine
from gym.replay import consistency, replay
from gym.scripted import load_scripted
from gym.trajectory import Trajectory, TrajectoryError, read_jsonl, write_jsonl
from policies.sampling import Completion, SamplingParams
from tasks.family import CodeFamily
from tests.fakes import FakeGrader, FakePool, codecontests_env, run_workers


def reply_of(completions: list[Completion], version: int) -> dict:
    """A /v1/completions reply as the policy server writes it (policies/server.py)."""
    choices = [
        {
            "index": i,
            "token_ids": c.token_ids,
            "logprobs": {"token_logprobs": c.logprobs},
            "raw_logprobs": c.raw_logprobs,
            "finish_reason": c.finish_reason,
            "token_versions": c.versions,
        }
        for i, c in enumerate(completions)
    ]
    return {"choices": choices, "weights_version": version}


class ServedReply(HttpEngine):
    """`HttpEngine` whose POST answers with the scripted reference's completions, ``tamper``ed: everything past the
    wire (parsing, checks, the episode) is the real client's."""

    def __init__(self, env, tamper=None) -> None:
        super().__init__("http://policy.invalid:8000")
        self.reference = load_scripted("reference", env)
        self.tamper = tamper or (lambda reply: reply)

    async def _post(self, body: dict) -> dict:
        params = SamplingParams(max_tokens=body["max_tokens"], stop_token_ids=tuple(body["stop_token_ids"]))
        completions = await self.reference.generate(body["prompt"], params)
        split = [c.model_copy(update={"token_versions": [3] * (len(c.token_ids) // 2) + [4] * (len(c.token_ids) - len(c.token_ids) // 2)}) for c in completions]  # fmt: skip
        return self.tamper(reply_of(split, 4))


def set_versions(value):
    def tamper(reply: dict) -> dict:
        reply["choices"][0]["token_versions"] = value(reply["choices"][0]["token_ids"])
        return reply

    return tamper


TAMPERED = {
    "one_short": lambda ids: [4] * (len(ids) - 1),
    "one_long": lambda ids: [4] * (len(ids) + 1),
    "oversized": lambda ids: [4] * 1_000_000,
    "going_down": lambda ids: [4] * (len(ids) - 1) + [3],
    "newer_than_the_reply": lambda ids: [4] * (len(ids) - 1) + [5],
    "negative": lambda ids: [-1] * len(ids),
    "strings": lambda ids: ["4"] * len(ids),
    "floats": lambda ids: [4.0] * len(ids),
    "booleans": lambda ids: [True] * len(ids),
    "nulls": lambda ids: [None] * len(ids),
    "an_object": lambda ids: {"0": 4},
    "a_number": lambda ids: 4,
}


@pytest.fixture(scope="module")
def env():
    return codecontests_env()


@pytest.fixture(scope="module")
def task(env):
    return next(iter(env.tasks.values()))


def generate(engine: HttpEngine, env, task) -> list[Completion]:
    prompt = env.harmony.render_prompt(env.prompt(task))
    return trio.run(engine.generate, [prompt], SamplingParams(max_tokens=512, stop_token_ids=env.harmony.stop_ids()))


def test_honest_versions_come_through_and_a_reply_without_them_is_one_version(env, task) -> None:
    (completion,) = generate(ServedReply(env), env, task)
    n = len(completion.token_ids)
    assert completion.token_versions == [3] * (n // 2) + [4] * (n - n // 2) and completion.weights_version == 3

    def drop(reply: dict) -> dict:
        del reply["choices"][0]["token_versions"]
        return reply

    (older,) = generate(ServedReply(env, drop), env, task)
    assert older.token_versions is None and older.versions == [4] * n and older.weights_version == 4


@pytest.mark.parametrize("kind", TAMPERED)
def test_tampered_versions_are_an_engine_failure(env, task, kind) -> None:
    started = time.monotonic()
    with pytest.raises(EngineError, match="token_versions") as caught:
        generate(ServedReply(env, set_versions(TAMPERED[kind])), env, task)
    assert "\n" not in str(caught.value) and time.monotonic() - started < 5  # a million items: refused by length


def episode_with(env, task, engine):
    pool = FakePool()
    family = CodeFamily(pool, FakeGrader(env, pool))
    return trio.run(lambda: run_episode(env, engine, family, task, seed=0))


@pytest.mark.parametrize("kind", ["going_down", "newer_than_the_reply", "oversized"])
def test_an_episode_given_tampered_versions_is_masked_not_crashed_nor_scored(env, task, kind) -> None:
    honest = episode_with(env, task, ServedReply(env))
    t = honest.trajectory
    assert not t.masked and t.reward is not None and t.end_reason == "submit"  # the control solves its task
    versions = {v for v in t.token_versions if v is not None}
    assert versions == {3, 4} and t.policy_version == 3
    bad = episode_with(env, task, ServedReply(env, set_versions(TAMPERED[kind])))
    assert bad.trajectory.masked and bad.trajectory.reward is None and bad.trajectory.end_reason == "infra_error"
    assert "token_versions" in bad.infra


def test_a_completion_refuses_versions_that_do_not_fit_its_tokens() -> None:
    base = dict(token_ids=[5, 6, 7], logprobs=[-1.0] * 3, raw_logprobs=[-1.0] * 3, finish_reason="stop")
    assert Completion(**base, weights_version=2, token_versions=[2, 2, 3]).versions == [2, 2, 3]
    for versions, version in (([2, 3], 2), ([2, 3, 2], 2), ([3, 3, 3], 2), ([2, -1, 2], 2), ([2, True, 2], 2)):
        with pytest.raises(ValidationError, match="token_versions"):
            Completion(**base, weights_version=version, token_versions=versions)


@pytest.fixture(scope="module")
def honest_result(env):
    """An honest episode whose turns each span two versions (3 then 4 within every completion)."""
    _, workers, _ = run_workers(env, ServedReply(env), groups=1, group_size=1)
    return workers.results[0]


def test_tampered_trajectory_versions_are_refused_naming_the_field(honest_result, tmp_path) -> None:
    t = honest_result.trajectory
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [t])
    assert next(read_jsonl(path)) == t  # the control
    record = json.loads(path.read_text())
    first = record["sampled"].index(True)
    last_sampled = max(i for i, s in enumerate(record["sampled"]) if s)
    tampered = {
        "a version on a tool result": lambda v: v[: first - 1] + [4] + v[first:],
        "none on a sampled token": lambda v: v[:first] + [None] + v[first + 1 :],
        "going down in a completion": lambda v: v[:last_sampled] + [2] + v[last_sampled + 1 :],
        "older than policy_version": lambda v: [None if x is None else 2 for x in v],
        "one short": lambda v: v[:-1],
        "a string": lambda v: v[:first] + ["3"] + v[first + 1 :],
    }
    for what, change in tampered.items():
        path.write_text(json.dumps({**record, "token_versions": change(record["token_versions"])}) + "\n")
        with pytest.raises(TrajectoryError, match="token_versions") as caught:
            list(read_jsonl(path))
        assert "t.jsonl:1: not a trajectory" in str(caught.value), (what, caught.value)


def test_tampered_bundle_versions_are_refused_and_old_bundles_still_replay(env, honest_result, tmp_path) -> None:
    bundle = bundle_of(env, honest_result, "sampled", "")
    data = json.loads(bundle.model_dump_json())
    versions = data["trajectory"]["token_versions"]
    last = max(i for i, v in enumerate(versions) if v is not None)
    data["trajectory"]["token_versions"] = versions[:last] + [0] + versions[last + 1 :]
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"trajectory\.token_versions: .*within one completion"):
        read_bundle(path)
    honest = read_bundle(write_bundle(tmp_path / "honest.json", bundle))
    old_data = json.loads(bundle.model_dump_json())
    del old_data["trajectory"]["token_versions"]  # a bundle written before the field existed
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(old_data))
    old = read_bundle(old_path)
    assert old.trajectory.token_versions is None and old.trajectory.policy_version == 3
    for again in (honest, old):
        assert consistency(again) == ([], [])
        pool = FakePool()
        family = CodeFamily(pool, FakeGrader(env, pool))
        report = trio.run(lambda b=again, f=family: replay(b, f, path="b.json"))
        assert report.identical, report.differences


def test_an_old_trajectory_line_reads_as_one_version(honest_result, tmp_path: Path) -> None:
    record = json.loads(honest_result.trajectory.model_dump_json())
    del record["token_versions"]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (old,) = read_jsonl(path)
    assert isinstance(old, Trajectory) and old.token_versions is None and old.policy_version == 3
