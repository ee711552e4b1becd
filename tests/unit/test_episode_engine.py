"""Policy specs and engines without a model: spec parsing, the HTTP request body, the in-process
adapter over a fake engine, the scripted reference policy, and that the gym never imports torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import trio

from gym.format.harmony import ParsedTurn
from gym.policy_client import HttpEngine, InProcessEngine, load_engine
from gym.scripted import ReferencePolicy, load_scripted
from policies.fake_engine import ScriptedEngine
from policies.sampling import SamplingParams
from tests.fakes import make_env


@pytest.fixture(scope="module")
def env():
    return make_env()


def test_policy_specs(env):
    assert isinstance(load_engine("scripted:reference", env), ReferencePolicy)
    http = load_engine("http://127.0.0.1:8000/", env)
    assert isinstance(http, HttpEngine) and http.url == "http://127.0.0.1:8000"
    for spec, message in (
        ("gpt", "unknown policy spec"),
        ("vllm:x", "names no host.*vllm:http://HOST:PORT"),
        ("sglang:x", "unknown policy spec"),
        ("scripted:random", "unknown scripted policy"),
        ("checkpoint:", "needs a directory"),
    ):
        with pytest.raises(ValueError, match=message):
            load_engine(spec, env)


def test_http_request_body_carries_every_sampling_setting():
    params = SamplingParams(max_tokens=7, temperature=0.5, top_p=0.9, top_k=4, stop_token_ids=(3, 5), seed=11)
    body = HttpEngine("http://h:1").request_body([[1, 2]], params)
    assert body == {
        "prompt": [[1, 2]],
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 4,
        "stop_token_ids": [3, 5],
        "return_routed_experts": False,
        "seed": 11,
    }
    assert "seed" not in HttpEngine("http://h:1").request_body([[1]], SamplingParams())


def test_in_process_adapter_runs_a_sync_engine_under_trio():
    fake = ScriptedEngine(script=[10, 11, 12, 13], logprob=-0.25)
    fake.weights_version = 4
    engine = InProcessEngine(fake)
    params = SamplingParams(max_tokens=8, stop_token_ids=(12,))
    out = trio.run(engine.generate, [[1, 2, 3], [1]], params)
    assert [c.token_ids for c in out] == [[13, 10, 11, 12], [11, 12]]
    assert all(c.finish_reason == "stop" and c.weights_version == 4 and set(c.logprobs) == {-0.25} for c in out)


def test_reference_policy_turns_are_valid_harmony_with_zero_logprobs(env):
    policy = load_scripted("reference", env)
    task = next(iter(env.tasks.values()))
    params = env.sampling(max_tokens=4096, seed=0)
    context = env.harmony.render_prompt(env.prompt(task))
    completion = policy.complete(context, params)
    turn = env.harmony.parse_completion(completion.token_ids)
    assert isinstance(turn, ParsedTurn) and turn.canonical and turn.tool_call.name == "write_file"
    assert turn.tool_call.arguments["content"] == env.reference_programs()[task.task_id]
    assert completion.finish_reason == "stop" and set(completion.logprobs) == {0.0}
    cut = policy.complete(context, params.model_copy(update={"max_tokens": 5}))
    assert len(cut.token_ids) == 5 and cut.finish_reason == "length"


def test_reference_policy_refuses_what_it_cannot_do(env):
    policy = load_scripted("reference", env)
    with pytest.raises(ValueError, match="does not know the task"):
        policy.complete(env.harmony.render_prompt([env.prompt(next(iter(env.tasks.values())))[0]]), SamplingParams())
    with pytest.raises(ValueError, match=re.escape("end with <|start|>assistant")):
        policy.complete(env.harmony.render(env.prompt(next(iter(env.tasks.values())))), SamplingParams())
    with pytest.raises(ValueError, match="needs a reference solution"):
        ReferencePolicy(env.harmony, env.tasks, {}, {})


def test_gym_imports_no_torch():
    modules = [
        "gym.policy_client",
        "gym.episode",
        "gym.environment",
        "gym.rollout",
        "gym.replay",
        "gym.scripted",
        "gym.commands.rollout",
        "gym.commands.replay",
        "gym.commands.show",
        "gym.bench.rollout",
    ]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nassert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("tools", "calls"),
    [
        (("bash", "write_file", "submit"), ["write_file", "bash", "submit"]),
        (("write_file", "submit"), ["write_file", "submit"]),
        (("bash", "submit"), ["submit"]),
    ],
)
def test_reference_policy_uses_only_the_tools_the_environment_offers(env, tools, calls):
    task = next(iter(env.tasks.values()))
    policy = ReferencePolicy(env.harmony, env.tasks, env.reference_programs(), {}, tools=tools)
    turns = policy.script(task)
    assert [turn[-1].recipient for turn in turns] == [f"functions.{name}" for name in calls]
    if calls == ["submit"]:  # no write_file: the program itself is submitted
        assert json.loads(turns[0][-1].content) == {"code": env.reference_programs()[task.task_id]}
