"""A workspace started at its first operation, so an episode that never runs a tool never holds a container.

An episode that answers on the final channel (or submits its program inline) touches no workspace, yet an
eagerly acquired one costs a container start and removal: on the 2-core machine that is most of the Docker
work of the main job's steps. ``on_demand(source, owner)`` yields an ``OnDemandWorkspace`` with the
operations tools use (exec, read_file, write_file, list_dir); the first of them acquires a workspace from
``source`` (a ``WorkspacePool``: warm when one is ready), later ones reuse it, and leaving the block releases
it (destroyed, as ``acquire`` does) if one was ever started.

Failures keep their owner: a workspace that cannot be started is the infrastructure's (``InfraError``, the
episode is masked), whatever the start raised; the candidate had not run anything yet. The episode's wall
clock and call budget start when the workspace is handed out (``Workspace.claim``), not when it was warmed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Protocol

import trio

from sandbox.errors import InfraError
from sandbox.protocol import ExecRequest, ExecResult, FileResult, ListDirResult, ReadFileResult

log = logging.getLogger(__name__)


class Source(Protocol):
    """Hands out one fresh workspace per ``acquire`` (``sandbox.pool.WorkspacePool``)."""

    def acquire(self, owner: str = ...) -> AbstractAsyncContextManager[Any]: ...


class OnDemandWorkspace:
    """The tool operations of a workspace that is acquired at the first of them (see the module docstring)."""

    def __init__(self, source: Source, owner: str, stack: AsyncExitStack) -> None:
        self._source, self.owner, self._stack = source, owner, stack
        self._ws: Any = None
        self._lock = trio.Lock()

    @property
    def started(self) -> bool:
        """Whether an operation has acquired the workspace."""
        return self._ws is not None

    @property
    def engine_url(self) -> str | None:
        """The Docker engine of the workspace, once one was started (None before)."""
        return getattr(self._ws, "engine_url", None)

    async def workspace(self) -> Any:
        """The workspace, acquired now if no operation has yet; ``InfraError`` when none can be started."""
        async with self._lock:
            if self._ws is None:
                try:
                    self._ws = await self._stack.enter_async_context(self._source.acquire(owner=self.owner))
                except InfraError:
                    raise
                except Exception as exc:  # a start that failed in another way is still not the candidate's doing
                    log.exception("workspace for %s could not be started", self.owner)
                    raise InfraError(f"workspace could not be started: {type(exc).__name__}: {exc}") from exc
            return self._ws

    async def exec(self, request: ExecRequest) -> ExecResult:
        return await (await self.workspace()).exec(request)

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> ReadFileResult:
        return await (await self.workspace()).read_file(path, max_bytes)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> FileResult:
        return await (await self.workspace()).write_file(path, data, mode)

    async def list_dir(self, path: str = ".") -> ListDirResult:
        return await (await self.workspace()).list_dir(path)


@asynccontextmanager
async def on_demand(source: Source, owner: str = "") -> AsyncIterator[OnDemandWorkspace]:
    """An ``OnDemandWorkspace`` over ``source``; what it acquired is released when the block exits."""
    async with AsyncExitStack() as stack:
        yield OnDemandWorkspace(source, owner, stack)
