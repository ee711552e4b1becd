"""The HTTP policy client (`gym.policy_client.HttpEngine`, httpx on trio) against tiny real servers.

A server answering 503 twice then 200 is waited out with backoff; a server that starts listening a
moment after the first connection attempt is reached through the connect retries; an unreachable URL
and a server that keeps answering 503 are `EngineError`s naming the URL (what masks an episode as an
infrastructure failure), and a retry budget of zero gives up at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import trio

from gym.policy_client import EngineError, HttpEngine, busy_delay
from policies.sampling import SamplingParams

REPLY = {
    "choices": [
        {
            "index": 0,
            "token_ids": [7],
            "raw_logprobs": [-0.5],
            "logprobs": {"token_logprobs": [-0.5]},
            "finish_reason": "stop",
        }
    ],
    "weights_version": 4,
}


def handler_for(answers: list[int], retry_after: str | None, reply: dict = REPLY) -> type[BaseHTTPRequestHandler]:
    """Answers each POST with the next status of ``answers`` (``reply`` for 200)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            code = answers.pop(0)
            data = json.dumps(reply if code == 200 else {"error": "queue full"}).encode()
            self.send_response(code)
            if retry_after is not None and code == 503:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def server(
    answers: list[int], retry_after: str | None = None, port: int = 0, after_s: float = 0.0, reply: dict = REPLY
) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a threaded server that starts listening ``after_s`` seconds from now."""
    holder: dict[str, ThreadingHTTPServer] = {}

    def serve() -> None:
        time.sleep(after_s)
        holder["server"] = ThreadingHTTPServer(("127.0.0.1", port), handler_for(answers, retry_after, reply))
        holder["server"].serve_forever()

    if not port:
        holder["server"] = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(answers, retry_after, reply))
        port = holder["server"].server_address[1]
        thread = threading.Thread(target=holder["server"].serve_forever, daemon=True)
    else:
        thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        deadline = time.monotonic() + 5
        while "server" not in holder and time.monotonic() < deadline:
            time.sleep(0.05)
        holder["server"].shutdown()
        holder["server"].server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def generate(engine: HttpEngine):
    return trio.run(engine.generate, [[1, 2]], SamplingParams())


def test_503_twice_then_200_is_waited_out_with_backoff():
    answers = [503, 503, 200]
    with server(answers) as url:  # no Retry-After: exponential backoff, 0.25 s then 0.5 s (+ up to 25%)
        started = time.monotonic()
        [completion] = generate(HttpEngine(url))
        waited = time.monotonic() - started
    assert answers == [] and completion.token_ids == [7] and completion.weights_version == 4
    assert 0.75 <= waited < 10, waited


def test_503_past_the_retry_budget_is_an_engine_failure():
    answers = [503, 503, 503]
    with server(answers, retry_after="0.05") as url:
        with pytest.raises(EngineError, match=r"127\.0\.0\.1:\d+: HTTP 503: .*queue full"):
            generate(HttpEngine(url, busy_retries=2))
        assert answers == []  # the first answer and two retries
        answers.extend([503, 200])
        with pytest.raises(EngineError, match="HTTP 503"):
            generate(HttpEngine(url, busy_retries=0))  # no budget: the first 503 is final
        assert answers == [200]


def test_other_http_errors_are_not_retried():
    answers = [500, 200]
    with server(answers) as url:
        with pytest.raises(EngineError, match="HTTP 500"):
            generate(HttpEngine(url))
    assert answers == [200]


def with_routes(routes) -> dict:
    return {**REPLY, "choices": [{**REPLY["choices"][0], "routed_experts": routes}]}


def test_routes_come_back_as_one_array_and_malformed_routes_are_an_engine_failure():
    with server([200], reply=with_routes([[[1, 2], [-1, -1]], [[3, 4], [-1, -1]]])) as url:
        [completion] = generate(HttpEngine(url))
    assert completion.routed_experts.shape == (2, 2, 2) and completion.routed_experts.array.dtype == np.int16
    assert completion.routed_experts.tolist() == [[[1, 2], [-1, -1]], [[3, 4], [-1, -1]]]
    for bad in ([[[1, 2], [3]]], [[1, 2]], [[[1.5, 2.0]]], [[[-3, 0]]], [[[70000, 0]]], [[["1", "2"]]]):
        with server([200], reply=with_routes(bad)) as url:
            with pytest.raises(EngineError, match="(?s)unexpected /v1/completions reply.*routed_experts must be"):
                generate(HttpEngine(url))


def test_a_server_coming_up_is_reached_through_the_connect_retries():
    port = free_port()
    answers = [200]
    with server(answers, port=port, after_s=0.2) as url:  # attempts at 0 s, 0 s, 0.5 s, 1.5 s
        [completion] = generate(HttpEngine(url, connect_retries=3))
    assert answers == [] and completion.token_ids == [7]


def test_an_unreachable_url_is_an_engine_failure_naming_it():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(EngineError, match=f"^{url}: ConnectError: .*Connection refused") as caught:
        generate(HttpEngine(url, timeout_s=5))
    assert time.monotonic() - started < 5  # two connect retries, 0 s and 0.5 s apart
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("attempt", "retry_after", "low", "high"),
    [
        (0, None, 0.25, 0.3125),
        (3, None, 2.0, 2.5),
        (10, None, 8.0, 10.0),  # exponential, capped at 8 s
        (0, "1", 1.0, 1.25),
        (5, "0", 0.05, 0.0625),
        (0, "600", 30.0, 37.5),  # the server's word, bounded
        (1, "Wed, 21 Oct 2026 07:28:00 GMT", 0.5, 0.625),  # an HTTP date: backoff as if none was given
    ],
)
def test_busy_delay_bounds(attempt, retry_after, low, high):
    delays = [busy_delay(attempt, retry_after) for _ in range(200)]
    assert all(low <= d <= high for d in delays), (min(delays), max(delays))
    assert len(set(delays)) > 1  # jittered
