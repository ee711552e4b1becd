"""The reset's reading of the namespace's TCP sockets (sandbox/runner/reset.py `tcp_fields`): the namespace's own
fields of a sockstat line, never the host's, and nothing from a file that lacks them.

The real kernel's side (a TIME_WAIT socket, a listener, IPv6 sockets left by a candidate refuse the reset) is
tests/integration/test_sandbox_recycling_outside.py.
"""

from __future__ import annotations

import pytest

from sandbox.runner.reset import KERNEL_COUNTERS, TCP_SOCKETS, _kernel_counters, tcp_fields

SOCKSTAT = """sockets: used 1
TCP: inuse 0 orphan 0 tw 0 alloc 1 mem 125
UDP: inuse 0 mem 0
UDPLITE: inuse 0
RAW: inuse 0
FRAG: inuse 0 memory 0
"""
SOCKSTAT6 = """TCP6: inuse 0
UDP6: inuse 0
UDPLITE6: inuse 0
RAW6: inuse 0
FRAG6: inuse 0 memory 0
"""


def _fields(path: str, text: str):
    (label, names) = next((label, names) for p, label, names in TCP_SOCKETS if p == path)
    return tcp_fields(text, label, names)


def test_the_namespaces_own_fields_are_read():
    assert _fields("/proc/net/sockstat", SOCKSTAT) == (("inuse", "0"), ("tw", "0"))
    assert _fields("/proc/net/sockstat6", SOCKSTAT6) == (("inuse", "0"),)


@pytest.mark.parametrize(
    "changed",
    [
        "TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 125",  # a listener, a connection, a closing socket
        "TCP: inuse 0 orphan 0 tw 1 alloc 1 mem 125",  # a TIME_WAIT socket (IPv4 or IPv6)
    ],
)
def test_a_socket_of_the_namespace_changes_the_reading(changed):
    assert _fields("/proc/net/sockstat", SOCKSTAT.replace(SOCKSTAT.splitlines()[1], changed)) != _fields(
        "/proc/net/sockstat", SOCKSTAT
    )


def test_an_ipv6_socket_changes_the_reading():
    assert _fields("/proc/net/sockstat6", SOCKSTAT6.replace("TCP6: inuse 0", "TCP6: inuse 2")) != _fields(
        "/proc/net/sockstat6", SOCKSTAT6
    )


@pytest.mark.parametrize(
    "host_moved",
    [
        "TCP: inuse 0 orphan 7 tw 0 alloc 1 mem 125",  # other containers' orphans
        "TCP: inuse 0 orphan 0 tw 0 alloc 93 mem 125",  # sockets allocated anywhere on the host
        "TCP: inuse 0 orphan 0 tw 0 alloc 1 mem 4021",  # the host's TCP memory
        "sockets: used 9\nTCP: inuse 0 orphan 0 tw 0 alloc 1 mem 125",  # a line before, another value
    ],
)
def test_the_hosts_fields_do_not_change_the_reading(host_moved):
    # they move with every other container: a reset compared on them would refuse every container
    text = SOCKSTAT.replace(SOCKSTAT.splitlines()[1], host_moved)
    assert _fields("/proc/net/sockstat", text) == _fields("/proc/net/sockstat", SOCKSTAT)


@pytest.mark.parametrize(
    "text",
    ["", "UDP: inuse 0 mem 0\n", "TCP: orphan 0 alloc 1 mem 125\n", "TCP: inuse 0 orphan 0\n", "TCPX: inuse 0 tw 0\n"],
)
def test_a_file_without_the_line_or_its_fields_reads_as_none(text):
    assert _fields("/proc/net/sockstat", text) is None


def test_the_reset_compares_both_sockstat_readings_and_no_socket_table():
    # the host's own /proc here: the keys, not the values, are what this checks
    read = _kernel_counters()
    assert {"/proc/net/sockstat", "/proc/net/sockstat6"} <= set(read)
    assert not {"/proc/net/tcp", "/proc/net/tcp6"} & (set(read) | set(KERNEL_COUNTERS))
