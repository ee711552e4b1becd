"""Attacks on the episode and tool layer as a policy would sample them: tool names, argument texts and bytes
that must end as scored data on the trajectory, never as an exception past the episode and never as a
masked ``infra_error`` (only the engine, the daemon or the host may mask an episode).

Each case is a whole episode: the hostile call is sampled (rendered to Harmony tokens and parsed back as a
policy's turn would be), run on the in-memory workspace, recorded, and the trajectory and its replay
records are serialised as a rollout writes them."""

from __future__ import annotations

import json

import pytest
import trio

from gym.episode import run_episode
from gym.tools import ToolCallRecord
from policies.sampling import Completion
from sandbox.failure import FailureKind
from tasks.family import CodeFamily
from tests.fakes import FakeGrader, FakePool, make_env

DEEP = 40  # past MAX_ARGUMENT_DEPTH (32), well inside the interpreter's stack

# (recipient, arguments text as sampled)
HOSTILE_CALLS = [
    ("functions.python", '{"code": "' + "A" * 20_000 + '"}'),
    ("functions.python", "[" * 5_000),
    ("functions.python", '{"code": ' + "[" * DEEP + "]" * DEEP + "}"),
    ("functions.python", '{"code": "1", "timeout": NaN}'),
    ("functions.python", '{"code": "1", "timeout": Infinity}'),
    ("functions.python", '{"code": "1", "timeout": -Infinity}'),
    ("functions.python", '{"code": "1", "timeout": 1e999}'),
    ("functions.python", '{"code": "1", "timeout": 1' + "0" * 5_000 + "}"),
    ("functions.python", '{"code": "1", "timeout": true}'),
    ("functions.python", '{"code": "\\ud800"}'),
    ("functions.python", '{"code": "1", "stdin": "\\udcff"}'),
    ("functions.python", '{"\\ud800": 1}'),
    ("functions.python", '{"code": "1", "code": "2"}'),
    ("functions.python", '{"code": ["a"]}'),
    ("functions.python", "null"),
    ("functions.python", '"code"'),
    ("functions.python", ""),
    ("functions.python", "{"),
    ("functions.python", "\x00"),
    ("functions.python", '{"code": "\\u0000"}'),
    ("functions.python", '{"code": "\ufffd\ufffd"}'),
    ("functions.write_file", '{"path": "\\ud800", "content": "x"}'),
    ("functions.write_file", '{"path": "a\\u0000b", "content": "x"}'),
    ("functions.write_file", '{"path": "", "content": "x"}'),
    ("functions.write_file", '{"path": "/etc/passwd", "content": "x"}'),
    ("functions.write_file", '{"path": "../../x", "content": "x"}'),
    ("functions.write_file", '{"path": "' + "d/" * 2_000 + 'x", "content": "x"}'),
    ("functions.write_file", '{"path": "a", "content": "\\udfff"}'),
    ("functions.read_file", '{"path": "\\ud800"}'),
    ("functions.view", '{"path": "a", "start_line": 1e400}'),
    ("functions.view", '{"path": "a", "start_line": 99999999999999999999999}'),
    ("functions.search", '{"pattern": "\\ud800"}'),
    ("functions.search", '{"pattern": "(", "glob": "a/b"}'),
    ("functions.apply_patch", '{"patch": "--- \\ud800\\n+++ \\ud800\\n"}'),
    ("functions.apply_patch", '{"patch": "--- /etc/passwd\\n+++ /etc/passwd\\n"}'),
    ("functions.list_dir", '{"path": {"$ref": "x"}}'),
    ("functions.submit", '{"path": "../../etc/shadow"}'),
    ("functions.submit", '{"path": "\\ud800"}'),
    ("functions.python.extra", '{"code": "1"}'),
    ("functions.", "{}"),
    ("browser.open", '{"url": "http://x"}'),
    ("functions.submit_", "{}"),
]


class SampledEngine:
    """Samples the same ids every turn: a tool call whose header and arguments are whatever the policy wrote,
    built from tokens (a header no `Message` would accept, such as ``to=functions.``, included)."""

    def __init__(self, env, recipient: str, content: str) -> None:
        special, encode = env.harmony.ids, env.tokenizer.encode
        self.ids = [special["channel"], *encode(f"commentary to={recipient} "), special["constrain"]]
        self.ids += [*encode("json"), special["message"], *encode(content), special["call"]]

    async def generate(self, prompts, params):
        ids = self.ids[: params.max_tokens]
        lps = [-0.5] * len(ids)
        return [Completion(token_ids=ids, logprobs=lps, raw_logprobs=lps, finish_reason="stop", weights_version=0)]


def _episode(recipient: str, content: str):
    env = make_env(episode={"max_turns": 2, "max_tokens_per_turn": 8192, "on_parse_error": "continue"})
    pool = FakePool()
    grader = FakeGrader(env, pool)
    task = next(iter(env.tasks.values()))
    engine = SampledEngine(env, recipient, content)
    result = trio.run(lambda: run_episode(env, engine, CodeFamily(pool, grader), task, seed=3))
    return result, pool


@pytest.mark.parametrize(("recipient", "content"), HOSTILE_CALLS, ids=[ascii(c[:24]) for _, c in HOSTILE_CALLS])
def test_a_hostile_call_is_scored_data_never_an_exception_or_a_mask(recipient, content):
    result, pool = _episode(recipient, content)
    trajectory = result.trajectory
    assert not trajectory.masked and trajectory.end_reason != "infra_error" and not result.infra
    assert trajectory.reward is not None and FailureKind.INFRA_ERROR not in trajectory.failures
    assert pool.acquired == pool.released <= 1  # a call the toolbox refuses starts no workspace
    json.loads(trajectory.model_dump_json())  # what the rollout writes: every observation encodes
    for record in result.tool_calls:
        assert record.outcome.failure != FailureKind.INFRA_ERROR
        again = ToolCallRecord.model_validate_json(record.model_dump_json())  # a replay bundle round trip
        assert again.call().raw == record.arguments


def test_the_table_reaches_every_layer():
    """The cases are not all stopped at one gate: some fail to parse, some fail validation, some run."""
    ends = {}
    for recipient, content in HOSTILE_CALLS:
        result, _ = _episode(recipient, content)
        kinds = {f.value for f in result.trajectory.failures}
        ends[recipient, content[:40]] = kinds
    seen = set().union(*ends.values())
    assert {"parse_error", "tool_error", "sandbox_denied"} <= seen, seen
    assert any(not kinds - {"ok"} for kinds in ends.values())  # and some calls simply run
