"""The OpenAI surface of the real `python -m gym serve` process (a tiny random RDEP policy, a BPE tokenizer trained
here, Harmony chat), driven with the official openai client and raw HTTP: streaming, stop strings, the model check,
the usage block, and the attacks on each beside an honest control.

The continuous engine hands each sampled token to the server's watch as it samples it (stop strings end rows in
the engine, streams send pieces as they are decoded); tests/integration/test_server_tools.py drives the same
routes over an engine that hands whole completions.
"""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest
import requests
import yaml
from openai import OpenAI

from tests.serve_support import MODEL, start_server, stop_server
from tests.tokenizer_support import train_tokenizer

NAME = "tiny-policy"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-openai")
    config = {
        "policy": {"type": "rdep_moe", "seed": 0, "model": MODEL},
        "engine": {"max_batch_size": 8, "threads": 1},
        "server": {"max_queued_requests": 8, "served_model_name": NAME, "stream_write_timeout_s": 2.0},
        "tokenizer": str(train_tokenizer(tmp / "tokenizer.json")),
    }
    (tmp / "serve.yaml").write_text(yaml.safe_dump(config))
    proc, url = start_server(tmp / "serve.yaml")
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


def _health(url: str) -> dict:
    return requests.get(url + "/health", timeout=30).json()


def _settled(url: str, key: str = "admitted", want: int = 0) -> dict:
    """/health once its admission shows ``want`` for ``key`` (within 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        health = _health(url)
        if health["admission"][key] == want or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


# -- the model check --------------------------------------------------------------------------------------------


def test_the_served_name_is_listed_and_another_is_a_404(server, client) -> None:
    assert [m.id for m in client.models.list().data] == [NAME]
    response = requests.post(
        server + "/v1/completions", json={"model": "gpt-4o", "prompt": [1, 2], "max_tokens": 1}, timeout=30
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model" and error["type"] == "invalid_request_error"
    assert "gpt-4o" in error["message"] and NAME in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    # the served name and an omitted model are answered
    assert client.completions.create(model=NAME, prompt=[1, 2], max_tokens=1).model == NAME
    omitted = requests.post(server + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 1}, timeout=30)
    assert omitted.status_code == 200 and omitted.json()["model"] == NAME


# -- streaming --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.9, "seed": 7}])
def test_a_streamed_completion_equals_the_answer_token_for_token(client, sampling) -> None:
    request = {"model": NAME, "prompt": "def add(a, b):", "max_tokens": 40, **sampling}
    whole = client.completions.create(**request)
    chunks = list(client.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    *pieces, last, usage = chunks
    assert whole.choices[0].model_extra["token_ids"] == [
        t for c in pieces for t in c.choices[0].model_extra["token_ids"]
    ]
    assert whole.choices[0].text == "".join(c.choices[0].text for c in pieces)
    assert [lp for c in pieces for lp in c.choices[0].logprobs.token_logprobs] == whole.choices[
        0
    ].logprobs.token_logprobs
    assert all(c.choices[0].finish_reason is None for c in pieces) and len(pieces) > 1
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    assert last.model_extra["weights_version"] == 0
    assert usage.choices == [] and usage.usage == whole.usage
    assert whole.usage.completion_tokens == 40 and whole.usage.total_tokens == whole.usage.prompt_tokens + 40


def test_a_streamed_chat_equals_the_answer_and_reads_in_the_openai_iterator(client) -> None:
    request = {"model": NAME, "messages": [{"role": "user", "content": "print the answer"}], "max_tokens": 30}
    whole = client.chat.completions.create(**request, temperature=0.7, seed=1, logprobs=True)
    stream = client.chat.completions.create(**request, temperature=0.7, seed=1, logprobs=True, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    tokens = [t for c in chunks for t in c.choices[0].model_extra["token_ids"]]
    assert content == whole.choices[0].message.content
    assert tokens == whole.choices[0].model_extra["token_ids"]
    streamed = [lp.logprob for c in chunks if c.choices[0].logprobs for lp in c.choices[0].logprobs.content]
    assert streamed == [lp.logprob for lp in whole.choices[0].logprobs.content]
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert whole.usage.completion_tokens == len(tokens)  # usage on every answer


def test_a_client_that_goes_away_mid_stream_frees_its_slot(server) -> None:
    host, port = server.removeprefix("http://").split(":")
    before = _health(server)["cancelled_requests"]
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 250, "stream": True}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head % len(body) + body)
        received = b""
        while b"data: {" not in received:  # the first chunk is out: the stream is running
            received += sock.recv(4096)
        assert b"text/event-stream" in received
        assert _health(server)["admission"]["admitted"] == 1
    health = _settled(server)
    assert health["admission"]["admitted"] == 0 and health["admission"]["reserved_mib"] == 0
    assert health["cancelled_requests"] == before + 1  # its rows were stopped in the engine, not decoded for no one
    assert requests.post(server + "/v1/completions", json={"prompt": [4], "max_tokens": 2}, timeout=30).ok


def test_a_stream_nobody_reads_holds_no_slot_for_long(server, client) -> None:
    host, port = server.removeprefix("http://").split(":")
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 250, "stream": True, "logprobs": 1}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a small window: the server's writes wait
        sock.settimeout(30)
        sock.connect((host, int(port)))
        sock.sendall(head % len(body) + body)
        # an honest request beside it is answered meanwhile
        assert client.completions.create(model=NAME, prompt=[5, 6], max_tokens=3).usage.completion_tokens == 3
        # the unread stream is done or abandoned (stream_write_timeout_s) while its client still holds the socket
        assert _settled(server)["admission"]["admitted"] == 0


# -- stop strings -----------------------------------------------------------------------------------------------


def _stop_in(text: str) -> str:
    """A stop string out of the middle of ``text`` (three characters where its first occurrence is)."""
    middle = len(text) // 2
    return text[middle : middle + 3]


def test_a_stop_string_ends_the_completion_before_it(client) -> None:
    request = {"model": NAME, "prompt": "hello world", "max_tokens": 40, "temperature": 0.9, "seed": 11}
    whole = client.completions.create(**request)
    text, ids = whole.choices[0].text, whole.choices[0].model_extra["token_ids"]
    stop = _stop_in(text)
    cut = client.completions.create(**request, stop=["zzzz-never", stop])
    choice = cut.choices[0]
    kept = choice.model_extra["token_ids"]
    assert choice.text == text[: text.find(stop)] and stop not in choice.text
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == stop
    assert kept == ids[: len(kept)] and len(kept) < len(ids)  # the same samples, ended where the string completed
    assert len(choice.logprobs.token_logprobs) == len(kept) == cut.usage.completion_tokens
    # the token ids hold every sampled token, the one that completed the string included
    assert stop in "".join(choice.logprobs.tokens) and stop not in "".join(choice.logprobs.tokens[:-1])


def test_a_streamed_stop_never_sends_part_of_the_stop_string(client) -> None:
    request = {"model": NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 40}
    sampling = {"temperature": 0.9, "seed": 5}
    whole = client.chat.completions.create(**request, **sampling).choices[0].message.content or ""
    stop = _stop_in(whole)
    answer = client.chat.completions.create(**request, **sampling, stop=stop).choices[0]
    assert answer.message.content == whole[: whole.find(stop)] and answer.finish_reason == "stop"
    released = ""
    for chunk in client.chat.completions.create(**request, **sampling, stop=stop, stream=True):
        released += (chunk.choices[0].delta.content or "") if chunk.choices else ""
        assert answer.message.content.startswith(released)  # nothing past the cut, not even a stop's first letter
    assert released == answer.message.content


# -- attacks beside the honest controls above -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "body", "words"),
    [
        ("/v1/completions", {"prompt": [1], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("/v1/completions", {"prompt": [1], "stop": "x" * 257}, "stop"),
        ("/v1/completions", {"prompt": [1], "stop": ""}, "stop"),
        ("/v1/completions", {"prompt": [1], "stop": ["ok", 7]}, "stop"),
        ("/v1/completions", {"prompt": [1], "stop": "\ud800"}, "unicode"),
        ("/v1/completions", {"prompt": [1], "stream": True, "n": 2}, "n must be 1"),
        ("/v1/completions", {"prompt": [[1], [2]], "stream": True}, "streams one sequence"),
        ("/v1/completions", {"prompt": [1], "stream_options": {"include_usage": True}}, "only allowed with stream"),
        ("/v1/completions", {"prompt": [1], "stream": True, "stream_options": {"bogus": 1}}, "bogus"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True, "n": 3}, "n must"),
    ],
)
def test_bad_stream_and_stop_requests_are_400(server, route, body, words) -> None:
    response = requests.post(server + route, json={"max_tokens": 2, **body}, timeout=30)
    assert response.status_code == 400, response.text[:300]
    assert words in response.json()["error"]["message"]


def _tool(name: str = "add", description: str = "Add.", parameters: dict | None = None) -> dict:
    schema = parameters if parameters is not None else {"type": "object", "properties": {"a": {"type": "integer"}}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize(
    ("extra", "status", "words"),
    [
        ({"tools": [_tool()], "tool_choice": {"type": "function", "function": {"name": "mul"}}}, 400, "'mul'"),
        ({"tool_choice": "required"}, 400, "needs tools"),
        ({"tools": [_tool(), _tool()]}, 400, "given twice"),
        ({"tools": [_tool("rm -rf")]}, 400, "pattern"),
        ({"tools": [_tool(parameters=_nested(12))]}, 400, "max_json_depth"),
        ({"tools": [_tool(f"t{i}", "y" * 8000) for i in range(40)]}, 400, "cannot fit the context"),
        ({"tools": [_tool(f"t{i}") for i in range(129)]}, 400, "tools"),
        # the tools above fail before rendering; these would render, but this tokenizer lacks Harmony's <|constrain|>
        ({"tools": [_tool()]}, 400, "chat format with tool calls"),
    ],
)
def test_tool_attacks_are_refused_before_anything_is_rendered(server, extra, status, words) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    response = requests.post(server + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == status, response.text[:300]
    assert words in response.json()["error"]["message"], response.json()["error"]["message"]
    assert _health(server)["admission"]["admitted"] == 0
