"""A workspace pool in a trio loop of its own thread, serving callers on an asyncio loop (an aiohttp server).

The pool and its workspaces are trio objects. A caller on asyncio hands over a job, an async function of the
pool, with `PoolThread.submit`, and awaits an asyncio future: neither loop blocks on the other (the job starts
through ``TrioToken.run_sync_soon``, its outcome comes back through ``call_soon_threadsafe``). At most
``concurrency`` jobs run at once; the others wait their turn in arrival order (trio's `CapacityLimiter` is
FIFO). A caller cancelled while it waits (its HTTP client went away) cancels its job in the trio loop, and the
job's workspace is destroyed on that path as on every other (`WorkspacePool.acquire`). `close` cancels what
runs, closes the pool (its containers removed, shielded) and joins the thread; the pool's ``atexit`` cleanup and
``gym gc`` are the backstops for an exit that skips it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from sandbox.config import SandboxConfig
from sandbox.fleet import open_pool

log = logging.getLogger(__name__)
T = TypeVar("T")
CLOSE_TIMEOUT_S = 120.0  # the pool's drain removes every container it holds, each an engine call


class PoolClosed(RuntimeError):
    """The pool's loop ended before (or while) a job ran."""


class PoolThread:
    """One pool (`sandbox.fleet.open_pool`: one engine or several) served from a trio loop in a thread."""

    def __init__(self, config: SandboxConfig, concurrency: int) -> None:
        self.config = config
        self.concurrency = concurrency
        self.pool = None
        self.running = 0  # jobs holding a slot of ``concurrency``
        self.waiting = 0  # jobs waiting for one
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    def start(self, timeout_s: float = 300.0) -> None:
        """Open the pool (its garbage collection, image check and first warm containers start) and return once it
        is open; what opening it raised is raised here (`ImageMissing`, `EngineUnreachable`, ...)."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="gym-pool", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise PoolClosed(f"the workspace pool did not open within {timeout_s:.0f}s")
        if self._failed is not None:
            raise self._failed

    def _run(self, ready: threading.Event) -> None:
        try:
            trio.run(self._serve, ready)
        except BaseException as exc:  # opening the pool failed, or its loop died: callers get PoolClosed
            self._failed = exc
            if ready.is_set():
                log.exception("the workspace pool's loop ended")
        finally:
            self._token = None
            ready.set()

    async def _serve(self, ready: threading.Event) -> None:
        self._closing = trio.Event()
        self._limiter = trio.CapacityLimiter(self.concurrency)
        async with open_pool(self.config) as pool, trio.open_nursery() as nursery:
            self.pool, self._nursery = pool, nursery
            self._token = trio.lowlevel.current_trio_token()
            ready.set()
            await self._closing.wait()
            nursery.cancel_scope.cancel()

    def submit(self, job: Callable[..., Awaitable[T]], *args: Any) -> asyncio.Future[T]:
        """Run ``job(pool, *args)`` in the pool's loop; its outcome (or exception) comes back in the future, which
        the calling asyncio loop may cancel (the job is then cancelled too)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        token = self._token
        if token is None:
            future.set_exception(PoolClosed(f"the workspace pool is not running: {self._failed!r}"))
            return future
        handle = _Cancel()
        try:
            token.run_sync_soon(self._nursery.start_soon, self._job, loop, future, handle, job, args)
        except trio.RunFinishedError:
            future.set_exception(PoolClosed("the workspace pool has closed"))
            return future

        def cancelled(done: asyncio.Future) -> None:
            if done.cancelled():
                try:
                    token.run_sync_soon(handle.cancel)
                except trio.RunFinishedError:
                    pass

        future.add_done_callback(cancelled)
        return future

    async def _job(self, loop, future: asyncio.Future, handle: _Cancel, job, args) -> None:
        outcome: tuple[bool, Any] | None = None
        try:
            with trio.CancelScope() as scope:
                handle.attach(scope)
                self.waiting += 1
                try:
                    await self._limiter.acquire()
                finally:
                    self.waiting -= 1
                self.running += 1
                try:
                    outcome = (True, await job(self.pool, *args))
                except Exception as exc:  # the job's own failure: the caller's to handle
                    outcome = (False, exc)
                finally:
                    self.running -= 1
                    self._limiter.release()
        finally:  # cancelled (by the caller or by close) or done: the caller learns it either way
            try:
                loop.call_soon_threadsafe(_settle, future, outcome)
            except RuntimeError:  # the caller's loop has closed: nobody waits
                pass

    def close(self) -> None:
        """Cancel every job, close the pool and join its thread; idempotent."""
        token, thread = self._token, self._thread
        if token is not None:
            try:
                token.run_sync_soon(self._closing.set)
            except trio.RunFinishedError:
                pass
        if thread is not None:
            thread.join(CLOSE_TIMEOUT_S)


class _Cancel:
    """A job's cancellation, asked for from the asyncio side, before or after its scope exists."""

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None
        self.asked = False

    def attach(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        if self.asked:
            scope.cancel()

    def cancel(self) -> None:
        self.asked = True
        if self.scope is not None:
            self.scope.cancel()


def _settle(future: asyncio.Future, outcome: tuple[bool, Any] | None) -> None:
    if future.done():  # cancelled by its caller
        return
    if outcome is None:
        future.set_exception(PoolClosed("the job was cancelled: the workspace pool is closing"))
    elif outcome[0]:
        future.set_result(outcome[1])
    else:
        future.set_exception(outcome[1])
