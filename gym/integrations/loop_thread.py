"""A trio event loop in a daemon thread of its own, holding trio resources for callers on other threads.

The adapters' callers are plain threads and asyncio servers (verl's reward executor, TRL's loop, verifiers' MCP
toolset); what they reach is trio code over Docker workspaces that must live across calls (a warm pool, one
rollout's workspace). `LoopThread` runs one trio loop that opens those resources (``held``), keeps them until
`LoopThread.close`, and lets any other thread call into it (``trio.from_thread``). The scorer
(`gym.integrations.scorer`) and the verifiers workspace (`gym.integrations.verifiers_workspace`) each hold one.

One `LoopThread` is one life: started once (on first use), closed once; a holder that wants to start again after a
close or a failure makes a new one. Written here rather than taken from a library: trio's own ``from_thread``
needs a loop some thread runs, and the start/close hand-off around it (a deadline on the start, the failure kept
for the callers, an idempotent close that also runs at interpreter exit) is ours.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import trio

log = logging.getLogger(__name__)

T = TypeVar("T")
JOIN_TIMEOUT_S = 120.0  # close() waits this long for the loop to release what it held


class LoopThreadError(RuntimeError):
    """The loop did not start (``failed`` says why), or was closed before the call."""


class LoopThread:
    """One trio loop in a daemon thread: ``held(closing)`` is entered in it and exited after `close`.

    ``held`` receives the loop's ``closing`` event (set by `close`) for tasks of its own that must outlive a call
    and end with the loop (a pool's holder)."""

    def __init__(
        self,
        name: str,
        held: Callable[[trio.Event], AbstractAsyncContextManager[Any]],
        start_timeout_s: float,
    ) -> None:
        self.name = name
        self._held = held
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._closing: trio.Event | None = None
        self._closed = False
        self.failed: BaseException | None = None
        """What ended the loop, when it ended by itself (a Docker engine that did not answer, a missing image)."""

    @property
    def ended(self) -> bool:
        """Closed, or its loop ended by itself: a holder that wants the service again needs a new one."""
        return self._closed or self.failed is not None

    def start(self) -> trio.lowlevel.TrioToken:
        """The running loop's token, starting the loop on the first call (blocks up to the start deadline)."""
        with self._lock:
            if self._closed:
                raise LoopThreadError(f"{self.name}: closed")
            if self._thread is None:
                ready = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(ready,), name=self.name, daemon=True)
                self._thread.start()
                ready.wait(self._start_timeout_s)
                atexit.register(self.close)
            if self._token is None or self.failed is not None:
                raise LoopThreadError(f"{self.name}'s event loop did not start: {self.failed!r}")
            return self._token

    def run(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``afn(*args)`` in the loop, from any other thread; trio.RunFinishedError if the loop ended under it."""
        return trio.from_thread.run(afn, *args, trio_token=self.start())

    def close(self) -> None:
        """Set ``closing``, wait for the loop to release what it held; idempotent (also run at interpreter exit)."""
        with self._lock:
            token, thread, self._token = self._token, self._thread, None
            self._closed = True
        if token is not None and self._closing is not None:
            try:
                trio.from_thread.run_sync(self._closing.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if thread is not None:
            thread.join(timeout=JOIN_TIMEOUT_S)
        atexit.unregister(self.close)

    def _run(self, ready: threading.Event) -> None:
        try:
            trio.run(self._main, ready)
        except BaseException as exc:  # callers get LoopThreadError or RunFinishedError with it, never a hang
            self.failed = exc
            log.exception("%s's event loop ended", self.name)
        finally:
            ready.set()

    async def _main(self, ready: threading.Event) -> None:
        self._closing = trio.Event()
        async with self._held(self._closing):
            self._token = trio.lowlevel.current_trio_token()
            ready.set()
            await self._closing.wait()
