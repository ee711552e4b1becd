"""The runner image on a real engine: built under the tag the default config names; a missing one says how to build it."""

from __future__ import annotations

import docker
import pytest
import trio

from images.build import INPUTS_LABEL, build_all
from sandbox.config import SandboxConfig
from sandbox.errors import ImageMissing, InfraError
from sandbox.pool import WorkspacePool
from tests.sandbox_support import small_config

pytestmark = pytest.mark.docker
ABSENT = "gym-runner:0000000000000000"


def test_the_built_runner_image_is_under_the_tag_the_default_config_names():
    tag = SandboxConfig().image
    client = docker.from_env(version="auto", timeout=120)
    try:
        assert client.images.get(tag).labels[INPUTS_LABEL] == tag.split(":", 1)[1]
        base, runner = build_all(client)  # inputs unchanged: both cached, nothing rebuilt
        assert runner.tag == tag and not runner.built and not base.built
    finally:
        client.close()


def test_a_warm_pool_without_its_image_fails_at_start_naming_the_build_command():
    async def main() -> None:
        async with WorkspacePool(small_config(image=ABSENT, pool={"size": 2})):
            pytest.fail("the pool started without its image")

    with pytest.raises(ImageMissing, match=r"gym-runner:0{16} is not on the Docker engine.*python -m gym images build"):
        trio.run(main)


def test_a_cold_start_without_its_image_is_an_infra_error_of_that_acquire():
    async def main() -> None:
        async with WorkspacePool(small_config(image=ABSENT)) as pool:
            with pytest.raises(ImageMissing, match="python -m gym images build") as caught:
                async with pool.acquire("pytest"):
                    pass
            assert isinstance(caught.value, InfraError) and not pool.live

    trio.run(main)
