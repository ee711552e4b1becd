"""Fixtures of the integration tests shared across modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.second_daemon import SecondDaemon, provide_second_daemon


@pytest.fixture(scope="session")
def second_tls_daemon() -> Iterator[SecondDaemon]:
    """One second Docker daemon (tests/second_daemon.py) for the whole session: starting one and loading the
    runner image into it takes ~25 s, its teardown up to 30 s more. Tests that stop or kill it leave it to
    the next test's fixture to start it again (each module's ``daemon`` fixture does)."""
    yield from provide_second_daemon()
