"""The pool across an engine outage, on a fake engine and trio's mock clock: starts wait for the engine
once per outage (``engine.outage_wait_s``), a healthy engine's failure is not waited on, and a warm
workspace that hung up while it waited is never handed out."""

from __future__ import annotations

import trio
import trio.testing

from sandbox.config import SandboxConfig
from sandbox.docker_engine import Engine
from sandbox.errors import InfraError
from sandbox.pool import WorkspacePool
from sandbox.protocol import encode_frame

HELLO = encode_frame({"id": 0, "ok": True, "body": {"hello": "gym-runner", "version": 1}})


class FakeStream:
    def __init__(self) -> None:
        self.greeted = False
        self.gone = False

    async def receive(self) -> bytes:
        if not self.greeted:
            self.greeted = True
            return HELLO
        await trio.sleep_forever()

    def hung_up(self) -> bool:
        return self.gone

    async def aclose(self) -> None:
        pass


class FakeEngine(Engine):
    """Answers while ``down(now)`` is false; ``create_fails`` makes starts fail with the engine up."""

    def __init__(self, config: SandboxConfig, down=lambda now: False, create_fails: bool = False):
        super().__init__(config)
        self.down, self.create_fails = down, create_fails
        self.created: list[str] = []
        self.streams: list[FakeStream] = []

    async def call(self, what, fn, *args, timeout=None, **kwargs):
        await trio.sleep(0.01)
        if self.down(trio.current_time()):
            raise InfraError(f"Docker engine call {what!r} failed: connection refused")
        if what == "create":
            if self.create_fails:
                raise InfraError("Docker engine call 'create' failed: 500 Server Error")
            self.created.append(f"c{len(self.created):063d}")
            return {"Id": self.created[-1]}
        if what == "inspect image":  # Engine.holds_hosts: an image without the gym.hosts label
            return {"Config": {"Labels": {}}}
        return True

    async def attach(self, container_id):
        self.streams.append(FakeStream())
        return self.streams[-1]


def pool_on(engine_of, size: int = 0, outage_wait_s: float = 10.0) -> WorkspacePool:
    # recycle_uses 0: the fake stream answers no reset
    config = SandboxConfig(
        image="fake:0", pool={"size": size, "recycle_uses": 0}, engine={"outage_wait_s": outage_wait_s}
    )
    pool = WorkspacePool(config, gc_at_start=False)
    pool.engine = engine_of(config)
    return pool


def run(main):
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def acquire_after(pool: WorkspacePool) -> tuple[float, str | None]:
    """(seconds the acquire took, the container id or None when it failed)"""
    started = trio.current_time()
    try:
        async with pool.acquire("t") as ws:
            return trio.current_time() - started, ws.id
    except InfraError:
        return trio.current_time() - started, None


def first_acquire(pool: WorkspacePool) -> tuple[float, str | None]:
    async def main():
        async with pool:
            return await acquire_after(pool)

    return run(main)


def test_a_start_waits_out_a_short_outage():
    took, container = first_acquire(pool_on(lambda c: FakeEngine(c, down=lambda now: now < 5.0)))
    assert container is not None and 5.0 <= took < 6.5


def test_a_dead_engine_stalls_starts_once_per_outage_not_once_per_episode():
    pool = pool_on(lambda c: FakeEngine(c, down=lambda now: True))

    async def main():
        async with pool:
            return [await acquire_after(pool) for _ in range(3)]

    (first, a), (second, b), (third, c) = run(main)
    assert (a, b, c) == (None, None, None)
    assert 10.0 <= first < 11.5 and second < 0.5 and third < 0.5


def test_a_failure_with_the_engine_up_is_not_waited_on():
    took, container = first_acquire(pool_on(lambda c: FakeEngine(c, create_fails=True)))
    assert container is None and took < 0.5


def test_no_waiting_when_the_budget_is_zero():
    took, container = first_acquire(pool_on(lambda c: FakeEngine(c, down=lambda now: now < 5.0), outage_wait_s=0.0))
    assert container is None and took < 0.5


def test_a_warm_workspace_that_hung_up_is_destroyed_not_handed_out():
    pool = pool_on(lambda c: FakeEngine(c), size=1)

    async def main():
        async with pool:
            await pool.wait_ready()
            pool.engine.streams[0].gone = True  # its container died while it waited
            async with pool.acquire("t") as ws:
                return pool.engine.created, ws.id, pool.hung_up

    created, handed, hung_up = run(main)
    assert handed != created[0] and handed in created and hung_up == 1
