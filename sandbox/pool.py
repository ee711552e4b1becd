"""The warm pool: pre-started, hardened containers handed out one per task and destroyed after.

Lifecycle: ``async with WorkspacePool(config) as pool`` collects garbage left by
dead owners, then keeps ``pool.size`` containers started with their runner
ready. ``async with pool.acquire(owner) as ws`` hands one out (or starts one
cold when the pool is empty); leaving the block destroys it on every exit path
(return, exception, cancellation, Ctrl-C), but one: with ``pool.recycle_uses``
set (0, off, by default), a block left without an exception, by a workspace
whose stream is in step, may recycle it (that many tasks per container at most). Its runner then empties
what the sandbox user could write and checks the container against its own
start (``sandbox/runner/reset.py``): only a clean reset puts the workspace back
in the warm pool; anything else, or a reset that fails, destroys it. An acquire
that names its task's keys (``acquire(owner, keys=...)``: the CP grader names its
problem and inputs, ``tasks.grader.grading_keys``) recycles by ``pool.disjoint_uses``
instead (on by default): its workspace, reset clean, waits apart from the fresh
ones and goes only to a later acquire whose keys it never served, so no candidate
reaches a later candidate of its own problem or inputs through what a reset cannot
put back; an acquire without keys always gets a container that served nothing.
A warm workspace whose stream hung up while it waited is destroyed, not handed
out. When the engine stops answering (a daemon restart), starts wait for it up
to ``engine.outage_wait_s`` per outage, then fail as ``InfraError``.
Backstops for exits trio never sees: an idempotent synchronous cleanup runs at
interpreter exit and on SIGTERM; after a SIGKILL, ``python -m gym gc`` removes
what is left (the owner label names a dead process).
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import docker
import trio

from sandbox.config import SandboxConfig
from sandbox.docker_engine import AttachedStream, Engine, container_name
from sandbox.errors import ImageMissing, InfraError
from sandbox.gc import collect
from sandbox.labels import Labels, current_owner
from sandbox.workspace import Workspace

log = logging.getLogger(__name__)


class PoolContext:
    """``async with pool`` over the pool's ``_running()`` async context manager (this pool, sandbox.fleet's)."""

    def _running(self) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def __aenter__(self):
        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self._running())
        except BaseException:
            await self._stack.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


class WorkspacePool(PoolContext):
    """Per-image pool of ready workspaces. See the module docstring for the lifecycle."""

    def __init__(self, config: SandboxConfig | None = None, *, gc_at_start: bool = True):
        self.config = config or SandboxConfig()
        self.engine = Engine(self.config)
        self.size = self.config.pool.size
        self._gc_at_start = gc_at_start
        self._ready: list[Workspace] = []  # fresh (or, with recycle_uses, recycled for any acquire)
        self._served: list[Workspace] = []  # reset after tasks of the keys in `ws.keys`: for disjoint acquires only
        self._live: set[str] = set()  # every container id this pool created and has not removed
        self._streams: dict[str, AttachedStream] = {}  # of every started workspace not yet handed out
        self._outage_since: float | None = None  # when starts first met an engine that does not answer
        self._starting = 0
        self._wakeup = trio.Event()
        self._start_limit = trio.CapacityLimiter(self.config.pool.max_concurrent_starts)
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._suspended = False
        self._previous_sigterm = None
        self.cold_starts = 0
        self.warm_hits = 0
        self.hung_up = 0  # warm workspaces destroyed because their stream hung up while they waited
        self.expired = 0  # warm workspaces destroyed because they waited past half of pool.ttl_s
        self._lent = 0  # handed out and may come back (recycling): the refill counts them as the pool's
        self.recycled = 0  # releases that went back to the warm pool
        self.resets_refused = 0  # releases whose reset found the container changed (destroyed instead)

    # ------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        if self.size > 0:
            # A warm pool starts containers at once: a missing image fails here, with the command that
            # builds it, not as a refill crash. A pool without warming (graders of per-instance images)
            # meets it per acquire instead, as an ImageMissing infra error of that task alone.
            await self.engine.require_image()
        if self._gc_at_start:
            removed = await collect(self.engine)
            if removed:
                log.info("gc at pool start removed %d orphaned containers", len(removed))
        atexit.register(self.cleanup_sync)
        self._install_sigterm()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._refill)
                try:
                    yield
                finally:
                    self._closing = True
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._drain()
            self.engine.close()
            atexit.unregister(self.cleanup_sync)
            self._restore_sigterm()

    async def _drain(self) -> None:
        """Destroy the warm containers and anything still live."""
        ready, self._ready, self._served = self._ready + self._served, [], []
        self._streams.clear()
        async with trio.open_nursery() as nursery:
            for ws in ready:
                nursery.start_soon(self._destroy, ws)
        async with trio.open_nursery() as nursery:
            for container_id in list(self._live):
                nursery.start_soon(self._remove, container_id)

    def cleanup_sync(self, passes: int = 1) -> None:
        """Idempotent, synchronous removal of every container this process owns.

        Looks containers up by this process's owner label as well as by the pool's own
        records, so one whose create call was still in flight is found too; ``passes`` > 1
        waits briefly and looks again for creates that land late (the SIGTERM path).
        """
        try:
            api = self.engine.target.docker_client(timeout=10, version=self.config.engine.api_version).api  # TLS too
        except docker.errors.DockerException:
            return
        try:
            for attempt in range(passes):
                if attempt:
                    time.sleep(0.5)
                try:
                    owned = {
                        c["Id"] for c in api.containers(all=True, filters={"label": f"gym.owner={current_owner()}"})
                    }
                except docker.errors.DockerException as exc:
                    log.warning("cleanup could not list containers: %s", exc)
                    owned = set()
                for container_id in owned | set(self._live):
                    try:
                        api.remove_container(container_id, force=True, v=True)
                    except docker.errors.NotFound:
                        pass
                    except docker.errors.DockerException as exc:
                        log.warning("cleanup could not remove %s: %s", container_id[:12], exc)
                        continue
                    self._live.discard(container_id)
        finally:
            api.close()

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum, frame):
            self._closing = True
            self.cleanup_sync(passes=3)
            signal.signal(signal.SIGTERM, self._previous_sigterm or signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

        self._previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    # ------------------------------------------------------------ acquire / release

    @asynccontextmanager
    async def acquire(
        self, owner: str = "", artifacts_dir: Path | None = None, keys: frozenset[str] | None = None
    ) -> AsyncIterator[Workspace]:
        """A workspace as a fresh container is, for one task; destroyed when the block exits, however it exits,
        unless a clean exit lets it be recycled (see the module docstring). ``keys``: what the task shows a candidate
        (``tasks.grader.grading_keys``); given, the workspace may be one that served only tasks of other keys, and go
        on to serve such tasks after this one."""
        if self._nursery is None or self._closing:
            raise RuntimeError("use the pool inside `async with WorkspacePool(...)`")
        ws = self._take_served(keys) or self._take_warm()
        if ws is not None:
            self.warm_hits += 1
        else:
            self.cold_starts += 1
            ws = await self._start_cold()
            self._streams.pop(ws.id, None)
        ws.claim(owner)
        may_return = self.config.pool.recycle_uses > ws.served + 1
        disjoint = not may_return and keys is not None and self.config.pool.disjoint_uses > ws.served + 1
        self._lent += may_return
        self._wakeup.set()
        finished = False
        try:
            yield ws
            finished = True
        finally:
            with trio.CancelScope(shield=True):
                if artifacts_dir is not None:
                    await ws.save_artifacts(artifacts_dir)
                try:
                    if finished and disjoint:
                        kept = await self._recycle(ws, keys)
                    else:
                        kept = finished and may_return and await self._recycle(ws)
                finally:
                    self._lent -= may_return
                    self._wakeup.set()
                if not kept:
                    await ws.aclose()
                    # Removal runs in the background so release never waits on the engine.
                    try:
                        self._nursery.start_soon(self._remove, ws.id)
                    except RuntimeError:  # the pool is already closing: remove inline
                        await self._remove(ws.id)

    async def _recycle(self, ws: Workspace, keys: frozenset[str] | None = None) -> bool:
        """Put a released workspace back after a clean reset: in the warm pool, or with ``keys`` (the task it served)
        among the served ones that only disjoint acquires take; False leaves it to be destroyed."""
        waiting = self._ready if keys is None else self._served
        if ws.broken or ws.closed or not self._takes_back(waiting, keys):
            return False
        if time.monotonic() - ws.born > self.config.pool.ttl_s / 2:  # gc's deadline label stays far off
            return False
        try:
            result = await ws.reset()
        except Exception as exc:  # a lost runner, a reply that is no ResetResult: never a failed release
            self.resets_refused += 1
            log.info("workspace %s could not be reset (destroyed): %r", ws.id[:12], exc)
            return False
        if not result.clean:
            self.resets_refused += 1
            log.info("workspace %s changed past its reset (destroyed): %s", ws.id[:12], result.detail)
            return False
        if not self._takes_back(waiting, keys):
            return False
        if keys is not None:
            ws.keys |= keys
            while len(waiting) >= self.size:  # the longest-waiting served one, the likeliest to share keys, goes
                oldest = waiting.pop(0)
                self._streams.pop(oldest.id, None)
                self._nursery.start_soon(self._destroy, oldest)
        self._streams[ws.id] = ws.stream
        waiting.append(ws)
        self.recycled += 1
        return True

    def _takes_back(self, waiting: list[Workspace], keys: frozenset[str] | None) -> bool:
        """Whether a reset workspace may wait in ``waiting``: not while the pool closes or is suspended; the warm
        pool only below ``pool.size``; the served list whenever the pool warms at all (a new one makes room)."""
        if self._closing or self._suspended:
            return False
        return len(waiting) < self.size or (keys is not None and self.size > 0)

    def _take_served(self, keys: frozenset[str] | None) -> Workspace | None:
        """A served workspace whose tasks share no key with ``keys`` and whose runner is still there, or None (always
        for ``keys`` None)."""
        if keys is None:
            return None
        for ws in [ws for ws in reversed(self._served) if ws.keys.isdisjoint(keys)]:
            self._served.remove(ws)
            if self._still_there(ws):
                return ws
        return None

    def _take_warm(self) -> Workspace | None:
        """A ready workspace whose runner is still there, or None."""
        while self._ready:
            ws = self._ready.pop()
            if self._still_there(ws):
                return ws
        return None

    def _still_there(self, ws: Workspace) -> bool:
        """Whether a waiting workspace may be handed out. One whose stream hung up while it waited (a daemon restart
        cut the attach connection, its container was killed) would fail the task's first call, and one past half of
        ``pool.ttl_s`` nears its deadline label, where `gym gc` may remove it mid-task: either is destroyed."""
        stream = self._streams.pop(ws.id)
        if time.monotonic() - ws.born > self.config.pool.ttl_s / 2:
            why = "is past half its ttl_s"
            self.expired += 1
        elif stream.hung_up():
            why = "hung up while it waited"
            self.hung_up += 1
        else:
            return True
        log.warning("warm workspace %s %s; destroying it", ws.id[:12], why)
        self._nursery.start_soon(self._destroy, ws)
        return False

    async def _start_cold(self) -> Workspace:
        """``_start``, waiting out an engine outage (see ``_engine_came_back``)."""
        while True:
            try:
                ws = await self._start()
            except ImageMissing:
                raise
            except InfraError:
                if not await self._engine_came_back():
                    raise
                continue
            self._outage_since = None
            return ws

    async def _engine_came_back(self) -> bool:
        """After a failed start, wait while the engine does not answer: True when it answers again.

        False at once when it answers (the failure was not an outage), and when this outage has lasted
        ``engine.outage_wait_s``: the budget runs from the first failure of the outage, so a dead engine
        stalls the starts of a run once, not once per episode.
        """
        if await self.engine.healthy():
            self._outage_since = None
            return False
        if self._outage_since is None:
            self._outage_since = trio.current_time()
            log.warning(
                "the Docker engine at %s does not answer: starts wait up to %.0fs for it",
                self.engine.url,
                self.config.engine.outage_wait_s,
            )
        deadline = self._outage_since + self.config.engine.outage_wait_s
        while trio.current_time() < deadline:
            await trio.sleep(min(0.5, deadline - trio.current_time()))
            if await self.engine.healthy():
                if self._outage_since is not None:  # the first waiter to see it says so
                    log.info(
                        "the Docker engine at %s answers again after %.1fs",
                        self.engine.url,
                        trio.current_time() - self._outage_since,
                    )
                    self._outage_since = None
                return True
        return False

    def suspend(self) -> None:
        """Stop refilling the warm pool and removing containers (its engine was drained: sandbox.fleet; what
        it leaves carries a dead owner's label once this process ends, for ``gym gc``); acquires still start
        cold."""
        self._suspended = True

    def resume(self) -> None:
        """Refill the warm pool again."""
        self._suspended = False
        self._wakeup.set()

    async def _refill(self) -> None:
        while True:
            while not self._suspended and len(self._ready) + self._starting + self._lent < self.size:
                self._starting += 1
                self._nursery.start_soon(self._start_into_pool)
            self._wakeup = trio.Event()
            await self._wakeup.wait()

    async def _start_into_pool(self) -> None:
        try:
            ws = await self._start()
        except InfraError as exc:
            if not await self._engine_came_back():  # an outage is waited out quietly (and logged once)
                log.warning("warm pool could not start a workspace: %s", exc)
                await trio.sleep(1.0)  # a failing engine must not turn the refill into a busy loop
            return
        finally:
            self._starting -= 1
            self._wakeup.set()
        if self._closing:
            await self._destroy(ws)
        else:
            self._ready.append(ws)

    async def _start(self) -> Workspace:
        """Create, attach, start and greet one hardened container."""
        async with self._start_limit:
            labels = Labels.for_this_process(self.config.pool.ttl_s)
            spec = self.engine.container_spec(labels, container_name(labels), await self.engine.holds_hosts())
            api = self.engine.client.api
            # Shielded: a create abandoned by cancellation still lands in the engine, and a
            # container we never learned the id of would leak until gc.
            with trio.CancelScope(shield=True):
                container_id = await self.engine.create(spec)
                self._live.add(container_id)
            try:
                stream = await self.engine.attach(container_id)
                self._streams[container_id] = stream
                ws = Workspace(container_id, stream, self.config, owner=labels.owner, engine=self.engine)
                try:
                    await self.engine.call("start", api.start, container_id)
                    await ws.hello(self.config.engine.ready_timeout_s)
                except BaseException:
                    with trio.CancelScope(shield=True):
                        await ws.aclose()
                    raise
            except BaseException:
                self._streams.pop(container_id, None)
                with trio.CancelScope(shield=True):
                    await self._remove(container_id)
                raise
            return ws

    async def _destroy(self, ws: Workspace) -> None:
        self._streams.pop(ws.id, None)
        await ws.aclose()
        await self._remove(ws.id)

    async def _remove(self, container_id: str) -> None:
        if self._suspended:  # its engine was drained (sandbox.fleet): each call would wait out its deadline
            log.info("leaving %s to gc: its engine is drained", container_id[:12])
            return
        # Shielded: a removal abandoned half-way (pool closing) would leave the engine busy removing
        # while the drain asks again ("removal already in progress").
        try:
            with trio.CancelScope(shield=True):
                await self.engine.remove(container_id)
        except InfraError as exc:
            log.warning("could not remove %s (gc will): %s", container_id[:12], exc)
            return
        self._live.discard(container_id)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the pool holds ``size`` ready workspaces (benchmarks, tests)."""
        with trio.fail_after(timeout):
            while len(self._ready) < self.size:
                await trio.sleep(0.01)

    @property
    def live(self) -> frozenset[str]:
        return frozenset(self._live)

    def stats(self) -> dict[str, float]:
        return {
            "ready": len(self._ready),
            "served_ready": len(self._served),
            "live": len(self._live),
            "warm_hits": self.warm_hits,
            "cold_starts": self.cold_starts,
            "hung_up": self.hung_up,
            "expired": self.expired,
            "recycled": self.recycled,
            "resets_refused": self.resets_refused,
            "time": time.time(),
        }
