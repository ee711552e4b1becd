"""Attacks on what the policy server allocates before it checks (issue 41, class 6), against a real `python -m gym
serve` process on 127.0.0.1: the CPU policy, a process verifier on /v1/score and a tokenizer, default bounds.

Each attack measures the server process itself: its peak RSS growth (VmHWM after the attack, reset through
/proc/PID/clear_refs, less VmRSS before) and the slowest /health answer while the attack runs. Each is beside an
honest control that must still be served. The figures before and after the fix are in the commit that added
this file (policies/request_bounds.py, policies/admission.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest
import requests
import yaml
from aiohttp.test_utils import TestServer

from policies.fake_engine import ScriptedEngine
from policies.serve_config import ServerOptions
from policies.server import PolicyServer
from tests.listen_support import BURST, queued_while_stopped
from tests.policy_support import small_model
from tests.serve_support import MODEL, start_server, stop_server
from tests.tokenizer_support import train_tokenizer
from trainer.verifier_train import save_checkpoint

META = {"label_ids": [10, 11], "step_prefix": [5, 7], "step_end_id": 6}  # as tests/integration/test_server_score.py
VERIFIER_CONTEXT = 2048
HEALTH_BOUND_S = 0.5  # measured after the fix: under 0.1 s in every attack here (the issue: 8.4 s blocked)


class _Format:  # what save_checkpoint needs of a gym VerifierFormat
    def describe(self) -> dict:
        return META


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-bounds")
    verifier = small_model(seed=3, vocab_size=512, max_position_embeddings=VERIFIER_CONTEXT)
    config = {
        "policy": {"type": "rdep_moe", "seed": 0, "model": MODEL},
        "engine": {"max_batch_size": 4, "threads": 1},
        "server": {"max_queued_requests": 4, "read_timeout_s": 5.0},  # every other bound: its default
        "tokenizer": str(train_tokenizer(tmp / "tokenizer.json")),
        "verifier": str(save_checkpoint(verifier, _Format(), tmp / "verifier")),
    }
    (tmp / "serve.yaml").write_text(yaml.safe_dump(config))
    proc, url = start_server(tmp / "serve.yaml")
    yield url, proc.pid
    stop_server(proc)


def _kib(pid: int, key: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class Watch:
    growth_mib: float = 0.0  # the server's peak RSS during the block, less its RSS before
    slowest_health_s: float = 0.0
    health_answers: int = 0
    latencies: list[float] = field(default_factory=list)


# /health polled from its own process: the test's sending threads must not slow the poller's own clock
_POLLER = """
import sys, time, urllib.request
url = sys.argv[1] + "/health"
urllib.request.urlopen(url, timeout=60).read()
print("ready", flush=True)
while True:
    started = time.monotonic()
    urllib.request.urlopen(url, timeout=60).read()
    print(time.monotonic() - started, flush=True)
    time.sleep(0.02)
"""


@contextmanager
def watched(url: str, pid: int) -> Iterator[Watch]:
    """The server's peak RSS growth and its slowest /health answer (polled every 20 ms) while the block runs."""
    poller = subprocess.Popen([sys.executable, "-c", _POLLER, url], stdout=subprocess.PIPE, text=True)
    assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current RSS
    before = _kib(pid, "VmRSS")
    watch = Watch()
    try:
        yield watch
    finally:
        watch.growth_mib = (_kib(pid, "VmHWM") - before) / 1024
        time.sleep(0.1)  # the answer to a poll sent just before the block ended
        poller.terminate()
        watch.latencies = [float(line) for line in poller.stdout.read().split()]
        poller.wait(30)
        watch.slowest_health_s = max(watch.latencies, default=0.0)
        watch.health_answers = len(watch.latencies)
        print(f"server: peak RSS +{watch.growth_mib:.0f} MiB, slowest /health {watch.slowest_health_s:.3f} s")


def _post(url: str, path: str, body: bytes | dict, headers: dict | None = None) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    return requests.post(url + path, data=data, headers=headers, timeout=300)


def _refused(response: requests.Response, status: int, *words: str) -> str:
    assert response.status_code == status, (response.status_code, response.text[:500])
    message = response.json()["error"]["message"]
    assert len(message) < 2000, len(message)  # one reason, not an error record per item
    for word in words:
        assert word in message, (word, message)
    return message


def _served(url: str) -> None:
    """The honest control beside every attack: a small completion and a small score are still answered."""
    answer = _post(url, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2, "seed": 0})
    assert answer.status_code == 200 and len(answer.json()["choices"][0]["token_ids"]) == 2, answer.text[:300]
    scored = _post(url, "/v1/score", {"input_ids": [[5, 7, 30, 6]]})
    assert scored.status_code == 200 and scored.json()["positions"] == [[3]], scored.text[:300]


def _refused_cheaply(server, path: str, body: bytes | dict, status: int, *words: str) -> Watch:
    """``body`` is refused with ``status`` naming ``words``, for less than 64 MiB of the server's memory and with
    /health answering meanwhile; the control is served after."""
    url, pid = server
    with watched(url, pid) as watch:
        answer = _post(url, path, body)
    _refused(answer, status, *words)
    assert watch.growth_mib < 64 and watch.slowest_health_s < HEALTH_BOUND_S, watch
    _served(url)
    return watch


SMALL_ARRAYS = 1_500_000  # ~6 MB of "[1]," (the issue: a 6 MB body under the byte limit took +647 MiB)


@pytest.mark.parametrize(
    "path, field",
    [
        ("/v1/completions", "prompt"),
        ("/v1/chat/completions", "messages"),
        ("/v1/score", "input_ids"),
        ("/update_weights", "path"),
    ],
)
def test_a_body_of_many_small_arrays_is_refused_before_it_is_parsed(server, path, field):
    body = b'{"' + field.encode() + b'": [' + b"[1]," * SMALL_ARRAYS + b"[1]]}"
    _refused_cheaply(server, path, body, 413, "max_json_values")


def test_deep_nesting_is_refused_naming_the_bound(server):
    body = b'{"prompt": ' + b"[" * 50_000 + b"1" + b"]" * 50_000 + b"}"
    _refused_cheaply(server, "/v1/completions", body, 400, "max_json_depth")


def test_long_numbers_are_refused_before_python_reads_them(server):
    """A number of a million digits was read whole (0.000...01 became a greedy temperature 0); a 4,000-digit
    seed was turned into a Python int before its bound was checked."""
    url, pid = server
    tiny = b"0." + b"0" * 1_000_000 + b"1"
    body = b'{"prompt": [1, 2], "max_tokens": 2, "temperature": ' + tiny + b"}"
    _refused(_post(url, "/v1/completions", body), 400, "max_json_number_chars")
    body = b'{"prompt": [1, 2], "max_tokens": 2, "seed": 1' + b"7" * 4000 + b"}"
    _refused(_post(url, "/v1/completions", body), 400, "max_json_number_chars")
    seeded = _post(url, "/v1/completions", {"prompt": [1, 2], "max_tokens": 2, "seed": 2**62, "temperature": 0.7})
    assert seeded.status_code == 200, seeded.text[:300]  # the largest seed and a float are well within the bound


def test_duplicate_keys_and_other_encodings_are_refused(server):
    url = server[0]
    twice = b'{"prompt": [1, 2], "max_tokens": 1, "max_tokens": 2}'  # json.loads kept the last: 2 tokens
    _refused(_post(url, "/v1/completions", twice), 400, "given twice")
    utf16 = json.dumps({"prompt": [1, 2], "max_tokens": 2}).encode("utf-16")  # json.loads read UTF-16 bytes
    _refused(_post(url, "/v1/completions", utf16), 400, "not UTF-8")
    _refused(_post(url, "/v1/completions", b'{"prompt": "caf\xe9"}'), 400, "not UTF-8")
    members = {"prompt": [1], **{f"k{i}": 0 for i in range(100_000)}}  # one error record per unknown key
    _refused(_post(url, "/v1/completions", members), 400, "max_json_object_members")
    _served(url)


def test_a_long_stop_list_is_refused_without_blocking_health(server):
    """900,000 stop token ids x 256 rows were each checked on the event loop, then scanned per sampled token
    (the issue: /health blocked 8.4 s)."""
    url, pid = server
    body = {"prompt": [[1, 2, 3]] * 4, "n": 64, "max_tokens": 100, "stop_token_ids": [500] * 900_000}
    with watched(url, pid) as watch:
        answer = _post(url, "/v1/completions", body)
    _refused(answer, 400, "stop_token_ids", "1024")
    assert watch.slowest_health_s < HEALTH_BOUND_S and watch.growth_mib < 128, watch  # 54 MiB: its 4.5 MB parsed
    _served(url)


def test_the_worst_legal_completion_leaves_health_responsive(server):
    """The largest request within every bound (256 rows, 1024 stop ids, routes, the context's worth of tokens):
    served, while /health answers in well under HEALTH_BOUND_S."""
    url, pid = server
    body = {
        "prompt": [list(range(1, 129))] * 4,
        "n": 64,
        "max_tokens": 128,
        "stop_token_ids": [511] * 1024,
        "return_routed_experts": True,
        "seed": 0,
    }
    with watched(url, pid) as watch:
        answer = _post(url, "/v1/completions", body)
    assert answer.status_code == 200, answer.text[:300]
    assert len(answer.json()["choices"]) == 256
    assert watch.health_answers >= 3 and watch.slowest_health_s < HEALTH_BOUND_S, watch


def _sequence(length: int) -> list[int]:
    return [(13 * i) % 400 + 12 for i in range(length)]


def test_repeated_score_positions_are_refused(server):
    """One sequence scored at the same position 300,000 times: (positions x vocabulary) logits (+~700 MiB here,
    9.8 GB asked in the issue with a larger verifier)."""
    body = {"input_ids": [_sequence(256)], "positions": [[0] * 300_000]}
    _refused_cheaply(server, "/v1/score", body, 400, "repeats position 0")


def test_a_legal_score_request_over_the_memory_budget_is_413_before_it_runs(server):
    """64 sequences of the verifier's full context, every position: legal field by field, ~3 GB estimated (the
    issue: +2.2 GB on a legal request). Refused with 413 before anything is allocated; a quarter of it is served
    within what it was estimated to cost."""
    url, pid = server
    ids = _sequence(VERIFIER_CONTEXT)
    everything = list(range(VERIFIER_CONTEXT))
    whole = {"input_ids": [ids] * 64, "positions": [everything] * 64}
    _refused_cheaply(server, "/v1/score", whole, 413, "max_request_memory_bytes")
    with watched(url, pid) as watch:
        answer = _post(url, "/v1/score", {"input_ids": [ids] * 8, "positions": [everything] * 8})
    assert answer.status_code == 200 and len(answer.json()["scores"][0]) == VERIFIER_CONTEXT, answer.text[:300]
    assert watch.growth_mib < 512, watch  # estimated 355 MiB, measured 192 MiB
    assert watch.slowest_health_s < HEALTH_BOUND_S, watch


def test_score_requests_are_admitted_like_completions(server):
    """/v1/score went around max_queued_requests (4 here): 12 at once were all taken."""
    url = server[0]
    body = {"input_ids": [_sequence(1024)] * 4}
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda _: _post(url, "/v1/score", body), range(12)))
    statuses = sorted(a.status_code for a in answers)
    assert 503 in statuses and 200 in statuses and set(statuses) <= {200, 503}, statuses
    assert all("overloaded" in a.json()["error"]["message"] for a in answers if a.status_code == 503)
    _served(url)


def test_many_large_bodies_at_once_are_parsed_off_the_loop_within_bounded_memory(server):
    """24 bodies of a million values each (a prompt far past the context: 400 once parsed) sent together: parsed
    two at a time in the request threads, each parse reserved first, while /health answers."""
    url, pid = server
    body = b'{"prompt": [' + b"1," * 999_000 + b'1], "max_tokens": 1}'
    with watched(url, pid) as watch, ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda _: _post(url, "/v1/completions", body), range(24)))
    for answer in answers:
        _refused(answer, 400, "exceeds the context")
    assert watch.growth_mib < 256 and watch.slowest_health_s < HEALTH_BOUND_S, watch
    _served(url)


def test_slow_bodies_on_many_connections_hold_no_memory_and_no_answers_back(server):
    """200 connections each sending half a body then nothing (slowloris), and a chunked body with no
    Content-Length past max_json_body_bytes: /health and a real request are answered meanwhile."""
    url, pid = server
    host, port = url.removeprefix("http://").split(":")
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
    )
    sockets = []
    with watched(url, pid) as watch:
        for _ in range(200):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(head + b'{"prompt": [' + b"1, " * 10_000)
            sockets.append(sock)
        _served(url)
        held = requests.get(url + "/health", timeout=30).json()["admission"]["reserved_mib"]
        assert held >= 10, held  # 200 x 30 KB of half bodies, counted in the memory in flight as they arrive
        chunk = b"1, " * 100_000
        pieces = (piece for piece in [b'{"prompt": ['] + [chunk] * 40 + [b"1]}"])
        chunked = requests.post(
            url + "/v1/completions", data=pieces, headers={"Content-Type": "application/json"}, timeout=60
        )
    for sock in sockets:
        sock.close()
    _refused(chunked, 413, "max_json_body_bytes")
    assert watch.slowest_health_s < HEALTH_BOUND_S and watch.growth_mib < 64, watch
    _served(url)


# ------------------------------------------------------------------ the memory budget, in process (a scripted engine)

MIB = 1 << 20


async def _burst(server: PolicyServer, bodies: list[dict], upload: bytes | None = None) -> tuple[list, dict]:
    """Post ``bodies`` at once (and ``upload`` to /update_weights_from_tensors once they are in flight); the
    statuses and error messages, and /health after."""
    async with TestServer(server.app(), host="127.0.0.1") as test_server:
        async with aiohttp.ClientSession() as session:

            async def one(body: dict) -> tuple[int, str]:
                async with session.post(test_server.make_url("/v1/completions"), json=body) as response:
                    answer = await response.json()
                    return response.status, answer.get("error", {}).get("message", "")

            async def weights() -> tuple[int, str]:
                await asyncio.sleep(0.2)
                url = test_server.make_url("/update_weights_from_tensors")
                async with session.post(url, data=upload) as response:
                    return response.status, await response.text()

            tasks = [one(body) for body in bodies] + ([weights()] if upload is not None else [])
            results = await asyncio.gather(*tasks)
            async with session.get(test_server.make_url("/health")) as response:
                return results, await response.json()


def test_a_request_estimated_past_its_budget_is_413_before_the_engine_sees_it():
    engine = ScriptedEngine(max_batch_size=256)
    server = PolicyServer(engine, ServerOptions(max_request_memory_bytes=16 * MIB))
    heavy = {"prompt": [[1, 2]] * 4, "n": 64, "max_tokens": 100}  # 256 rows x 100 tokens: ~30 MiB of answer
    light = {"prompt": [[1, 2]] * 4, "n": 16, "max_tokens": 100}
    [(status, message), (fine, _)], health = asyncio.run(_burst(server, [heavy, light]))
    assert status == 413 and "max_request_memory_bytes" in message and "256 sequences" in message, message
    assert fine == 200 and engine.batches == [64]  # the refused one never reached the engine
    assert health["admission"]["refused_too_large"] == 1 and health["admission"]["reserved_mib"] == 0


def test_requests_past_the_memory_in_flight_wait_their_turn_but_a_weight_update_does_not():
    """Each request holds ~7.5 MiB while the engine is slow; past 32 MiB in flight the rest are 503 (retry later),
    and a weight upload sent meanwhile is counted, never refused for load."""
    engine = ScriptedEngine(max_batch_size=64, delay_s=0.5)
    options = ServerOptions(
        max_request_memory_bytes=16 * MIB, max_inflight_memory_bytes=32 * MIB, max_queued_requests=64
    )
    body = {"prompt": [[1, 2]], "n": 64, "max_tokens": 100}
    results, health = asyncio.run(_burst(PolicyServer(engine, options), [body] * 10, upload=b"\0" * MIB))
    statuses = [status for status, _ in results[:-1]]
    assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) <= 4  # 4 x 7.5 MiB fit in 32 MiB
    assert all("max_inflight_memory_bytes" in message for status, message in results[:-1] if status == 503)
    assert results[-1][0] == 200, results[-1]  # the upload, while the budget was full
    assert health["admission"]["refused_busy"] == statuses.count(503) and health["admission"]["admitted"] == 0


def test_a_burst_of_connections_the_server_has_not_accepted_is_queued_not_dropped(server):
    """600 connections while the server accepts none (its process stopped): the kernel queues them all (backlog
    1024), so no client waits out a dropped SYN's 1 s retransmit (aiohttp's default backlog held 128)."""
    url, pid = server
    host, port = url.removeprefix("http://").split(":")
    assert queued_while_stopped(host, int(port), pid) == BURST
    _served(url)
