"""Which commands the runner hands to its fork server (`sandbox.runner.forkserver.takes`): only those a fresh
``python3 -I`` would run exactly as the server's child does; everything else keeps the runner's own spawn."""

from __future__ import annotations

import pytest

from sandbox.runner.forkserver import takes

TAKEN = {
    "a -c program": (["python3", "-I", "-c", "print(1)"], ["-c", "print(1)"]),
    "a -c program with arguments": (["python3", "-I", "-c", "x", "a", "-b"], ["-c", "x", "a", "-b"]),
    "a script": (["python3", "-I", "solution.py"], ["solution.py"]),
    "a script with arguments": (["python3", "-I", "/w/s.py", "-v", "1"], ["/w/s.py", "-v", "1"]),
}

REFUSED = {
    "not asked for": {"argv": ["python3", "-I", "-c", "x"], "fork_server": False},
    "an environment of its own": {"argv": ["python3", "-I", "-c", "x"], "fork_server": True, "env": {"A": "1"}},
    "another interpreter": {"argv": ["python3.12", "-I", "-c", "x"], "fork_server": True},
    "not isolated": {"argv": ["python3", "-c", "x"], "fork_server": True},
    "more options": {"argv": ["python3", "-I", "-X", "dev", "-c", "x"], "fork_server": True},
    "a module": {"argv": ["python3", "-I", "-m", "json.tool"], "fork_server": True},
    "unbuffered": {"argv": ["python3", "-I", "-u", "s.py"], "fork_server": True},
    "no program": {"argv": ["python3", "-I"], "fork_server": True},
    "-c without its program": {"argv": ["python3", "-I", "-c"], "fork_server": True},
    "a shell": {"argv": ["sh", "-c", "python3 -I -c x"], "fork_server": True},
}


@pytest.mark.parametrize("name", list(TAKEN))
def test_the_interpreters_own_shapes_are_taken(name):
    argv, rest = TAKEN[name]
    assert takes({"argv": argv, "fork_server": True, "env": {}}) == rest


@pytest.mark.parametrize("name", list(REFUSED))
def test_every_other_shape_keeps_the_runners_spawn(name):
    assert takes(REFUSED[name]) is None


def test_the_servers_probe_carries_the_tag_a_process_listing_spares():
    """The fresh interpreter the server runs once at start is listed as the server's own (kill-test host check)."""
    from sandbox.runner import zygote
    from sandbox.wire import FORK_SERVER_TAG

    assert zygote.TAG == FORK_SERVER_TAG and zygote.VM_PROBE.startswith(FORK_SERVER_TAG + "\n")


def test_the_servers_copies_of_the_runners_constants_agree():
    """The server runs as its own interpreter and imports nothing of the runner: its identity and capability
    constants are copies of `sandbox.runner.privileges`' (a drift would fork children as another user)."""
    from sandbox.runner import privileges, zygote

    assert (zygote.SANDBOX_UID, zygote.SANDBOX_GID) == (privileges.SANDBOX_UID, privileges.SANDBOX_GID)
    assert (zygote.PR_CAPBSET_DROP, zygote.LAST_CAP) == (privileges.PR_CAPBSET_DROP, privileges.LAST_CAP)
