"""Rollouts through the real policy server (`policies.server`, aiohttp) with the HTTP client engine.

The served engine is the scripted reference policy behind the server's
`ServingEngine` interface, so the whole path runs for real: concurrent
episodes post token-id prompts to `/v1/completions`, the server batches them,
the trajectories carry the server's weights version, and every episode is
solved in real containers. A server that is down masks episodes (never a
reward of 0).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from gym.environment import Environment
from gym.policy_client import EngineError, HttpEngine
from gym.rollout import collect_async
from gym.scripted import load_scripted
from gym.trajectory import assert_token_exact
from policies.sampling import SamplingParams
from sandbox.pool import WorkspacePool
from tests.fakes import FakeGrader, FakePool
from tests.policy_server_support import ServedReference, serving

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env() -> Environment:
    return Environment.load(ROOT / "configs" / "cp_smoke.yaml")


@pytest.fixture(scope="module")
def served(env) -> Iterator[tuple[str, ServedReference]]:
    engine = ServedReference(env, weights_version=3)
    with serving(engine) as url:
        yield url, engine


def test_http_completions_round_trip(env, served):
    url, _ = served
    task = next(iter(env.tasks.values()))
    prompt = env.harmony.render_prompt(env.prompt(task))
    params = env.sampling(max_tokens=4096, seed=1)
    [completion] = trio.run(HttpEngine(url).generate, [prompt], params)
    expected = load_scripted("reference", env).complete(prompt, params)
    # the server names the version of every token it sampled (partial rollouts), all 3 here
    versions = [3] * len(expected.token_ids)
    assert completion == expected.model_copy(update={"weights_version": 3, "token_versions": versions})


@pytest.mark.docker
@pytest.mark.slow
def test_rollout_over_http_in_real_containers(env, served):
    url, engine = served

    async def main():
        async with WorkspacePool(env.config.sandbox) as pool:
            return await collect_async(env, HttpEngine(url), pool, 3, 2, seed=4)

    trajectories, workers = trio.run(main)
    assert len(trajectories) == 6 and {t.reward for t in trajectories} == {1.0}
    assert {t.policy_version for t in trajectories} == {3} and len({t.group_id for t in trajectories}) == 3
    for t in trajectories:
        assert_token_exact(t, t.messages, env.tokenizer)
    assert sum(engine.batches) >= 18  # 6 episodes x 3 turns went through the server


def test_unreachable_server_masks_episodes(env):
    engine = HttpEngine("http://127.0.0.1:9", timeout_s=5)
    with pytest.raises(EngineError, match="127.0.0.1:9"):
        trio.run(engine.generate, [[1, 2]], SamplingParams())
    pool = FakePool()

    async def main():
        return await collect_async(env, engine, pool, 2, 1, seed=0, grader=FakeGrader(env, pool))

    trajectories, _ = trio.run(main)
    assert [t.masked for t in trajectories] == [True, True] and {t.reward for t in trajectories} == {None}
    assert {t.end_reason for t in trajectories} == {"infra_error"}


def test_server_refusals_are_engine_failures(env, served):
    url, _ = served
    with pytest.raises(EngineError, match="HTTP 400.*prompt is empty"):
        trio.run(HttpEngine(url).generate, [[]], SamplingParams())


def test_a_busy_server_is_waited_out():
    """503 (queue full) is retried after Retry-After; other errors are not."""
    import json as json_module
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = [503, 503, 200]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            code = answers.pop(0)
            body = (
                {"error": "busy"}
                if code == 503
                else {
                    "choices": [
                        {
                            "index": 0,
                            "token_ids": [5],
                            "raw_logprobs": [-0.1],
                            "logprobs": {"token_logprobs": [-0.1]},
                            "finish_reason": "length",
                        }
                    ],
                    "weights_version": 2,
                }
            )
            data = json_module.dumps(body).encode()
            self.send_response(code)
            self.send_header("Retry-After", "0.05")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        [completion] = trio.run(HttpEngine(url).generate, [[1]], SamplingParams())
        assert completion.token_ids == [5] and completion.weights_version == 2 and answers == []
        answers.extend([503, 503])
        with pytest.raises(EngineError, match="HTTP 503"):
            trio.run(HttpEngine(url, busy_retries=1).generate, [[1]], SamplingParams())
    finally:
        server.shutdown()
