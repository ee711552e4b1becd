"""The vLLM rollout engine's logic without vLLM (policies/vllm_engine.py, policies/vllm_server.py, the config).

A reply that lies (wrong lengths, fields missing, logprobs not finite or above 0, ids outside the vocabulary,
another prompt echoed, a stop id in the middle, an aborted request) is refused by `completion_of`, and through a
tiny real HTTP server that answers with it, `VllmEngine.generate` raises `EngineError` (what masks an episode) and
an episode on it ends masked, never scored. The weights gate drains, tags and moves versions as documented; the
admin calls name their route and the fix; the config names its field. The real server: tests/integration/
test_vllm_engine.py.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

from policies.sampling import EngineError, SamplingParams
from policies.vllm_engine import VllmEngine, WeightsGate, completion_of
from policies.vllm_server import VllmAdmin, VllmAdminError, forced_flag
from trainer.config import RolloutEngineConfig
from trainer.errors import ConfigError

PROMPT = [1, 2, 3]
PARAMS = SamplingParams(max_tokens=4, temperature=1.0, stop_token_ids=(9,))


def honest() -> dict:
    """A /v1/completions reply as vLLM 0.32 writes it (return_token_ids, logprobs 0), trimmed to what we read."""
    return {
        "choices": [
            {
                "index": 0,
                "text": "",
                "logprobs": {
                    "token_logprobs": [-0.5, -1.25, -0.1],
                    "tokens": ["token_id:5", "token_id:6", "token_id:9"],
                },
                "finish_reason": "stop",
                "stop_reason": 9,
                "token_ids": [5, 6, 9],
                "prompt_token_ids": [1, 2, 3],
            }
        ]
    }


def lie(path: tuple, value) -> dict:
    """The honest reply with the field at ``path`` set to ``value`` (``...`` removes it)."""
    reply = copy.deepcopy(honest())
    node = reply
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return reply


LIES = {
    "no choices": ({"object": "error"}, "one choice"),
    "two choices": ({"choices": honest()["choices"] * 2}, "one choice"),
    "token_ids missing": (lie(("choices", 0, "token_ids"), ...), "token_ids must be a list"),
    "token_ids of strings": (lie(("choices", 0, "token_ids"), ["5", "6", "9"]), "token_ids must be a list"),
    "a bool id": (lie(("choices", 0, "token_ids"), [True, 6, 9]), "token_ids must be a list"),
    "id outside the vocabulary": (lie(("choices", 0, "token_ids"), [5, 100, 9]), "outside the vocabulary"),
    "negative id": (lie(("choices", 0, "token_ids"), [5, -1, 9]), "outside the vocabulary"),
    "more ids than max_tokens": (lie(("choices", 0, "token_ids"), [5, 6, 7, 8, 9]), "for max_tokens=4"),
    "no ids": (lie(("choices", 0, "token_ids"), []), "0 sampled ids"),
    "fewer logprobs than ids": (lie(("choices", 0, "logprobs", "token_logprobs"), [-0.5, -1.0]), "one logprob per"),
    "logprobs missing": (lie(("choices", 0, "logprobs"), None), "one logprob per"),
    "NaN logprob": (lie(("choices", 0, "logprobs", "token_logprobs"), [-0.5, float("nan"), -0.1]), "not a finite"),
    "inf logprob": (lie(("choices", 0, "logprobs", "token_logprobs"), [-0.5, float("-inf"), -0.1]), "not a finite"),
    "positive logprob": (lie(("choices", 0, "logprobs", "token_logprobs"), [-0.5, 0.7, -0.1]), "not a finite"),
    "string logprob": (lie(("choices", 0, "logprobs", "token_logprobs"), [-0.5, "-1", -0.1]), "not a finite"),
    "another prompt": (lie(("choices", 0, "prompt_token_ids"), [1, 2, 4]), "not the prompt sent"),
    "stop without a stop id": (lie(("choices", 0, "token_ids"), [5, 6, 7]), "not a stop id"),
    "a stop id in the middle": (
        lie(("choices", 0, "token_ids"), [9, 6, 9]),
        "stop id was sampled before the end",
    ),
    "aborted": (lie(("choices", 0, "finish_reason"), "abort"), "did not finish"),
    "finish missing": (lie(("choices", 0, "finish_reason"), ...), "did not finish"),
}


def test_an_honest_reply_is_the_completion_it_states():
    c = completion_of(honest(), PROMPT, PARAMS, version=3, vocab_size=10)
    assert c.token_ids == [5, 6, 9] and c.finish_reason == "stop" and c.weights_version == 3
    assert c.logprobs == c.raw_logprobs == [-0.5, -1.25, -0.1]
    assert c.versions == [3, 3, 3]
    greedy = completion_of(honest(), PROMPT, PARAMS.model_copy(update={"temperature": 0.0}), 0, 10)
    assert greedy.logprobs == [0.0, 0.0, 0.0] and greedy.raw_logprobs == [-0.5, -1.25, -0.1]  # our greedy convention


@pytest.mark.parametrize("name", sorted(LIES))
def test_a_lying_reply_is_refused_naming_the_lie(name):
    reply, says = LIES[name]
    with pytest.raises(ValueError, match=says):
        completion_of(json.loads(json.dumps(reply)), PROMPT, PARAMS, version=0, vocab_size=10)


@contextmanager
def fake_vllm(reply: dict, processed: bool = True) -> Iterator[tuple[str, list[dict]]]:
    """A threaded HTTP server answering every /v1/completions with ``reply``, and the logprobs-mode probe (a request
    for 5 top logprobs) with top logprobs that follow its temperature when ``processed``, else equal ones (raw
    logprobs do not see the temperature); its URL and the request bodies it got."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            answer = reply
            if body.get("logprobs") == 5:
                scale = 1.0 / body["temperature"] if processed else 1.0
                top = {"token_id:1": -0.1 * scale, "token_id:2": -3.0 * scale}
                answer = {"choices": [{"logprobs": {"top_logprobs": [top]}}]}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_the_engine_asks_for_every_knob_and_tags_the_gates_version():
    with fake_vllm(honest()) as (url, bodies):
        engine = VllmEngine(url, vocab_size=10, gate=WeightsGate(version=7))
        [c] = trio.run(engine.generate, [PROMPT], PARAMS.model_copy(update={"seed": 11}))
    assert c.weights_version == 7 and c.token_ids == [5, 6, 9] and engine.logprobs_mode == "processed"
    body = bodies[-1]
    assert body["prompt"] == PROMPT and body["seed"] == 11 and body["stop_token_ids"] == [9]
    assert body["return_token_ids"] and body["ignore_eos"] and body["logprobs"] == 0 and body["top_k"] == -1
    assert body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0 and body["n"] == 1
    assert engine.gate.in_flight == 0
    with fake_vllm(honest()) as (url, bodies):
        engine = VllmEngine(url, vocab_size=10)
        two = trio.run(engine.generate, [PROMPT, PROMPT], PARAMS.model_copy(update={"seed": 11}))
    assert len(two) == 2 and sorted(b["seed"] for b in bodies if "seed" in b and b["logprobs"] == 0) == [11, 12]


@pytest.mark.parametrize("name", ["id outside the vocabulary", "NaN logprob", "fewer logprobs than ids", "aborted"])
def test_a_lying_server_is_an_engine_error(name):
    with fake_vllm(LIES[name][0]) as (url, _):
        engine = VllmEngine(url, vocab_size=10)
        with pytest.raises(EngineError, match="reply is not a completion"):
            trio.run(engine.generate, [PROMPT], PARAMS)
        with pytest.raises(EngineError, match="reply is not a completion"):  # several prompts: the same error
            trio.run(engine.generate, [PROMPT, PROMPT], PARAMS)
        assert engine.gate.in_flight == 0  # the gate is left even when the reply is refused


def test_an_episode_on_a_lying_server_is_masked_not_scored():
    from gym.episode import run_episode
    from tasks.family import CodeFamily
    from tests.fakes import FakeGrader, FakePool, make_env

    env = make_env(tools={"enabled": ["submit"]}, episode={"max_turns": 1, "max_tokens_per_turn": 4})
    task = env.tasks[next(iter(env.tasks))]
    pool = FakePool()
    with fake_vllm(LIES["id outside the vocabulary"][0]) as (url, _):
        engine = VllmEngine(url, vocab_size=10)

        async def main():
            return await run_episode(env, engine, CodeFamily(pool, FakeGrader(env, pool)), task, seed=0)

        result = trio.run(main)
    t = result.trajectory
    assert t.masked and t.reward is None and t.end_reason == "infra_error"


def test_a_raw_logprobs_server_is_refused_for_sampling_it_cannot_describe():
    with fake_vllm(honest(), processed=False) as (url, _):
        engine = VllmEngine(url, vocab_size=10)
        with pytest.raises(EngineError, match="processed_logprobs"):
            trio.run(engine.generate, [PROMPT], PARAMS.model_copy(update={"temperature": 0.7}))
        assert engine.logprobs_mode == "raw"  # asked on the first call
        [c] = trio.run(engine.generate, [PROMPT], PARAMS)  # temperature 1, nothing cut: raw is the behaviour
        assert c.logprobs == [-0.5, -1.25, -0.1]


def test_the_gate_drains_before_a_push_and_moves_the_version_only_when_it_succeeds():
    gate = WeightsGate(version=2)
    assert gate.enter() == 2  # a request in flight
    order = []

    def push():
        with gate.push(3, drain=True, timeout_s=5):
            order.append(("pushing", gate.in_flight))

    thread = threading.Thread(target=push)
    thread.start()
    time.sleep(0.1)
    assert gate.enter() is None  # closed while it drains: new requests wait
    assert not order
    gate.leave()
    thread.join(5)
    assert order == [("pushing", 0)] and gate.version == 3 and gate.enter() == 3
    gate.leave()
    with pytest.raises(RuntimeError), gate.push(4, drain=True, timeout_s=1):
        raise RuntimeError("reload failed")
    assert gate.version == 3 and gate.enter() == 3  # reopened, still the old version
    with pytest.raises(TimeoutError, match="1 request"), gate.push(4, drain=True, timeout_s=0.1):
        pass
    assert gate.enter() == 3  # a drain that timed out reopens the gate
    with gate.push(4, drain=False, timeout_s=0.1):  # partial rollouts: requests keep entering under the old one
        assert gate.enter() == 3
    assert gate.version == 4 and gate.in_flight == 3


def test_admin_calls_name_the_route_and_the_fix():
    class NoRoutes(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoRoutes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        admin = VllmAdmin(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
        with pytest.raises(VllmAdminError, match="/pause: 404.*VLLM_SERVER_DEV_MODE=1"):
            admin.reload(Path("/nonexistent"), drain=True)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(VllmAdminError, match="/pause: ConnectError"):
        VllmAdmin("http://127.0.0.1:9", timeout_s=2).reload(Path("/nonexistent"), drain=True)


def test_the_engine_config_names_its_field(tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    assert RolloutEngineConfig(type="vllm", url="http://h:8000").url == "http://h:8000"
    assert RolloutEngineConfig(type="vllm", vllm={"python": str(python), "args": ["--dtype", "float32"]}).vllm
    bad = [
        ({"type": "vllm"}, "exactly one"),
        ({"type": "vllm", "url": "http://h:1", "vllm": {"python": str(python)}}, "exactly one"),
        ({"type": "http"}, "url is required"),
        ({"type": "in_process", "url": "http://h:1"}, "url is for"),
        ({"weights_dir": "w"}, "weights_dir: only with type: vllm"),
        ({"type": "vllm", "vllm": {"python": str(tmp_path / "none")}}, "is not a file"),
        ({"type": "vllm", "vllm": {"python": str(python), "args": ["--port=9"]}}, "--port is set by the launcher"),
    ]
    from sandbox.config_file import validate_config

    for data, says in bad:
        with pytest.raises(ConfigError, match=says) as err:
            validate_config(RolloutEngineConfig, data, "engine", ConfigError)
        assert "engine" in str(err.value)
    assert forced_flag(["--dtype", "float32", "--logprobs-mode", "raw_logprobs"]) == "--logprobs-mode"
    assert forced_flag(["--max-model-len", "64"]) is None


def test_the_vllm_policy_spec_loads_the_engine():
    from gym.policy_client import PolicySpecError, load_engine
    from tests.fakes import make_env

    env = make_env()
    engine = load_engine("vllm:http://127.0.0.1:8000", env)
    assert isinstance(engine, VllmEngine) and engine.vocab_size == env.tokenizer.vocab_size
    with pytest.raises(PolicySpecError, match="names no host.*vllm:http"):
        load_engine("vllm:", env)
    with pytest.raises(PolicySpecError, match="names no host"):
        load_engine("vllm:nohost", env)


def test_a_launched_server_that_exits_is_an_error_quoting_its_log(tmp_path):
    from policies.vllm_server import VllmServer

    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "vllm: error: unrecognized arguments: $*" >&2\nexit 2\n')
    python.chmod(0o755)
    server = VllmServer(python, tmp_path / "model", ["--bogus"], log_path=tmp_path / "server.log")
    assert server.env["VLLM_SERVER_DEV_MODE"] == "1" and "--logprobs-mode" in server.command
    started = time.monotonic()
    with pytest.raises(VllmAdminError, match=r"exited with code 2 before /health(.|\n)*unrecognized arguments"):
        server.start(timeout_s=30)
    assert time.monotonic() - started < 10 and server.process is None
    server.stop()  # idempotent


def test_a_training_config_names_what_vllm_cannot_do(tmp_path):
    from tests.trainer_support import config_data
    from trainer.config import TrainConfig
    from trainer.loop import train

    data = config_data(tmp_path / "run", bound=1.0)
    data["engine"] = {"type": "vllm", "url": "http://127.0.0.1:9"}
    with pytest.raises(ConfigError, match="engine.type: vllm serves a Hugging Face policy"):
        TrainConfig.parse(data, source="test")  # the RDEP MoE policy samples on our engine
    data["policy"] = {"type": "hf", "path": str(tmp_path / "qwen")}
    config = TrainConfig.parse(data, source="test")
    with pytest.raises(ConfigError, match="--ray's nodes take engine.type in_process or http"):
        train(config, ray="")
