"""Shared batches for concurrent episodes: the rollout engine as the trainer drives it in process.

`BatchingEngine` is a trio `RolloutEngine` over a synchronous engine (`GenerationEngine`). Episodes
call `generate` with one context each. A continuous engine (`GenerationEngine.continuous`) takes
every call as it comes (`submit`) and joins its rows into the running batch at the next decode
step; otherwise calls that arrive together are served in one `generate_batch`, run in a worker
thread so tools and grading go on meanwhile. Each row keeps its own seed, so a sample does not
depend on its batch mates. (The routes of R3 are kept by `trainer.routes.RouteRecorder`.)
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import trio

from policies.sampling import Completion, EngineError, SamplingParams, per_prompt


@dataclass
class _Request:
    prompts: list[list[int]]
    params: SamplingParams
    results: list[Completion] | None = None
    error: Exception | None = None
    done: bool = False


@dataclass
class BatchingEngine:
    """Serve concurrent `generate` calls in shared batches (see the module docstring)."""

    engine: object  # a ServingEngine: check_request + generate_batch
    max_batch_size: int = 32
    wait_s: float = 0.002
    """How long the batch leader waits for more calls to join."""
    batches: list[int] = field(default_factory=list)
    """Rows of every batch run (a continuous engine: of every call handed over; it batches them itself)."""

    def __post_init__(self) -> None:
        self._pending: list[_Request] = []
        self._busy = False
        self._finished = trio.Event()

    @property
    def weights_version(self) -> int:
        return int(getattr(self.engine, "weights_version", 0))

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        for prompt in prompts:
            self.engine.check_request(prompt, params)  # raises EngineError for this caller only
        if getattr(self.engine, "continuous", False):
            self.batches.append(len(prompts))
            return await wait_future(self.engine.submit(prompts, per_prompt(params, len(prompts))))
        request = _Request(prompts=prompts, params=params)
        self._pending.append(request)
        while not request.done:
            if self._busy:
                await self._finished.wait()
                continue
            await self._lead()
        if request.error is not None:
            raise request.error
        assert request.results is not None
        return request.results

    async def _lead(self) -> None:
        """Take pending calls up to max_batch_size rows and run them as one batch."""
        self._busy, self._finished = True, trio.Event()
        try:
            await trio.sleep(self.wait_s)
            batch: list[_Request] = []
            rows = 0
            while self._pending and (not batch or rows + len(self._pending[0].prompts) <= self.max_batch_size):
                request = self._pending.pop(0)
                batch.append(request)
                rows += len(request.prompts)
            prompts = [p for r in batch for p in r.prompts]
            params = [p for r in batch for p in per_prompt(r.params, len(r.prompts))]  # seeds per call
            self.batches.append(len(prompts))
            try:
                results = await trio.to_thread.run_sync(self.engine.generate_batch, prompts, params)
            except EngineError as exc:
                for request in batch:
                    request.error, request.done = exc, True
                return
            offset = 0
            for request in batch:
                request.results = results[offset : offset + len(request.prompts)]
                offset += len(request.prompts)
                request.done = True
        finally:
            self._busy = False
            self._finished.set()


async def wait_future(future: Future):
    """The result of a `concurrent.futures.Future` completed by another thread, without holding a trio thread."""
    token, done = trio.lowlevel.current_trio_token(), trio.Event()

    def wake(_: Future) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:  # the run ended while the rows were decoding: nobody waits
            pass

    future.add_done_callback(wake)
    await done.wait()
    return future.result()
