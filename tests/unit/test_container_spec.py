"""The hardened container spec's network: disabled (no libnetwork sandbox) only for ``hardening.network: none`` on
an image that resolves localhost alone (sandbox.docker_engine.HOSTS_LABEL); otherwise Docker's network mode as
configured. Which image carries the label is read from the engine once per Engine (``holds_hosts``)."""

from __future__ import annotations

import docker
import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.docker_engine import HOSTS_LABEL, HOSTS_VALUE, Engine, container_name
from sandbox.labels import Labels

NO_ENGINE = {"engine": {"base_url": "unix:///nonexistent.sock"}}


def spec(holds_hosts: bool, network: str = "none") -> dict:
    engine = Engine(SandboxConfig.model_validate({**NO_ENGINE, "hardening": {"network": network}}))
    labels = Labels.for_this_process(60)
    return engine.container_spec(labels, container_name(labels), holds_hosts)


@pytest.mark.parametrize(
    ("holds_hosts", "network", "disabled"),
    [(True, "none", True), (False, "none", False), (True, "bridge", False), (False, "bridge", False)],
)
def test_networking_is_disabled_only_without_a_network_and_with_an_image_that_resolves_localhost(
    holds_hosts, network, disabled
):
    made = spec(holds_hosts, network)
    assert made["network_disabled"] is disabled
    assert made["host_config"]["NetworkMode"] == network  # the mode stays as configured either way


class _Api:
    def __init__(self, image):
        self.image, self.calls = image, 0

    def inspect_image(self, name):
        self.calls += 1
        if isinstance(self.image, Exception):
            raise self.image
        return self.image


class _Client:
    def __init__(self, api):
        self.api = api


@pytest.mark.parametrize(
    ("image", "holds"),
    [
        ({"Config": {"Labels": {HOSTS_LABEL: HOSTS_VALUE}}}, True),
        ({"Config": {"Labels": {HOSTS_LABEL: ""}}}, False),  # a derived image that emptied the label
        ({"Config": {"Labels": {HOSTS_LABEL: "yes"}}}, False),  # only the value the runner image sets
        ({"Config": {"Labels": None}}, False),
        ({"Config": None}, False),
        (docker.errors.NotFound("no such image"), False),  # its create fails as it always did
        (True, False),  # replies of the wrong shape (an odd engine, a fake): no label, never an AttributeError
        ({"Config": ["Labels"]}, False),
        ({"Config": {"Labels": ["gym.hosts"]}}, False),
    ],
)
def test_the_image_label_is_asked_of_the_engine_once(image, holds):
    engine = Engine(SandboxConfig.model_validate(NO_ENGINE))
    api = _Api(image)
    engine._client = _Client(api)

    async def twice():
        return [await engine.holds_hosts(), await engine.holds_hosts()]

    assert trio.run(twice) == [holds, holds]
    assert api.calls == (2 if isinstance(image, Exception) else 1)  # a missing image is asked again


def test_a_warm_pools_image_check_answers_the_label_too():
    engine = Engine(SandboxConfig.model_validate(NO_ENGINE))
    api = _Api({"Config": {"Labels": {HOSTS_LABEL: HOSTS_VALUE}}})
    engine._client = _Client(api)

    async def check_then_ask():
        await engine.require_image()
        return await engine.holds_hosts()

    assert trio.run(check_then_ask) is True and api.calls == 1  # one inspect, not one per question
