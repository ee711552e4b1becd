"""vLLM as a rollout engine: token ids in, sampled ids and behaviour logprobs out, every completion tagged with the
weights version the trainer pushed (torch-free; the gym imports it through `gym.policy_client`).

One or several vLLM OpenAI servers (``vllm serve``, or ``python -m vllm.entrypoints.openai.api_server``; one per
GPU or replica) are reached over ``POST /v1/completions`` with a token-id ``prompt`` and ``return_token_ids:
true``, one request per prompt (each with its own seed, `per_prompt`), each placed on a server by
`policies.vllm_router.Router` (a prompt goes where the prompt it extends went, so a GRPO group and an episode's
turns stay on one server's prefix cache; else to the least busy; a server that fails in transport leaves the
rotation). What a reply must hold and how it maps onto `Completion`:

- ``choices[0].token_ids``: the sampled ids (a stop token that ended the completion is the last, as ours);
- ``choices[0].prompt_token_ids``: the prompt the server saw, which must be ours, id for id;
- ``choices[0].logprobs.token_logprobs``: with ``logprobs: 0`` the logprob of each sampled token in the server's
  ``--logprobs-mode``. ``processed_logprobs`` is the distribution sampled from (after temperature, top-k, top-p):
  our behaviour logprobs. The default ``raw_logprobs`` is the model's own distribution (temperature 1, nothing
  cut), which is the behaviour's only at temperature 1 without top-k/top-p; `VllmEngine.check_logprobs_mode` tells
  the two apart on the server and the engine refuses a raw server for any other sampling. vLLM returns one mode per
  server, so `Completion.raw_logprobs` is the raw model's only where the two coincide; elsewhere it carries the
  behaviour logprobs (nothing in the trainer reads it; `gym bench generate` does, on our own engine). Greedy
  (temperature 0) has behaviour logprob 0 by our convention, and raw_logprobs is then vLLM's (processed greedy is
  the raw log-softmax).
- ``choices[0].finish_reason``: "stop" (a stop id was sampled: it must be the last token) or "length" (max_tokens,
  or the model's window); anything else ("abort" when the server drops a request) is the engine's failure.

A reply that breaks any of this (ids outside the vocabulary, lengths that disagree, a missing field, a logprob
that is not finite or above 0, another prompt) is an `EngineError`: the episode is masked as an infrastructure
failure, never scored and never a crash. The request asks for every sampling knob explicitly (penalties off,
``ignore_eos``, no generation-config defaults from the model directory) so a server started without our flags
samples from the distribution we record.

Versions: vLLM does not know the trainer's weights versions, so the client owns them. `WeightsGate` holds the
servers' current version (one counter for all: a push reloads every server before it moves) and the requests in
flight; every request is tagged with the version when it entered.
A push (`trainer.vllm_sync.VllmSync`) either drains (the default: new requests wait at the gate, the push
waits until none is in flight, so no completion spans a push and each is tagged exactly) or, with
``loop.partial_rollouts``, lets requests in flight go on across the push (vLLM's ``/pause?mode=keep``: they
finish on the new weights, their keys and values recomputed): such a completion is tagged with the version it
started under, the oldest that sampled any of its tokens, so its staleness is never understated.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import trio

from policies.sampling import Completion, EngineError, SamplingParams, per_prompt, reply_json
from policies.vllm_router import Router, Ticket

PROBE_PROMPT = (1, 2, 3, 4)
"""The prompt of `VllmEngine.check_logprobs_mode` (ids every vocabulary has)."""

GATE_POLL_S = 0.02
"""How often a request waiting at a closed gate looks again (a push holds it for its reload, ~10 ms on the CPU)."""


class WeightsGate:
    """The weights version a vLLM server samples with, as the trainer counts it, and the requests in flight on it.

    Shared by the engine (trio, one thread) and the weight sync (a worker thread), hence a `threading.Condition`.
    """

    def __init__(self, version: int = 0) -> None:
        self._cond = threading.Condition()
        self._version = version
        self._in_flight = 0
        self._closed = False

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    @property
    def draining(self) -> bool:
        """True while a draining push holds the gate closed (new requests wait)."""
        with self._cond:
            return self._closed

    def enter(self) -> int | None:
        """Register a request and return the version it is tagged with; None while a draining push holds the gate."""
        with self._cond:
            if self._closed:
                return None
            self._in_flight += 1
            return self._version

    def leave(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    @contextmanager
    def push(self, version: int, drain: bool, timeout_s: float) -> Iterator[None]:
        """Hold the server for a weight push that makes it sample as ``version``.

        ``drain``: close the gate and wait until no request is in flight (TimeoutError after ``timeout_s``); the
        body then runs with nothing in flight and the gate reopens after it. Otherwise requests keep entering
        under the old version until the body has finished. The version moves only when the body returns: a push
        that failed leaves the gate at the version the server may still hold."""
        with self._cond:
            if drain:
                self._closed = True
                if not self._cond.wait_for(lambda: self._in_flight == 0, timeout=timeout_s):
                    self._closed = False
                    raise TimeoutError(
                        f"{self._in_flight} request(s) still in flight after {timeout_s:.0f} s: the push could not drain"
                    )
        try:
            yield
            with self._cond:
                self._version = version
        finally:
            with self._cond:
                self._closed = False


class VllmEngine:
    """A `RolloutEngine` over the ``/v1/completions`` of one vLLM server or several (see the module docstring).

    ``urls``: one base URL or several (distinct); ``vocab_size`` bounds the sampled ids (the model's, or the
    tokenizer's when the gym can only render those); ``gate`` carries the weights version (a fresh one at version 0
    when not given: servers nobody pushes to). Connection failures are retried by httpx's transport
    (``connect_retries``); nothing else is retried: a busy vLLM queues rather than refuses."""

    def __init__(
        self,
        urls: str | list[str] | tuple[str, ...],
        vocab_size: int,
        gate: WeightsGate | None = None,
        timeout_s: float = 600.0,
        connect_retries: int = 2,
    ) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        self.router = Router(self.urls)
        self.vocab_size = vocab_size
        self.gate = gate or WeightsGate()
        self.timeout_s = timeout_s
        self.connect_retries = connect_retries
        self.logprobs_mode: str | None = None
        """"processed" or "raw" once `check_logprobs_mode` asked the servers (the first `generate` does). Under
        raw (--logprobs-mode raw_logprobs, on any server) only untruncated temperature-1 sampling and greedy have
        behaviour logprobs on the wire; other sampling is refused."""

    @property
    def url(self) -> str:
        """The servers' URLs, comma-separated (what messages name)."""
        return ",".join(self.urls)

    def request_body(self, prompt: list[int], params: SamplingParams) -> dict[str, Any]:
        """The ``/v1/completions`` body of one prompt: every knob that shapes the distribution named."""
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": True,  # only our stop ids end a completion, as on our engine
            "logprobs": 0,  # the sampled token's own logprob
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,  # "token_id:N" names: no detokenizing (a server may have no tokenizer)
            "n": 1,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if self.logprobs_mode is None:  # concurrent first calls may each ask: two one-token requests
            await self.check_logprobs_mode(list(PROBE_PROMPT))
        if self.logprobs_mode == "raw" and not (
            params.temperature in (0.0, 1.0) and params.top_p == 1.0 and not params.top_k
        ):
            raise EngineError(
                f"{self.url} returns raw logprobs (--logprobs-mode raw_logprobs), which are not the behaviour "
                f"logprobs of temperature {params.temperature:g}, top_p {params.top_p:g}, top_k {params.top_k}: "
                "start it with --logprobs-mode processed_logprobs"
            )
        rows = per_prompt(params, len(prompts))
        if len(prompts) == 1:  # an episode's turn: no nursery
            return [await self._one(prompts[0], rows[0])]
        out: list[Completion | None] = [None] * len(prompts)

        async def one(i: int) -> None:
            out[i] = await self._one(prompts[i], rows[i])

        try:
            async with trio.open_nursery() as nursery:
                for i in range(len(prompts)):
                    nursery.start_soon(one, i)
        except BaseExceptionGroup as group:  # trio with strict exception groups: the callers catch EngineError
            failed, _ = group.split(EngineError)
            if failed is None:
                raise
            raise _first(failed) from None
        return [c for c in out if c is not None]

    async def _one(self, prompt: list[int], params: SamplingParams) -> Completion:
        version = self.gate.enter()
        while version is None:  # a draining push holds the gate (a few ms); polled, as the push runs in a thread
            await trio.sleep(GATE_POLL_S)
            version = self.gate.enter()
        try:
            ticket = self.router.place(prompt)  # after the gate: a push may just have taken a server out
            try:
                reply = await self._post(ticket, "/v1/completions", self.request_body(prompt, params))
            finally:
                self.router.done(ticket)
        finally:
            self.gate.leave()
        url = ticket.server.url
        while (accepted := self.router.settled(ticket)) is None:  # a push is reloading the server: its outcome
            await trio.sleep(GATE_POLL_S)
        if not accepted:
            raise EngineError(f"{url} left the rotation while the request was in flight: {ticket.server.reason}")
        try:
            return completion_of(reply, prompt, params, version, self.vocab_size)
        except ValueError as exc:
            raise EngineError(f"{url}: the /v1/completions reply is not a completion: {exc}") from None

    async def _post(self, ticket: Ticket, path: str, body: dict[str, Any]) -> Any:
        """POST to the ticket's server; a transport failure (refused, reset, timed out) takes it out of the
        rotation (`Router.failed`) and, as any failure, is an EngineError naming it."""
        url = ticket.server.url
        # One client per call: an engine outlives trio.run calls (the trainer's steps), a client may not.
        transport = httpx.AsyncHTTPTransport(retries=self.connect_retries)
        async with httpx.AsyncClient(transport=transport, timeout=self.timeout_s) as client:
            try:
                response = await client.post(f"{url}{path}", json=body)
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc or 'no reply'}"
                self.router.failed(ticket, reason)
                raise EngineError(f"{url}: {reason}") from None
            except httpx.HTTPError as exc:
                raise EngineError(f"{url}: {type(exc).__name__}: {exc or 'no reply'}") from None
        return reply_json(url, response)

    async def check_logprobs_mode(self, prompt: list[int]) -> str:
        """Which logprobs the servers return, "processed" or "raw" (also kept in `logprobs_mode`): raw when any
        live server returns raw ones (each is asked; a server that fails in transport leaves the rotation, and
        EngineError when none answers).

        One token of ``prompt`` with its 5 most likely candidates, sampled at temperature 1 and at temperature 0.5
        (top_k 1 would not do: vLLM samples it greedily, and a greedy row's processed logprobs are the raw ones):
        raw logprobs are the model's own and equal at both temperatures, processed ones are those of logits /
        temperature and differ."""
        modes, errors = [], []
        for server in self.router.live:
            try:
                modes.append(await self._probe(Ticket(server, server.epoch), prompt))
            except EngineError as exc:
                errors.append(str(exc))
        if not modes:
            raise EngineError(f"no vLLM server answered the logprobs probe: {'; '.join(errors)}")
        self.logprobs_mode = "raw" if "raw" in modes else "processed"
        return self.logprobs_mode

    async def _probe(self, ticket: Ticket, prompt: list[int]) -> str:
        tops = []
        for temperature in (1.0, 0.5):
            body = self.request_body(prompt, SamplingParams(max_tokens=1, temperature=temperature, seed=0))
            body["logprobs"] = 5
            reply = await self._post(ticket, "/v1/completions", body)
            try:
                top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
                tops.append(sorted((float(v) for v in top.values()), reverse=True)[:5])
            except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                raise EngineError(
                    f"{ticket.server.url}: no top_logprobs in a probe reply ({exc!r}): {str(reply)[:300]}"
                ) from None
        raw = len(tops[0]) == len(tops[1]) and all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(*tops))
        return "raw" if raw else "processed"


def completion_of(reply: Any, prompt: list[int], params: SamplingParams, version: int, vocab_size: int) -> Completion:
    """The `Completion` a ``/v1/completions`` reply to ``prompt`` states, tagged with weights ``version``; ValueError
    naming what is wrong when the reply is not an honest completion of this request (module docstring)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list) or len(reply["choices"]) != 1:
        raise ValueError(f"want one choice, got {str(reply)[:200]}")
    choice = reply["choices"][0]
    if not isinstance(choice, dict):
        raise ValueError(f"a choice must be an object, got {type(choice).__name__}")
    ids = _ints(choice.get("token_ids"), "token_ids")
    echoed = choice.get("prompt_token_ids")
    if echoed is not None and _ints(echoed, "prompt_token_ids") != prompt:
        raise ValueError(f"prompt_token_ids is not the prompt sent ({len(echoed)} ids echoed for {len(prompt)})")
    if not 1 <= len(ids) <= params.max_tokens:
        raise ValueError(f"{len(ids)} sampled ids for max_tokens={params.max_tokens}")
    outside = next((t for t in ids if not 0 <= t < vocab_size), None)
    if outside is not None:
        raise ValueError(f"sampled id {outside} is outside the vocabulary [0, {vocab_size})")
    logprobs = choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or len(values) != len(ids):
        raise ValueError(
            f"logprobs.token_logprobs must hold one logprob per sampled id ({len(ids)}), got {values!r:.80}"
        )
    raw = []
    for i, value in enumerate(values):
        if type(value) not in (int, float) or not math.isfinite(value) or value > 1e-4:
            raise ValueError(f"logprob {i} is {value!r:.40}, not a finite log-probability")
        raw.append(min(float(value), 0.0))
    finish = choice.get("finish_reason")
    if finish == "stop":
        if ids[-1] not in params.stop_token_ids:
            raise ValueError(f'finish_reason "stop" but the last id {ids[-1]} is not a stop id')
    elif finish != "length":
        raise ValueError(f"finish_reason {finish!r} (the server did not finish the request)")
    if any(t in params.stop_token_ids for t in ids[:-1]):
        raise ValueError("a stop id was sampled before the end: the completion should have stopped there")
    behaviour = [0.0] * len(ids) if params.temperature == 0 else raw
    return Completion(
        token_ids=ids, logprobs=behaviour, raw_logprobs=raw, finish_reason=finish, weights_version=version
    )


def _first(group: BaseException) -> BaseException:
    """The first leaf exception of a (nested) exception group."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


def _ints(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or any(type(t) is not int for t in value):
        raise ValueError(f"{name} must be a list of integers, got {str(value)[:80]}")
    return value


def wait_healthy(url: str, timeout_s: float, alive=lambda: None) -> float:
    """Block until ``URL/health`` answers 200; seconds waited. ``alive()`` is called between tries and may raise
    (a launched server that exited); TimeoutError naming the URL and the last error after ``timeout_s``."""
    started = time.monotonic()
    last: object = "no answer"
    with httpx.Client(timeout=5.0) as client:
        while True:
            alive()
            try:
                response = client.get(f"{url.rstrip('/')}/health")
                if response.status_code == 200:
                    return time.monotonic() - started
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"vLLM server {url} not healthy within {timeout_s:.0f} s ({last})")
            time.sleep(0.5)
