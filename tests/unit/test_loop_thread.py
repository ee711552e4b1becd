"""gym.integrations.loop_thread: one trio loop in a thread, held resources released on close, failures as errors."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import pytest
import trio

from gym.integrations.loop_thread import LoopThread, LoopThreadError


class Resource:
    def __init__(self) -> None:
        self.opened = self.released = 0
        self.holder_done = False
        self.thread: str | None = None

    @asynccontextmanager
    async def held(self, closing: trio.Event):
        self.opened += 1
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self.holder, closing)
            try:
                yield
            finally:
                self.released += 1

    async def holder(self, closing: trio.Event) -> None:
        await closing.wait()  # a task that outlives every call and ends with the loop
        self.holder_done = True

    async def where(self, value: int) -> tuple[int, str]:
        await trio.sleep(0)
        return value * 2, threading.current_thread().name


def test_calls_from_threads_run_in_the_loop_and_close_releases_once():
    resource = Resource()
    loop = LoopThread("test-loop", resource.held, 10)
    assert resource.opened == 0  # started on first use
    results: list[tuple[int, str]] = []
    callers = [threading.Thread(target=lambda i=i: results.append(loop.run(resource.where, i))) for i in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)
    assert sorted(results) == [(0, "test-loop"), (2, "test-loop"), (4, "test-loop"), (6, "test-loop")]
    assert resource.opened == 1 and resource.released == 0 and not loop.ended
    loop.close()
    loop.close()  # idempotent
    assert resource.released == 1 and resource.holder_done and loop.ended and loop.failed is None
    with pytest.raises(LoopThreadError, match="closed"):  # one life: a closed loop never starts again
        loop.run(resource.where, 1)
    assert resource.opened == 1


def test_a_loop_that_cannot_open_its_resources_says_why_to_every_caller():
    @asynccontextmanager
    async def broken(_closing):
        raise ConnectionError("the engine did not answer")
        yield  # pragma: no cover

    loop = LoopThread("test-broken", broken, 10)
    for _ in range(2):
        with pytest.raises(LoopThreadError, match="the engine did not answer"):
            loop.start()
    assert loop.ended and isinstance(loop.failed, ConnectionError)
    loop.close()


def test_a_call_into_a_loop_that_ended_under_it_is_run_finished():
    resource = Resource()
    loop = LoopThread("test-ended", resource.held, 10)
    token = loop.start()

    async def boom() -> None:
        raise ConnectionError("the engine went away")  # a held task dies: the loop ends by itself

    trio.from_thread.run_sync(resource.nursery.start_soon, boom, trio_token=token)
    loop._thread.join(10)
    with pytest.raises(trio.RunFinishedError):
        trio.from_thread.run(resource.where, 1, trio_token=token)
    assert loop.ended and "the engine went away" in repr(loop.failed)
    with pytest.raises(LoopThreadError, match="the engine went away"):
        loop.run(resource.where, 1)
    loop.close()
