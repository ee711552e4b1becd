"""`serve --host` naming no address of this machine, or a name that does not resolve, is one ``gym: error:``
line with exit 6 (a host resource, docs/cli.md) before the policy is built, like a port in use."""

from __future__ import annotations

import pytest

from tests.cli_support import gym as run_gym
from tests.cli_support import one_line


@pytest.mark.parametrize(
    ("host", "named"), [("nosuchhost.invalid", "does not resolve"), ("192.0.2.1", "Cannot assign requested address")]
)
def test_a_bind_address_that_is_not_this_machines_is_exit_6(host, named):
    done = run_gym("serve", "configs/policy_tiny.yaml", "--host", host, "--port", "0")
    one_line(done, 6, host, named, "--host 127.0.0.1")
