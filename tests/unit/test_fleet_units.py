"""The pure parts of the pool over several engines (sandbox/fleet.py) and its config (``sandbox.engines``).

The pool itself runs against two real engines in tests/integration/test_fleet.py.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandbox.config import EngineEntry, SandboxConfig
from sandbox.fleet import FleetPool, Member, choose, open_pool, warm_shares
from sandbox.pool import WorkspacePool

A = "unix:///var/run/docker.sock"
B = "tcp://10.0.0.7:2376"
C = "tcp://10.0.0.8:2376"


def member(url: str, capacity: int, in_use: int = 0, up: bool = True, labels: tuple[str, ...] = ()) -> Member:
    entry = EngineEntry(url=url, capacity=capacity, labels=list(labels), tls={"verify": True} if "tcp" in url else None)
    m = Member(entry, pool=None)  # type: ignore[arg-type] - choose() reads no pool
    m.in_use, m.up = in_use, up
    return m


@pytest.mark.parametrize(
    ("total", "capacities", "shares"),
    [
        (4, [8, 8], [2, 2]),
        (5, [8, 8], [3, 2]),
        (4, [1, 3], [1, 3]),
        (8, [1, 3], [1, 3]),  # never more than an engine's capacity
        (0, [4, 4], [0, 0]),
        (3, [10, 1, 1], [3, 0, 0]),
        (6, [2, 2, 2], [2, 2, 2]),
    ],
)
def test_warm_pool_is_split_by_capacity(total, capacities, shares):
    assert warm_shares(total, capacities) == shares
    assert sum(shares) == min(total, sum(capacities))


def test_placement_takes_the_most_free_capacity_first_in_config_order_on_ties():
    a, b, c = member(A, 8, in_use=3), member(B, 8, in_use=1), member(C, 4)
    assert choose([a, b, c], set()) is b  # 7 free beats 5 and 4
    b.in_use = 3
    assert choose([a, b, c], set()) is a  # 5, 5, 4: the first
    a.in_use = b.in_use = 8
    assert choose([a, b, c], set()) is c
    c.in_use = 4
    assert choose([a, b, c], set()) is None  # all full: the acquire waits


def test_placement_skips_drained_engines_and_those_without_the_labels():
    a, b = member(A, 8, up=False), member(B, 2, in_use=1, labels=("swe", "gpu"))
    assert choose([a, b], set()) is b
    assert choose([a, b], {"swe"}) is b
    assert choose([a, b], {"swe", "big"}) is None
    a.up = True
    assert choose([a, b], set()) is a
    assert choose([a, b], {"gpu"}) is b


def test_open_pool_is_the_single_engine_pool_without_engines():
    assert type(open_pool(SandboxConfig())) is WorkspacePool
    config = SandboxConfig(engines=[{"url": A, "capacity": 2}, {"url": B, "capacity": 2, "allow_insecure_tcp": True}])
    pool = open_pool(config)
    assert isinstance(pool, FleetPool)
    assert [m.pool.config.engine.base_url for m in pool.members] == [A, B]
    assert [m.pool.config.engine.outage_wait_s for m in pool.members] == [0.0, 0.0]  # the fleet waits, not them
    assert [m.pool.size for m in pool.members] == [2, 2]  # pool.size 4 split by capacity
    with pytest.raises(ValueError, match="sandbox.engines"):
        FleetPool(SandboxConfig())


def test_each_engine_config_carries_its_own_tls_and_the_shared_settings():
    config = SandboxConfig(
        engine={"timeout_s": 12, "health_interval_s": 2},
        engines=[{"url": A, "capacity": 1}, {"url": B, "capacity": 3, "tls": {"verify": False}}],
    )
    (ea, ca), (eb, cb) = config.engine_configs()
    assert (ea.url, ca.engine.base_url, ca.engine.tls) == (A, A, None)
    assert (cb.engine.base_url, cb.engine.tls.verify, cb.engine.timeout_s) == (B, False, 12)
    assert ca.engines == cb.engines == [] and ca.require_labels == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"engines": [{"url": A, "capacity": 1}, {"url": A, "capacity": 2}]}, "each engine once"),
        ({"engine": {"base_url": A}, "engines": [{"url": B, "capacity": 1}]}, "keep one"),
        ({"engine": {"tls": {"verify": False}}, "engines": [{"url": B, "capacity": 1}]}, "its own tls"),
        ({"engines": [{"url": A, "capacity": 1}], "require_labels": ["swe"]}, "no engine of engines carries"),
        ({"require_labels": ["swe"]}, "no engine of engines carries"),
        ({"engines": [{"url": A, "capacity": 0}]}, "greater than or equal to 1"),
        ({"engines": [{"url": A, "capacity": 1, "tls": {"verify": False}}]}, "is not tcp://"),
        ({"engines": [{"url": "http://x", "capacity": 1}]}, "url"),
        ({"engines": [{"url": A, "capacity": 1, "weight": 2}]}, "Extra inputs are not permitted"),
    ],
)
def test_bad_engine_lists_are_refused_naming_the_problem(data, message):
    with pytest.raises(ValidationError, match=message):
        SandboxConfig.model_validate(data)
