"""Shared fixtures: a real Docker engine and the built runner image for `docker`-marked tests."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def _engine_problem() -> str | None:
    try:
        import docker

        from images.inputs import runner_image

        client = docker.from_env(version="auto", timeout=10)
        client.ping()
        client.images.get(runner_image())
        client.close()
    except Exception as exc:  # any reason the engine or image is unusable
        return f"Docker engine or runner image unavailable ({exc}); run `python -m gym images build` or `bin/setup`"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Require a live engine with the runner image; in CI a missing engine is a failure, not a skip."""
    problem = _engine_problem()
    if problem:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)


def pytest_collection_modifyitems(config, items):
    """Every `docker`-marked test gets the engine check first."""
    for item in items:
        if item.get_closest_marker("docker") and "docker_engine" not in item.fixturenames:
            item.fixturenames.insert(0, "docker_engine")
