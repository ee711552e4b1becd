"""The token-in/token-out policy server (aiohttp), OpenAI-compatible.

Routes:
  POST /v1/completions               prompt as token ids (or text with a tokenizer) -> token ids + logprobs
  POST /v1/chat/completions          messages (and tools) -> content or tool calls, in the model family's chat
                                     format (policies/chat_tools.py; needs a tokenizer)
  GET  /v1/models, GET /health
  POST /update_weights               {"path": ..., "version": ...}: load a checkpoint
  POST /update_weights_from_tensors  body = safetensors bytes, ?version=N
  POST /v1/score                     token ids -> p(correct) per step slot, from a process verifier
                                     checkpoint (`verifier:` in the serve config; policies/scorer.py)

Every route that reads a body goes through one admission (policies/admission.py): the body is read and parsed
within bounds measured in its raw bytes before any object is built (policies/request_bounds.py), each request's
memory is estimated and reserved before it is allocated (413 past max_request_memory_bytes, 503 past
max_inflight_memory_bytes), and engine and verifier requests are admitted up to max_queued_requests (503 beyond).
Parsing, checking and answering run in a worker thread, so the event loop keeps answering /health. One worker
drains admitted jobs into engine batches of up to `max_batch_size` sequences. Bad requests answer 400 with the
reason; a request naming another model than the served one is a 404 (``model_not_found``).

``stream: true`` answers Server-Sent Events (policies/event_stream.py) as the engine samples: the continuous engine
hands each row's tokens to a `policies.stop_strings.TextWatch` as it samples them, which decodes them, ends the
row at a `stop` string and releases the text no stop string can still claim; an engine that hands whole
completions (batch modes, replicas) is watched the same way once it is done, so the answer is the same either way.
A client that goes away mid-stream, or reads nothing for stream_write_timeout_s, cancels its rows.

Every response carries the newest weights version that sampled any of its tokens, and every choice the
version of each token (``token_versions``: with partial rollouts a completion may span a weight update).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import numpy as np
from aiohttp import web
from pydantic import BaseModel, ValidationError
from safetensors import SafetensorError

from policies.admission import (
    BODY_COPIES,
    TOKENIZE_BYTES_PER_CHAR,
    Admission,
    Hold,
    Refused,
    completion_bytes,
    engine_shape,
    host_shape,
    parse_bytes,
    score_bytes,
)
from policies.chat_tools import ChatRenderer, assistant_turn, conversation, schema_characters, tool_schemas
from policies.event_stream import ChatChunks, CompletionChunks, EventStream, StreamStalled
from policies.protocol import (
    MAX_WEIGHTS_VERSION,
    ChatChoice,
    ChatChoiceLogprobs,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatTokenLogprob,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    UpdateWeightsRequest,
    Usage,
)
from policies.request_bounds import BodyRefused, JsonBounds, load, measure, scan_bytes
from policies.sampling import Completion, EngineError, Routes, SamplingParams, ServingEngine, per_prompt
from policies.scorer import ScoreError, ScoreRequest, ScoreResponse, StepScorer
from policies.serve_config import ServerOptions
from policies.stop_strings import TextWatch
from policies.tokenizer import TextTokenizer

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)
Result = TypeVar("Result")
MAX_ERRORS_SHOWN = 5  # a 400 names the first few invalid fields
# Connections the kernel queues before the server accepts them (the kernel caps it at net.core.somaxconn). With
# aiohttp's 128, a burst the loop had not yet accepted (200 slow bodies at once) filled the queue, and the next
# client's SYN was dropped: its answer came after the 1 s SYN retransmit.
LISTEN_BACKLOG = 1024


class BadRequest(Exception):
    """A request the server refuses with 400 and this message."""


class ModelNotFound(Exception):
    """A request naming a model this server does not serve: 404 with OpenAI's ``model_not_found``."""


@dataclass
class _Job:
    prompts: list[list[int]]
    params: list[SamplingParams]
    watches: list[TextWatch] | None = None  # one per row: stop strings and streaming (`TextWatch`)
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def _error(
    status: int, message: str, kind: str, param: str | None = None, code: str | int | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status if code is None else code}}
    return web.json_response(body, status=status, headers={"Retry-After": "1"} if status == 503 else None)


def _validation_message(err: ValidationError) -> str:
    errors = err.errors(include_url=False, include_context=False, include_input=False)
    shown = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors[:MAX_ERRORS_SHOWN])
    return shown + (f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else "")


@web.middleware
async def _json_errors(request: web.Request, handler) -> web.StreamResponse:
    """Unexpected failures (an engine crash) answer a JSON 500 that names the error, like the 400s."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        # aiohttp's own 404/405/413 are text/plain; every client of this API reads {"error": ...}
        message = f"{exc.reason}: {request.method} {request.path}"
        if isinstance(exc, web.HTTPMethodNotAllowed):
            message += f" (allowed: {', '.join(sorted(exc.allowed_methods))})"
        elif exc.status == 413:
            message = f"{exc.text} (max_body_bytes)"
        response = _error(exc.status, message, "invalid_request_error")
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except _TooLarge as exc:
        return _error(413, str(exc), "invalid_request_error")
    except _ReadTimeout as exc:
        return _error(408, str(exc), "invalid_request_error")
    except BadRequest as exc:
        return _error(400, str(exc), "invalid_request_error")
    except ModelNotFound as exc:
        return _error(404, str(exc), "invalid_request_error", param="model", code="model_not_found")
    except BodyRefused as exc:
        return _error(exc.status, str(exc), "invalid_request_error")
    except Refused as exc:
        return _error(exc.status, str(exc), exc.kind)
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return _error(500, f"{type(exc).__name__}: {exc}", "server_error")


class PolicyServer:
    def __init__(
        self,
        engine: ServingEngine,
        options: ServerOptions,
        tokenizer: TextTokenizer | None = None,
        scorer: StepScorer | None = None,
        chat: ChatRenderer | None = None,
    ) -> None:
        self.engine = engine
        self.scorer = scorer
        self.chat = chat  # the model family's chat format; None: Harmony (or a plain transcript), without tools
        self.options = options
        self.tokenizer = tokenizer
        self.max_batch = getattr(engine, "max_batch_size", 32)
        self.model_name = options.served_model_name or engine.model_name
        self.bounds = JsonBounds(
            max_values=options.max_json_values,
            max_depth=options.max_json_depth,
            max_string_bytes=options.max_json_string_bytes,
            max_number_chars=options.max_json_number_chars,
            max_object_members=options.max_json_object_members,
        )
        self.admission = Admission(
            options.max_queued_requests, options.max_request_memory_bytes, options.max_inflight_memory_bytes
        )
        self.shape = engine_shape(engine)  # None (a scripted engine): requests cost their Python objects only
        self.scorer_shape = host_shape(scorer.model) if scorer is not None else None
        self._pending: deque[_Job] = deque()  # admitted requests waiting for the batch engine
        self._arrived = asyncio.Event()
        self._inflight = 0  # continuous engine: jobs handed over and not done yet
        self._worker: asyncio.Task | None = None
        # parsing, checking and answering requests, off the event loop, in one thread: a parse's C calls
        # (json.loads) hold the GIL, and two threads handed it to each other while the loop waited (/health 0.3 s
        # behind 24 bodies of a million values; 0.05 s with one thread)
        self._requests = ThreadPoolExecutor(1, thread_name_prefix="policy-requests")
        self._upload = asyncio.Lock()  # weight updates, one at a time (`_one_update`)
        self.cancelled_requests = 0  # continuous engine: jobs stopped in the engine because their client went away
        # whether the engine hands each row's tokens to its watch as it samples them (else: once it is done)
        self.live_watches = bool(getattr(engine, "watches_tokens", False))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.options.max_body_bytes, middlewares=[_json_errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/update_weights", self.update_weights)
        app.router.add_post("/update_weights_from_tensors", self.update_weights_from_tensors)
        app.router.add_post("/v1/score", self.score)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app: web.Application) -> None:
        self._worker = asyncio.create_task(self._drain(), name="policy-engine-worker")

    async def _stop(self, _app: web.Application) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self._requests.shutdown(wait=False, cancel_futures=True)

    async def _off_loop(self, work: Callable[..., Result], *args) -> Result:
        """``work(*args)`` in a request thread: the event loop answers others (/health) meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._requests, work, *args)

    def _next_batch(self) -> list[_Job]:
        """Oldest job its client still waits for, plus the following ones while they fit into one engine batch."""
        jobs, size = [], 0
        while self._pending and (not jobs or size + len(self._pending[0].prompts) <= self.max_batch):
            job = self._pending.popleft()
            if not job.done.cancelled():  # its client went away while it queued
                jobs.append(job)
                size += len(job.prompts)
        return jobs

    async def _drain(self) -> None:
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            if getattr(self.engine, "continuous", False):  # each job joins the running batch at the next step
                while self._pending:
                    job = self._pending.popleft()
                    if not job.done.cancelled():  # its client went away while it queued
                        self._submit(job)
                continue
            jobs = self._next_batch()
            if not jobs:  # every queued job was cancelled
                continue
            prompts = [p for job in jobs for p in job.prompts]
            params = [p for job in jobs for p in job.params]
            try:
                results = await asyncio.to_thread(self.engine.generate_batch, prompts, params)
            except Exception:
                log.exception(
                    "engine batch of %d sequences failed; running its %d jobs one by one", len(prompts), len(jobs)
                )
                for job in jobs:  # one bad job must not fail its neighbours: each learns only its own outcome
                    await self._run_alone(job)
                continue
            start = 0
            for job in jobs:
                if not job.done.done():
                    job.done.set_result(results[start : start + len(job.prompts)])
                start += len(job.prompts)

    def _submit(self, job: _Job) -> None:
        """Continuous engine: hand the job over now; it stays counted against the queue bound until done."""
        self._inflight += 1
        try:
            if job.watches is not None and self.live_watches:
                submitted = self.engine.submit(job.prompts, job.params, job.watches)  # type: ignore[attr-defined]
            else:
                submitted = self.engine.submit(job.prompts, job.params)  # type: ignore[attr-defined]
            future = asyncio.wrap_future(submitted)
        except Exception as exc:  # refused before it ran (the engine is closed)
            self._inflight -= 1
            job.done.set_exception(exc)
            return

        def settle(done: asyncio.Future) -> None:
            self._inflight -= 1
            if job.done.done() or done.cancelled():
                return
            if done.exception() is not None:
                job.done.set_exception(done.exception())
            else:
                job.done.set_result(done.result())

        future.add_done_callback(settle)
        # the handler's task is cancelled when its client goes away (`serve`: handler_cancellation), which cancels
        # the future it awaits: the engine's rows then stop at its next step instead of decoding for no one
        job.done.add_done_callback(lambda done: self._abandoned(future) if done.cancelled() else None)

    def _abandoned(self, future: asyncio.Future) -> None:
        """A job whose client went away: stop its rows in the engine (counted when they were still running)."""
        if future.cancel():
            self.cancelled_requests += 1

    async def _run_alone(self, job: _Job) -> None:
        try:
            results = await asyncio.to_thread(self.engine.generate_batch, job.prompts, job.params)
        except Exception as exc:  # the engine failed on this job itself
            if not job.done.done():
                job.done.set_exception(exc)
            return
        if not job.done.done():
            job.done.set_result(results)

    def _check_count(self, sequences: int) -> None:
        if sequences > self.options.max_sequences_per_request:
            raise BadRequest(
                f"{sequences} sequences (prompts x n) in one request; at most "
                f"{self.options.max_sequences_per_request} (max_sequences_per_request)"
            )

    def _enqueue(
        self, prompts: list[list[int]], params: list[SamplingParams], watches: list[TextWatch] | None = None
    ) -> _Job:
        """Hand admitted rows to the engine; the job's ``done`` is the future of their completions."""
        job = _Job(prompts, params, watches)
        self._pending.append(job)
        self._arrived.set()
        return job

    async def _run(
        self, prompts: list[list[int]], params: list[SamplingParams], watches: list[TextWatch] | None = None
    ) -> list[Completion]:
        """Hand admitted rows to the engine and wait for their completions, settled by their watches."""
        job = self._enqueue(prompts, params, watches)
        try:
            results = await job.done
        finally:
            job.done.cancel()  # a no-op once done; the client went away otherwise: its rows stop
        if watches is None:
            return results
        # off the loop: an engine that hands whole completions leaves every token to decode here
        return await self._off_loop(lambda: [self._settle(c, w, len(p)) for c, w, p in zip(results, watches, prompts)])

    def _settle(self, completion: Completion, watch: TextWatch, prompt_length: int) -> Completion:
        """``completion`` as its watch saw it: fed its tokens where the engine did not, flushed, and cut after the
        token that completed a stop string (finish_reason "stop")."""
        if not self.live_watches:
            for token, logprob in zip(completion.token_ids, completion.logprobs):
                if watch(token, logprob):
                    break
        watch.finish()
        if watch.stopped_at is None:
            return completion
        return _cut(completion, watch.stopped_at + 1, prompt_length)

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ModelNotFound(
                f"The model `{model[:200]}` does not exist: this server serves `{self.model_name}` (GET /v1/models)"
            )

    def _watches(
        self, stops: list[str], rows: int, silent: frozenset[int] = frozenset(), stream: bool = False
    ) -> list[TextWatch] | None:
        """One `TextWatch` a row where stop strings or a stream need one (else None: nothing is decoded per
        token)."""
        if not stops and not stream:
            return None
        if stops:
            self._require_tokenizer("stop strings")
        return [TextWatch(self._text, stops, silent) for _ in range(rows)]

    async def _stream(
        self, request: web.Request, prompt: list[int], params: SamplingParams, watch: TextWatch, chunks
    ) -> web.StreamResponse:
        """Stream one row's completion as Server-Sent Events (``chunks``: `CompletionChunks` or `ChatChunks`)."""
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue = asyncio.Queue()  # at most one piece per token: bounded by max_tokens
        watch.sink = lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece)
        job = self._enqueue([prompt], [params], [watch])
        job.done.add_done_callback(lambda _: loop.call_soon_threadsafe(pieces.put_nowait, None))
        stream = EventStream(request, self.options.stream_write_timeout_s)
        try:
            await stream.open()
            for chunk in chunks.opening():
                await stream.send(chunk)
            while (piece := await pieces.get()) is not None:
                for chunk in chunks.piece(piece):
                    await stream.send(chunk)
            try:
                (completion,) = job.done.result()
            except Exception as exc:  # the engine failed after the headers went out: an error event
                log.exception("a streamed request failed")
                await stream.error(500, f"{type(exc).__name__}: {exc}", "server_error")
                return await stream.close()
            completion = await self._off_loop(self._settle, completion, watch, len(prompt))  # and what it held back
            loop.call_soon_threadsafe(pieces.put_nowait, None)  # after the pieces `_settle` released
            while (piece := await pieces.get()) is not None:
                for chunk in chunks.piece(piece):
                    await stream.send(chunk)
            for chunk in await self._off_loop(chunks.closing, completion, watch):
                await stream.send(chunk)
            if chunks.include_usage:
                await stream.send(chunks.usage(_usage([prompt], [completion])))
            return await stream.close()
        except StreamStalled as exc:  # a client that reads nothing: abandon it (its rows stop below)
            log.info("%s %s: %s", request.method, request.path, exc)
            if request.transport is not None:
                request.transport.abort()
            return stream.response
        except ConnectionResetError:  # the client went away between two events (aiohttp's reset error is one)
            return stream.response
        finally:
            job.done.cancel()  # a no-op once done; the client went away otherwise: its rows stop

    async def _body(self, request: web.Request, hold: Hold) -> bytes:
        """The JSON body, at most max_json_body_bytes (413), arriving within read_timeout_s (408); its bytes are
        reserved in ``hold`` as they arrive."""
        limit = self.options.max_json_body_bytes
        if (request.content_length or 0) > limit:
            raise _TooLarge(limit)
        try:  # bounded in size even without a Content-Length, and in time (a body sent a byte a minute)
            async with asyncio.timeout(self.options.read_timeout_s):
                body = await _read_up_to(request, limit + 1, hold)
                if len(body) <= limit and _short_of_its_length(request, len(body)):
                    raise BadRequest(
                        f"body ended after {len(body)} of its Content-Length {request.content_length} bytes "
                        f"(the client closed it, or sent nothing for read_timeout_s={self.options.read_timeout_s:g})"
                    )
        except TimeoutError:
            raise _ReadTimeout(self.options.read_timeout_s) from None
        if len(body) > limit:
            raise _TooLarge(limit)
        return body

    def _validate(self, body: bytes, model: type[Model], hold: Hold) -> Model:
        """``body`` as a ``model``: its shape measured in its bytes and bounded, the parse reserved, then parsed
        (policies/request_bounds.py); `BodyRefused`, `Refused` or BadRequest naming the fault."""
        hold.add(scan_bytes(len(body), self.bounds), f"scanning a body of {len(body)} bytes")
        shape = measure(body, self.bounds)
        hold.add(parse_bytes(shape), f"parsing a body of {shape.values} JSON values")
        data = load(body, self.bounds)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise BadRequest(_validation_message(exc)) from exc

    def _prompts(self, prompt: list[int] | list[list[int]] | str | list[str], hold: Hold) -> list[list[int]]:
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], str)):
            texts = [prompt] if isinstance(prompt, str) else prompt
            tokenizer = self._require_tokenizer("text prompts")
            self._check_text([len(t) for t in texts], tokenizer)
            characters = sum(len(t) for t in texts)
            hold.add(TOKENIZE_BYTES_PER_CHAR * characters, f"tokenizing {characters} characters")
            return tokenizer.encode_many(texts)  # releases the GIL
        if isinstance(prompt[0], int):
            return [prompt]  # type: ignore[list-item]
        return prompt  # type: ignore[return-value]

    def _check_rows(self, prompts: list[list[int]], params: SamplingParams) -> None:
        """BadRequest for a prompt the engine cannot serve (each distinct prompt once, before its ``n`` copies)."""
        for prompt in prompts:
            try:
                self.engine.check_request(prompt, params)
            except EngineError as exc:
                raise BadRequest(str(exc)) from exc

    def _admit_rows(
        self, hold: Hold, prompts: list[list[int]], n: int, params: SamplingParams
    ) -> tuple[list[list[int]], list[SamplingParams]]:
        """Check the rows, reserve their memory and admit them; the rows (each prompt ``n`` times) and their
        params (seed, seed + 1, ... a row)."""
        self._check_rows(prompts, params)
        lengths = [len(p) for p in prompts]
        continuous = bool(getattr(self.engine, "continuous", False))
        cost = completion_bytes(self.shape, lengths, n, params.max_tokens, params.return_routed_experts, continuous)
        hold.add(cost, f"{len(prompts) * n} sequences of up to {max(lengths)} + {params.max_tokens} tokens")
        hold.admit()
        rows = [p for p in prompts for _ in range(n)]
        return rows, per_prompt(params, len(rows))

    def _check_text(self, lengths: list[int], tokenizer: TextTokenizer) -> None:
        """BadRequest for a text that cannot fit the context whatever it encodes to, before tokenizing it (a
        megabyte of text took seconds to tokenize, on the event loop, only to be refused as too long)."""
        context = self.engine.context_length
        for length in lengths:
            if tokenizer.too_long(length, context):
                raise BadRequest(
                    f"text of {length} characters cannot fit the context of {context} tokens (a token of this "
                    f"tokenizer stands for at most {tokenizer.max_token_chars} characters)"
                )

    def _require_tokenizer(self, what: str) -> TextTokenizer:
        if self.tokenizer is None:
            raise BadRequest(f"{what} need a tokenizer; this server has none (set `tokenizer:` in its config)")
        return self.tokenizer

    def _token_text(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer else f"token_id:{token}"

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens) if self.tokenizer else ""

    async def completions(self, request: web.Request) -> web.StreamResponse:
        with self.admission.hold() as hold:
            body = await self._body(request, hold)
            req, prompts, params = await self._off_loop(self._completion_rows, body, hold)
            watches = self._watches(req.stop_strings, len(prompts), stream=req.stream)
            if req.stream:
                assert watches is not None
                chunks = CompletionChunks(self, req, prompts[0])
                return await self._stream(request, prompts[0], params[0], watches[0], chunks)
            results = await self._run(prompts, params, watches)
            return await self._off_loop(self._completion_answer, prompts, results, watches)

    def _completion_rows(
        self, body: bytes, hold: Hold
    ) -> tuple[CompletionRequest, list[list[int]], list[SamplingParams]]:
        req = self._validate(body, CompletionRequest, hold)
        self._check_model(req.model)
        count = 1 if isinstance(req.prompt, str) or isinstance(req.prompt[0], int) else len(req.prompt)
        self._check_count(count * req.n)  # before tokenizing: a body of a million short texts is refused at once
        if req.stream and count > 1:
            raise BadRequest(f"stream: true streams one sequence; this request has {count} prompts")
        if req.stop_strings:
            self._require_tokenizer("stop strings")
        prompts = self._prompts(req.prompt, hold)
        rows, params = self._admit_rows(hold, prompts, req.n, _sampling(req, req.max_tokens))
        return req, rows, params

    def _completion_answer(
        self, prompts: list[list[int]], results: list[Completion], watches: list[TextWatch] | None
    ) -> web.Response:
        choices = [
            self._completion_choice(i, prompts[i], c, watches[i] if watches else None) for i, c in enumerate(results)
        ]
        body = CompletionResponse(
            id=f"cmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.model_name,
            choices=choices,
            usage=_usage(prompts, results),
            weights_version=_newest(results),
        )
        return web.json_response(body.model_dump())

    def completion_logprobs(self, tokens: list[int], logprobs: list[float], start: int = 0) -> CompletionLogprobs:
        """Each token's text, logprob and offset (from ``start``: a stream's earlier tokens)."""
        pieces = [self._token_text(t) for t in tokens]
        offsets, at = [], start
        for piece in pieces:
            offsets.append(at)
            at += len(piece)
        return CompletionLogprobs(tokens=pieces, token_logprobs=logprobs, text_offset=offsets)

    def _completion_choice(
        self, index: int, prompt: list[int], c: Completion, watch: TextWatch | None
    ) -> CompletionChoice:
        return CompletionChoice(
            index=index,
            text=watch.text if watch is not None else self._text(c.token_ids),
            logprobs=self.completion_logprobs(c.token_ids, c.logprobs),
            finish_reason=c.finish_reason,
            stop_reason=watch.stop_reason if watch is not None else None,
            token_ids=c.token_ids,
            raw_logprobs=c.raw_logprobs,
            routed_experts=c.routed_experts,
            token_versions=c.versions,
            prompt_token_ids=prompt,
        )

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        with self.admission.hold() as hold:
            body = await self._body(request, hold)
            req, prompts, params = await self._off_loop(self._chat_rows, body, hold)
            silent = frozenset(params[0].stop_token_ids)  # the turn's end adds no text
            watches = self._watches(req.stop_strings, len(prompts), silent, stream=req.stream)
            if req.stream:
                assert watches is not None
                chunks = ChatChunks(self, req, prompts[0], silent)
                return await self._stream(request, prompts[0], params[0], watches[0], chunks)
            results = await self._run(prompts, params, watches)
            return await self._off_loop(self._chat_answer, req, prompts[0], results, watches, silent)

    def _chat_rows(
        self, body: bytes, hold: Hold
    ) -> tuple[ChatCompletionRequest, list[list[int]], list[SamplingParams]]:
        req = self._validate(body, ChatCompletionRequest, hold)
        self._check_model(req.model)
        tokenizer = self._require_tokenizer("chat completions")
        self._check_count(req.n)
        messages, tools = conversation(req), tool_schemas(req)
        # each message takes at least its 3 special tokens: so many messages, or so much text, cannot fit
        if 3 * len(messages) > self.engine.context_length:
            raise BadRequest(
                f"{len(messages)} messages cannot fit the context of {self.engine.context_length} tokens "
                "(each takes at least 3)"
            )
        characters = schema_characters(tools) + sum(
            len(m["role"])
            + len(m["content"])
            + sum(len(c["name"]) + len(c["arguments"]) for c in m.get("tool_calls", ()))
            for m in messages
        )
        self._check_text([characters], tokenizer)
        hold.add(TOKENIZE_BYTES_PER_CHAR * characters, f"rendering {characters} characters of chat")
        prompt, stops = self._render_chat(tokenizer, messages, tools)
        max_tokens = req.max_completion_tokens or req.max_tokens or 256
        rows, params = self._admit_rows(hold, [prompt], req.n, _sampling(req, max_tokens, stops))
        return req, rows, params

    def _render_chat(
        self, tokenizer: TextTokenizer, messages: list[dict], tools: list[dict]
    ) -> tuple[list[int], list[int]]:
        """(prompt ids, stop ids) in the model family's chat format, or in Harmony / a plain transcript."""
        with_tools = bool(tools) or any(m["role"] == "tool" or "tool_calls" in m for m in messages)
        if self.chat is not None and (with_tools or not self.chat.tools_only):
            try:
                return self.chat.render(messages, tools), self.chat.stop_ids()
            except ValueError as exc:
                raise BadRequest(f"cannot render the chat in the {self.chat.name} format: {exc}") from exc
        if with_tools:
            raise BadRequest(
                "tools and tool messages need a chat format with tool calls: a model family's (a chat template "
                "beside the tokenizer: Qwen, Llama 3, DeepSeek) or Harmony's (a tokenizer with every Harmony special "
                "token); this server's tokenizer has neither"
            )
        return tokenizer.render_chat([(m["role"], m["content"]) for m in messages])

    def chat_message(self, req: ChatCompletionRequest, c: Completion, watch: TextWatch | None, silent: frozenset[int]):
        """The response's assistant message and finish reason of one completion (policies/chat_tools.py)."""
        tokenizer = self._require_tokenizer("chat completions")
        if watch is not None:
            text = watch.text
        else:  # the turn's end adds no text
            text = tokenizer.decode(c.token_ids[:-1] if c.token_ids and c.token_ids[-1] in silent else c.token_ids)
        offered = {tool.function.name for tool in req.offered_tools}
        cut = watch is not None and watch.stopped
        reply = self.chat.parse(c.token_ids) if self.chat is not None and offered and not cut else None
        return assistant_turn(reply, text, offered, c.finish_reason)

    def _chat_answer(
        self,
        req: ChatCompletionRequest,
        prompt: list[int],
        results: list[Completion],
        watches: list[TextWatch] | None,
        silent: frozenset[int],
    ) -> web.Response:
        choices = []
        for i, c in enumerate(results):
            watch = watches[i] if watches else None
            message, finish_reason = self.chat_message(req, c, watch, silent)
            logprobs = None
            if req.logprobs:
                logprobs = ChatChoiceLogprobs(
                    content=[
                        ChatTokenLogprob(token=self._token_text(t), logprob=lp)
                        for t, lp in zip(c.token_ids, c.logprobs)
                    ]
                )
            choices.append(
                ChatChoice(
                    index=i,
                    message=message,
                    logprobs=logprobs,
                    finish_reason=finish_reason,
                    stop_reason=watch.stop_reason if watch is not None else None,
                    token_ids=c.token_ids,
                    raw_logprobs=c.raw_logprobs,
                    routed_experts=c.routed_experts,
                    token_versions=c.versions,
                )
            )
        body = ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.model_name,
            choices=choices,
            usage=_usage([prompt] * req.n, results),
            weights_version=_newest(results),
        )
        return web.json_response(body.model_dump())

    async def models(self, _request: web.Request) -> web.Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "code-rl-gym",
            "max_model_len": self.engine.context_length,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, _request: web.Request) -> web.Response:
        body = {
            "status": "ok",
            "model": self.model_name,
            "weights_version": self.engine.weights_version,
            "queued_requests": len(self._pending),
            "context_length": self.engine.context_length,
            "cancelled_requests": self.cancelled_requests,
            "admission": self.admission.counts(),
        }
        counts = getattr(self.engine, "replica_counts", None)  # a `ReplicatedEngine` (engine.replicas > 1)
        if counts is not None:
            body["replicas"] = counts()
        return web.json_response(body)

    async def update_weights(self, request: web.Request) -> web.Response:
        with self.admission.hold() as hold:  # for its body; the load itself is the update lane's (`_one_update`)
            body = await self._body(request, hold)
            req = await self._off_loop(self._validate, body, UpdateWeightsRequest, hold)
        return await self._one_update(self._load_path(req))

    async def _load_path(self, req: UpdateWeightsRequest) -> web.Response:
        try:
            version = await asyncio.to_thread(self.engine.load_checkpoint, Path(req.path), req.version)
        except (OSError, KeyError, ValueError, SafetensorError) as exc:  # unreadable, not safetensors, wrong shapes
            return _error(400, f"cannot load weights from {req.path}: {exc}", "invalid_request_error")
        return web.json_response({"weights_version": version})

    async def _one_update(self, update: Coroutine[None, None, web.Response]) -> web.Response:
        """Run a weight update alone: one is read and loaded at a time (each may hold `max_body_bytes`), to its
        end even when its client goes away (its handler is cancelled, not the load: the next update starts after
        it, so versions load in order); one that waits `read_timeout_s` for another is a 503."""
        try:
            async with asyncio.timeout(self.options.read_timeout_s):
                await self._upload.acquire()
        except TimeoutError:
            update.close()
            return _error(503, "another weight update is in progress; retry later", "overloaded")
        task = asyncio.ensure_future(update)
        task.add_done_callback(lambda _: self._upload.release())
        return await asyncio.shield(task)

    async def update_weights_from_tensors(self, request: web.Request) -> web.Response:
        raw_version = request.query.get("version")
        try:
            version = None if raw_version is None else int(raw_version[:20])  # 2^63 has 19 digits
            if version is not None and not (0 <= version <= MAX_WEIGHTS_VERSION and len(raw_version) <= 20):
                raise ValueError(f"must be 0 to {MAX_WEIGHTS_VERSION}")
        except ValueError as exc:
            return _error(
                400, f"version={raw_version!r} is not a non-negative integer ({exc})", "invalid_request_error"
            )
        if (request.content_length or 0) > self.options.max_body_bytes:
            raise _TooLarge(self.options.max_body_bytes, "max_body_bytes")
        return await self._one_update(self._upload_and_load(request, version))

    async def _upload_and_load(self, request: web.Request, version: int | None) -> web.Response:
        # the update lane: counted in the memory in flight (requests see less room), never refused for load
        with self.admission.hold() as hold:
            try:
                data = await _read_upload(request, self.options.max_body_bytes, self.options.read_timeout_s, hold)
            except _TooLarge as exc:
                return _error(413, str(exc), "invalid_request_error")
            except _ReadTimeout as exc:
                return _error(408, str(exc), "invalid_request_error")
            except (OSError, aiohttp.ClientError) as exc:  # the client went away mid-upload: nobody reads this answer
                return _error(400, f"upload ended early: {type(exc).__name__}: {exc}", "invalid_request_error")
            if not data:
                return _error(400, "body is empty: send the tensors as safetensors bytes", "invalid_request_error")
            try:
                version = await asyncio.to_thread(self.engine.load_safetensors, data, version)
            except (KeyError, ValueError, SafetensorError) as exc:
                return _error(400, f"cannot load the uploaded tensors: {exc}", "invalid_request_error")
            return web.json_response({"weights_version": version})

    async def score(self, request: web.Request) -> web.Response:
        """p(correct) per step slot of each sequence (policies/scorer.py), off the event loop."""
        if self.scorer is None:
            raise BadRequest("this server has no process verifier; set `verifier: CHECKPOINT_DIR` in its config")
        with self.admission.hold() as hold:
            body = await self._body(request, hold)
            req, positions = await self._off_loop(self._score_rows, body, hold)
            scores = await asyncio.to_thread(self.scorer.score, req.input_ids, positions)
            answer = ScoreResponse(
                model=self.scorer.name, positions=positions, scores=scores, label_ids=list(self.scorer.label_ids)
            )
            return await self._off_loop(lambda: web.json_response(answer.model_dump()))

    def _score_rows(self, body: bytes, hold: Hold) -> tuple[ScoreRequest, list[list[int]]]:
        assert self.scorer is not None
        req = self._validate(body, ScoreRequest, hold)
        try:
            positions = self.scorer.resolve(req, self.options.max_sequences_per_request)
        except ScoreError as exc:
            raise BadRequest(str(exc)) from exc
        width, slots = max(len(ids) for ids in req.input_ids), sum(len(p) for p in positions)
        cost = score_bytes(self.scorer_shape, len(req.input_ids), width, slots)
        hold.add(cost, f"scoring {len(req.input_ids)} sequences of up to {width} tokens at {slots} positions")
        hold.admit()
        return req, positions


def _sampling(req: CompletionRequest | ChatCompletionRequest, max_tokens: int, stops: list[int] = ()) -> SamplingParams:
    """The request's sampling params; BadRequest where its fields combine into invalid ones."""
    try:
        return req.sampling_params(max_tokens, stops)
    except ValidationError as exc:
        raise BadRequest(_validation_message(exc)) from exc


async def _read_up_to(request: web.Request, size: int, hold: Hold) -> bytes:
    """The body, up to ``size`` bytes: read until it ends or that many arrived (one `read(n)` returns what has
    arrived so far, which cut bodies sent in several pieces short); each piece reserved in ``hold`` first."""
    body = bytearray()
    while len(body) < size:
        chunk = await request.content.read(size - len(body))
        if not chunk:  # the end of the body
            break
        hold.add(BODY_COPIES * len(chunk), "its body")
        body += chunk
    return bytes(body)


MIN_UPLOAD_RATE = 1 << 20  # bytes/s a weight upload must keep up, past its first read_timeout_s
UPLOAD_COPIES = 3  # an upload's bytearray, its bytes and the tensors loaded from them


async def _read_upload(request: web.Request, limit: int, timeout_s: float, hold: Hold) -> bytes:
    """A weight upload's body (inflated, if compressed), at most ``limit`` bytes (`_TooLarge`), arriving within
    ``timeout_s`` plus one second per `MIN_UPLOAD_RATE` bytes received (`_ReadTimeout`): a 1 GiB upload has 17
    minutes, a body sent a byte every few seconds is cut after ~``timeout_s``."""
    loop = asyncio.get_running_loop()
    started, body = loop.time(), bytearray()
    while True:
        allowance = started + timeout_s + len(body) / MIN_UPLOAD_RATE - loop.time()
        try:
            if allowance <= 0:
                raise TimeoutError
            async with asyncio.timeout(allowance):
                chunk = await request.content.readany()
        except TimeoutError:
            raise _ReadTimeout(timeout_s, uploads=True) from None
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > limit:
            raise _TooLarge(limit, "max_body_bytes")
        # the bytes, their copy as bytes and the tensors loaded from them
        hold.add(UPLOAD_COPIES * len(chunk), "its weights", (UPLOAD_COPIES * limit, "max_body_bytes"), always=True)
        body += chunk


def _short_of_its_length(request: web.Request, received: int) -> bool:
    """Whether the body ended before its Content-Length (the client went away); that length counts the
    bytes on the wire, so a compressed body (Content-Encoding: gzip) is not compared with what it inflates to."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    return encoding in ("", "identity") and bool(request.content_length) and received < request.content_length


class _ReadTimeout(Exception):
    def __init__(self, seconds: float, uploads: bool = False) -> None:
        rate = f" plus 1 s per {MIN_UPLOAD_RATE >> 20} MiB received" if uploads else ""
        super().__init__(f"request body not received within {seconds:g} s{rate} (read_timeout_s)")


class _TooLarge(Exception):
    def __init__(self, limit: int, option: str = "max_json_body_bytes") -> None:
        super().__init__(f"request body larger than {limit} bytes ({option})")


def _newest(results: list[Completion]) -> int:
    """The response's ``weights_version``: the newest version that sampled any of its tokens (every token's is at
    most this, which a client checks)."""
    return max(max(c.versions, default=c.weights_version) for c in results)


def _cut(c: Completion, tokens: int, prompt_length: int) -> Completion:
    """``c`` ended after its first ``tokens`` tokens by a stop string: finish_reason "stop", the lists cut alike."""
    update: dict = {"finish_reason": "stop"}
    if tokens < len(c.token_ids):
        update.update(
            token_ids=c.token_ids[:tokens],
            logprobs=c.logprobs[:tokens],
            raw_logprobs=c.raw_logprobs[:tokens],
            token_versions=c.versions[:tokens],
        )
        if c.routed_experts is not None:  # (L, P + T, K): the new last token is never fed forward either
            routes = np.array(c.routed_experts)[:, : prompt_length + tokens].copy()
            routes[:, -1] = -1
            update["routed_experts"] = Routes(routes)
    return c.model_copy(update=update)


def _usage(prompts: list[list[int]], results: list[Completion]) -> Usage:
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(c.token_ids) for c in results)
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


async def serve(server: PolicyServer, sock: socket.socket) -> None:
    """Run on a listening socket (`policies.serve_cli.listen`) until cancelled; logs the bound address."""
    # keepalive_timeout also bounds a connection that never completes its first request line and headers
    runner = web.AppRunner(
        server.app(),
        access_log=None,
        keepalive_timeout=server.options.read_timeout_s,
        handler_cancellation=True,  # a client that goes away cancels its handler, and so its engine rows
    )
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=LISTEN_BACKLOG)  # aiohttp listens again on the socket, with this
    await site.start()
    bound = sock.getsockname()
    log.info("policy server listening on http://%s:%d (model %s)", bound[0], bound[1], server.model_name)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
