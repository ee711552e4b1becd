"""The real policy server (`policies.server`, aiohttp) in a thread, serving the scripted reference policy.

``with serving(ServedReference(env)) as url:`` gives ``http://127.0.0.1:PORT`` for an `HttpEngine` or
``rollout --policy URL``; ``refused`` prompt prefixes make the engine refuse those requests (HTTP 400:
the episode is masked), so a test can mask chosen episodes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from aiohttp import web

from gym.environment import Environment
from gym.scripted import load_scripted
from policies.sampling import Completion, EngineError, SamplingParams
from policies.serve_config import ServerOptions
from policies.server import PolicyServer


class ServedReference:
    """The scripted reference policy as a `ServingEngine` (what the server drives)."""

    model_name = "scripted-reference"
    context_length = 1 << 16

    def __init__(self, env: Environment, weights_version: int = 0, refused: Sequence[Sequence[int]] = ()) -> None:
        self.policy = load_scripted("reference", env)
        self.vocab_size = env.tokenizer.vocab_size
        self.weights_version = weights_version
        self.refused = [list(prefix) for prefix in refused]
        self.batches: list[int] = []

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise EngineError("prompt is empty")
        if any(prompt[: len(prefix)] == prefix for prefix in self.refused):
            raise EngineError("this prompt is refused by the test")

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        self.batches.append(len(prompts))
        return [
            self.policy.complete(p, q).model_copy(update={"weights_version": self.weights_version})
            for p, q in zip(prompts, params)
        ]

    def load_checkpoint(self, path, version=None) -> int:
        raise NotImplementedError

    def load_safetensors(self, data, version=None) -> int:
        raise NotImplementedError


@contextmanager
def serving(engine: ServedReference) -> Iterator[str]:
    """Serve ``engine`` on a free local port in a thread; yields its base URL, stops the server on exit."""
    with serving_server(PolicyServer(engine, ServerOptions(port=0))) as url:
        yield url


@contextmanager
def serving_server(server: PolicyServer) -> Iterator[str]:
    """Serve ``server`` on a free local port in a thread (as `policies.server.serve` runs it: a client that goes
    away cancels its handler); yields its base URL, stops the server on exit."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()
