"""A command the runner killed whose fork server its sweep killed too (`sandbox.runner.forkserver.Child.wait4`):
the command's end is the runner's SIGKILL, never the server's loss (that would mask the candidate's own timeout
as ``infra_error``). A server lost while a command ended by itself is still the sandbox's failure."""

from __future__ import annotations

import os
import signal

import pytest

from sandbox.runner.forkserver import Child, Lost


class Server:
    def __init__(self, alive: bool) -> None:
        self.alive = alive
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def reaped(self, pid: int):
        raise Lost("the fork server closed its socket")


def child(server: Server) -> Child:
    ends = [fd for pair in (os.pipe(), os.pipe(), os.pipe()) for fd in pair]
    made = Child(server, 12345, ends[1], ends[2], ends[4])
    for fd in (ends[0], ends[3], ends[5]):
        os.close(fd)
    return made


def close(made: Child) -> None:
    for stream in (made.stdin, made.stdout, made.stderr):
        stream.close()


def test_a_killed_command_whose_server_the_sweep_took_ended_by_the_runners_sigkill():
    server = Server(alive=False)
    made = child(server)
    status, usage = made.wait4(killed=True)
    close(made)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL and server.closed
    assert (usage.ru_utime, usage.ru_stime, usage.ru_maxrss) == (0.0, 0.0, 0)


@pytest.mark.parametrize("killed, alive", [(False, False), (False, True), (True, True)])
def test_otherwise_the_server_must_say_and_its_loss_is_lost(killed, alive):
    made = child(Server(alive=alive))
    with pytest.raises(Lost):
        made.wait4(killed=killed)
    close(made)
