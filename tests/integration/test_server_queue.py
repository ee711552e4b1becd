"""The server's bounded queue (503 beyond it), request batching and engine failures, on a real
loopback aiohttp server in this process, with the deterministic ScriptedEngine behind it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp.test_utils import TestServer

from policies.fake_engine import ScriptedEngine
from policies.serve_config import ServerOptions
from policies.server import PolicyServer


async def _post_many(server: PolicyServer, count: int, body: dict) -> list[tuple[int, dict]]:
    async with TestServer(server.app(), host="127.0.0.1") as test_server:
        async with aiohttp.ClientSession() as session:

            async def one() -> tuple[int, dict]:
                async with session.post(test_server.make_url("/v1/completions"), json=body) as response:
                    return response.status, await response.json()

            results = await asyncio.gather(*(one() for _ in range(count)))
            results.append(await one())  # once the burst is over the server answers again
            return results


def test_overload_answers_503_beyond_the_bounded_queue() -> None:
    engine = ScriptedEngine(delay_s=0.3, max_batch_size=1)
    server = PolicyServer(engine, ServerOptions(max_queued_requests=2))
    results = asyncio.run(_post_many(server, 10, {"prompt": [1, 2], "max_tokens": 2}))
    burst, after = results[:-1], results[-1]
    statuses = [status for status, _ in burst]
    assert statuses.count(503) >= 10 - 3  # at most one in flight + two queued
    assert statuses.count(200) >= 2
    assert all("overloaded" in body["error"]["message"] for status, body in burst if status == 503)
    assert after[0] == 200 and after[1]["choices"][0]["token_ids"] == [12, 13]


def test_queued_requests_are_batched_together() -> None:
    engine = ScriptedEngine(delay_s=0.3, max_batch_size=4)
    server = PolicyServer(engine, ServerOptions(max_queued_requests=16))
    results = asyncio.run(_post_many(server, 9, {"prompt": [1], "max_tokens": 1}))
    assert all(status == 200 for status, _ in results)
    assert max(engine.batches) > 1 and max(engine.batches) <= 4  # merged, never past max_batch_size
    assert sum(engine.batches) == 10


def test_engine_failure_is_a_500_not_a_hang() -> None:
    class Broken(ScriptedEngine):
        def generate_batch(self, prompts, params):
            raise RuntimeError("engine exploded")

    server = PolicyServer(Broken(), ServerOptions())
    results = asyncio.run(_post_many(server, 2, {"prompt": [1], "max_tokens": 1}))
    assert [status for status, _ in results] == [500, 500, 500]
    assert all("engine exploded" in body["error"]["message"] for _, body in results)


async def _post_mixed(server: PolicyServer, bodies: list[object], delay_s: float = 0.0) -> list[tuple[int, dict]]:
    """Bodies posted at once (a dict as JSON, bytes as is); statuses and JSON answers in order."""
    async with TestServer(server.app(), host="127.0.0.1") as test_server:
        async with aiohttp.ClientSession() as session:

            async def one(body: object) -> tuple[int, dict]:
                kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
                async with session.post(test_server.make_url("/v1/completions"), **kwargs) as response:
                    return response.status, await response.json()

            return list(await asyncio.gather(*(one(b) for b in bodies)))


def test_a_seed_past_64_bits_fails_only_its_own_request() -> None:
    engine = ScriptedEngine(delay_s=0.2, max_batch_size=8)
    server = PolicyServer(engine, ServerOptions())
    honest = {"prompt": [1], "max_tokens": 1, "seed": 7}
    results = asyncio.run(_post_mixed(server, [honest, {"prompt": [1], "max_tokens": 1, "seed": 1 << 70}, honest]))
    assert [status for status, _ in results] == [200, 400, 200]
    assert "seed" in results[1][1]["error"]["message"]


def test_one_job_the_engine_cannot_run_does_not_fail_its_batch_neighbours() -> None:
    class Picky(ScriptedEngine):
        def generate_batch(self, prompts, params):
            if [3] in prompts:
                raise RuntimeError("cannot run prompt [3]")
            return super().generate_batch(prompts, params)

    server = PolicyServer(Picky(delay_s=0.2, max_batch_size=8), ServerOptions())
    bodies = [{"prompt": [p], "max_tokens": 1} for p in (1, 3, 2)]
    results = asyncio.run(_post_mixed(server, bodies))
    assert [status for status, _ in results] == [200, 500, 200], results


def test_requests_are_bounded_in_sequences_and_body_size() -> None:
    server = PolicyServer(
        ScriptedEngine(max_batch_size=4), ServerOptions(max_sequences_per_request=16, max_json_body_bytes=64 << 10)
    )
    many = {"prompt": [[1]] * 8, "n": 4, "max_tokens": 1}
    huge = b'{"prompt": [' + b"1, " * (40 << 10) + b'1], "max_tokens": 1}'
    deep = b'{"prompt": ' + b"[" * 20000 + b"]" * 20000 + b"}"  # under the size bound, past the parser's depth
    results = asyncio.run(_post_mixed(server, [many, huge, deep, {"prompt": [[1]] * 4, "n": 4, "max_tokens": 1}]))
    statuses = [status for status, _ in results]
    assert statuses == [400, 413, 400, 200], results
    assert "max_sequences_per_request" in results[0][1]["error"]["message"]
    assert "max_json_body_bytes" in results[1][1]["error"]["message"]


async def _until(condition, what: str, timeout_s: float = 30.0) -> None:
    """Poll `condition` every 5 ms; fail naming `what` after timeout_s (a test never waits without a bound)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        await asyncio.sleep(0.005)


def test_a_continuous_engine_answers_a_short_request_before_a_long_one_that_came_first() -> None:
    """The long request is handed over first, the short one once the long one runs, a third while both run (503).

    The engine takes no step until the third has its answer (a gate in its forward): an earlier version sent the
    requests after fixed delays and then waited, without a bound, for two to run at once, which under load never
    happened when one had finished before the other arrived (the suite hung)."""
    import threading

    from policies.generation import GenerationEngine
    from policies.hf_adapter import CausalLMPolicy
    from tests.policy_support import small_model

    gate = threading.Event()

    class Gated(CausalLMPolicy):  # no forward before the gate opens, then 20 ms each: the long one runs ~2 s
        def step(self, *args, **kwargs):
            if not gate.wait(timeout=60):
                raise RuntimeError("the test never opened the engine's gate")
            time.sleep(0.02)
            return super().step(*args, **kwargs)

    engine = GenerationEngine(Gated(small_model()), max_batch_size=8)
    assert engine.continuous
    server = PolicyServer(engine, ServerOptions(max_queued_requests=2))
    finished: list[str] = []

    async def scenario() -> list[tuple[int, dict]]:
        async with TestServer(server.app(), host="127.0.0.1") as test_server:
            async with aiohttp.ClientSession() as session:

                async def one(name: str, body: dict) -> tuple[int, dict]:
                    async with session.post(test_server.make_url("/v1/completions"), json=body) as response:
                        result = response.status, await response.json()
                    finished.append(name)
                    return result

                try:
                    long = asyncio.ensure_future(one("long", {"prompt": [1, 2, 3], "max_tokens": 100, "seed": 1}))
                    await _until(lambda: server._inflight >= 1, "the long request to reach the engine")
                    short = asyncio.ensure_future(one("short", {"prompt": [4, 5], "max_tokens": 40, "seed": 2}))
                    await _until(lambda: server._inflight >= 2, "the short request to reach the engine")
                    over = await one("over", {"prompt": [6], "max_tokens": 2, "seed": 3})  # a third while two run
                finally:
                    gate.set()
                return [await long, await short, over]

    (long_status, long_body), (short_status, short_body), (over_status, _) = asyncio.run(
        asyncio.wait_for(scenario(), timeout=120)
    )
    assert (long_status, short_status, over_status) == (200, 200, 503)
    assert finished.index("short") < finished.index("long")
    alone = GenerationEngine(CausalLMPolicy(small_model()), mode="kv_cache")
    from policies.sampling import SamplingParams

    for body, prompt, n, seed in ((long_body, [1, 2, 3], 100, 1), (short_body, [4, 5], 40, 2)):
        expected = alone.generate_batch([prompt], [SamplingParams(max_tokens=n, seed=seed)])[0].token_ids
        assert body["choices"][0]["token_ids"] == expected


def test_weight_updates_run_one_at_a_time_and_to_their_end_when_the_client_goes_away() -> None:
    """A second update waiting read_timeout_s for a running one is a 503; an update whose client goes away is
    still loaded to its end before the next one starts (its handler is cancelled, not the load), so versions
    load in the order they were asked for (an outside review: the lock was released while the load ran)."""
    import threading

    release = threading.Event()
    loaded: list[int | None] = []

    class SlowLoads(ScriptedEngine):
        def load_safetensors(self, data: bytes, version: int | None = None) -> int:
            release.wait(timeout=60)
            loaded.append(version)
            return super().load_safetensors(data, version)

    engine = SlowLoads()
    server = PolicyServer(engine, ServerOptions(read_timeout_s=0.5))

    async def scenario() -> tuple[int, int, int]:
        async with TestServer(server.app(), host="127.0.0.1", handler_cancellation=True) as test_server:
            async with aiohttp.ClientSession() as session:
                url = test_server.make_url("/update_weights_from_tensors")

                async def upload(version: int) -> int:
                    async with session.post(f"{url}?version={version}", data=b"tensors") as response:
                        return response.status

                first = asyncio.ensure_future(upload(5))
                await asyncio.sleep(0.2)  # the first is loading (blocked)
                waiting = await upload(6)  # waits 0.5 s for the lock: 503
                first.cancel()  # its client goes away mid-load
                await asyncio.gather(first, return_exceptions=True)
                await asyncio.sleep(0.2)
                blocked_version = engine.weights_version  # still loading: not 5 yet
                release.set()
                third = await upload(7)  # starts once the first has loaded
                return waiting, blocked_version, third

    waiting, blocked_version, third = asyncio.run(scenario())
    assert waiting == 503 and blocked_version == 0 and third == 200
    assert loaded == [5, 7] and engine.weights_version == 7
