"""A streamed answer: Server-Sent Events in OpenAI's chunk format, ending with ``data: [DONE]``.

Each event is ``data: {chunk JSON}`` and a blank line, as OpenAI and vLLM send them and the openai client's
stream iterator reads them. Every write is bounded in time (``write_timeout_s``): a client that stops reading
fills the socket's buffers, the write then waits for it, and past the bound the stream is abandoned
(`StreamStalled`), which frees the request's engine rows and memory like a client that went away.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from aiohttp import web
from pydantic import BaseModel

from policies.protocol import (
    ChatChoiceLogprobs,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatTokenLogprob,
    CompletionChunk,
    CompletionChunkChoice,
    ToolCallDelta,
    Usage,
)
from policies.sampling import Completion
from policies.stop_strings import Piece, TextWatch

DONE = b"data: [DONE]\n\n"


class StreamStalled(Exception):
    """The client read nothing for ``write_timeout_s`` while the server had an event to send."""


class EventStream:
    """One response's events; `open` sends the headers (the status is 200 from then on)."""

    def __init__(self, request: web.Request, write_timeout_s: float) -> None:
        self.request = request
        self.write_timeout_s = write_timeout_s
        self.response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def open(self) -> None:
        await self._bounded(self.response.prepare(self.request))

    async def send(self, chunk: BaseModel) -> None:
        await self._write(b"data: " + chunk.model_dump_json().encode() + b"\n\n")

    async def error(self, status: int, message: str, kind: str) -> None:
        """An error after the headers went out (the engine failed mid-stream): one event the openai client
        raises as an APIError, as vLLM sends it."""
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
        await self._write(b"data: " + json.dumps(body).encode() + b"\n\n")

    async def close(self) -> web.StreamResponse:
        await self._write(DONE)
        await self._bounded(self.response.write_eof())
        return self.response

    async def _write(self, data: bytes) -> None:
        await self._bounded(self.response.write(data))

    async def _bounded(self, step) -> None:
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await step
        except TimeoutError:
            raise StreamStalled(
                f"the client read nothing for {self.write_timeout_s:g} s of a streamed answer (stream_write_timeout_s)"
            ) from None


class _Chunks:
    """The chunks of one streamed row: an opening, one per released `Piece`, a closing, the usage."""

    def __init__(self, server, req, prompt: list[int]) -> None:
        self.server = server
        self.req = req
        self.prompt = prompt
        self.id = f"{self.prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)

    prefix = "cmpl"

    def opening(self) -> list[BaseModel]:
        return []

    def piece(self, piece: Piece) -> list[BaseModel]:
        raise NotImplementedError

    def closing(self, completion: Completion, watch: TextWatch) -> list[BaseModel]:
        raise NotImplementedError

    def usage(self, usage: Usage) -> BaseModel:
        raise NotImplementedError


class CompletionChunks(_Chunks):
    """`CompletionChunk`s: text, token ids and logprobs per piece; the finish reason last."""

    def __init__(self, server, req, prompt: list[int]) -> None:
        super().__init__(server, req, prompt)
        self.offset = 0  # characters of token text so far (logprobs.text_offset)

    def _chunk(self, choices: list[CompletionChunkChoice], **fields) -> CompletionChunk:
        return CompletionChunk(
            id=self.id, created=self.created, model=self.server.model_name, choices=choices, **fields
        )

    def piece(self, piece: Piece) -> list[BaseModel]:
        logprobs = self.server.completion_logprobs(piece.tokens, piece.logprobs, self.offset)
        self.offset += sum(len(text) for text in logprobs.tokens)
        choice = CompletionChunkChoice(index=0, text=piece.text, logprobs=logprobs, token_ids=piece.tokens)
        return [self._chunk([choice])]

    def closing(self, completion: Completion, watch: TextWatch) -> list[BaseModel]:
        choice = CompletionChunkChoice(
            index=0,
            text="",
            logprobs=None,
            finish_reason=completion.finish_reason,
            stop_reason=watch.stop_reason,
            token_ids=[],
        )
        newest = max(completion.versions, default=completion.weights_version)
        return [self._chunk([choice], weights_version=newest)]

    def usage(self, usage: Usage) -> BaseModel:
        return self._chunk([], usage=usage)


class ChatChunks(_Chunks):
    """`ChatCompletionChunk`s: the assistant role first, then the content as it is released; with tools offered,
    the turn is parsed once it is whole, so its content or tool call comes in one chunk before the finish."""

    prefix = "chatcmpl"

    def __init__(self, server, req, prompt: list[int], silent: frozenset[int]) -> None:
        super().__init__(server, req, prompt)
        self.silent = silent
        self.buffered = bool(req.offered_tools) and server.chat is not None
        self.tokens: list[int] = []  # buffered: the turn so far
        self.logprobs: list[float] = []

    def _chunk(self, choices: list[ChatChunkChoice], **fields) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.server.model_name, choices=choices, **fields
        )

    def _logprobs(self, tokens: list[int], logprobs: list[float]) -> ChatChoiceLogprobs | None:
        if not self.req.logprobs:
            return None
        text = self.server._token_text
        return ChatChoiceLogprobs(
            content=[ChatTokenLogprob(token=text(t), logprob=lp) for t, lp in zip(tokens, logprobs)]
        )

    def opening(self) -> list[BaseModel]:
        return [self._chunk([ChatChunkChoice(index=0, delta=ChatDelta(role="assistant", content=""))])]

    def piece(self, piece: Piece) -> list[BaseModel]:
        if self.buffered:
            self.tokens += piece.tokens
            self.logprobs += piece.logprobs
            return []
        delta = ChatDelta(content=piece.text)
        logprobs = self._logprobs(piece.tokens, piece.logprobs)
        return [self._chunk([ChatChunkChoice(index=0, delta=delta, logprobs=logprobs, token_ids=piece.tokens)])]

    def closing(self, completion: Completion, watch: TextWatch) -> list[BaseModel]:
        message, reason = self.server.chat_message(self.req, completion, watch, self.silent)
        chunks: list[BaseModel] = []
        if self.buffered:
            calls = [
                ToolCallDelta(index=i, id=call.id, function=call.function)
                for i, call in enumerate(message.tool_calls or [])
            ]
            delta = ChatDelta(content=message.content, tool_calls=calls or None)
            logprobs = self._logprobs(self.tokens, self.logprobs)
            chunks.append(
                self._chunk([ChatChunkChoice(index=0, delta=delta, logprobs=logprobs, token_ids=self.tokens)])
            )
        newest = max(completion.versions, default=completion.weights_version)
        finish = ChatChunkChoice(index=0, delta=ChatDelta(), finish_reason=reason, stop_reason=watch.stop_reason)
        chunks.append(self._chunk([finish], weights_version=newest))
        return chunks

    def usage(self, usage: Usage) -> BaseModel:
        return self._chunk([], usage=usage)
