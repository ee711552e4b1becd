"""gym/fault.py and the CLI's one handler: known faults are one line and a code, groups unwrap, bugs keep tracebacks."""

from __future__ import annotations

import errno
import re
import sys
import types
from pathlib import Path

import pytest

from gym import cli
from gym.fault import CommandError, ExitCode, describe, one_line
from sandbox.errors import EngineUnreachable, ImageMissing, InfraError


@pytest.fixture
def command(monkeypatch):
    """``python -m gym fake``: a command whose run raises what the test puts in ``raised``."""
    raised: list[BaseException] = []

    def run(args):
        raise raised[0]

    module = types.ModuleType("fake_command")
    module.configure, module.run = (lambda parser, argv: None), run
    monkeypatch.setitem(sys.modules, "fake_command", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_command", "a test command"))
    return raised


def test_a_group_of_known_faults_reads_as_its_first_leaf(command, capsys):
    command.append(
        ExceptionGroup(
            "nursery",
            [ExceptionGroup("inner", [ImageMissing("image x is missing — build it")]), InfraError("runner lost")],
        )
    )
    assert cli.main(["fake"]) == ExitCode.IMAGE == 4
    assert capsys.readouterr().err == "gym: error: image x is missing — build it\n"


def test_a_group_with_one_unknown_leaf_is_a_bug_and_keeps_its_traceback(command):
    command.append(ExceptionGroup("nursery", [ImageMissing("x"), ZeroDivisionError("a real bug")]))
    with pytest.raises(ExceptionGroup):
        cli.main(["fake"])
    command[0] = KeyError("a real bug")
    with pytest.raises(KeyError):
        cli.main(["fake"])


def test_verbose_prints_the_traceback_then_the_line(command, capsys):
    command.append(EngineUnreachable("the Docker engine at unix:///x.sock does not answer"))
    assert cli.main(["fake", "-v"]) == ExitCode.INFRA == 3
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last)") and "EngineUnreachable" in err
    assert err.splitlines()[-1].startswith(
        "gym: error: the Docker engine at unix:///x.sock does not answer — start dockerd"
    )


def test_each_class_has_its_code():
    assert describe(CommandError("stopped", "see x", ExitCode.ERROR)).code == 1
    assert describe(OSError(errno.EADDRINUSE, "Address already in use")).code == ExitCode.HOST
    assert describe(PermissionError(errno.EACCES, "Permission denied", "/root/run")).line() == (
        "gym: error: /root/run: Permission denied — use a path this user may write (or fix its permissions)"
    )
    assert describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "x.jsonl")).code == ExitCode.INPUT
    assert describe(KeyboardInterrupt()).code == ExitCode.INTERRUPTED == 130
    assert describe(OSError(errno.EIO, "I/O error")) is None  # not a fault a user can fix by a path or a port
    assert describe(ValueError("anything")) is None


def test_a_class_whose_module_was_never_imported_is_not_looked_up(monkeypatch):
    monkeypatch.delitem(sys.modules, "trainer.errors", raising=False)
    assert describe(RuntimeError("x")) is None
    assert "trainer.errors" not in sys.modules


def test_multi_line_messages_become_one_line():
    assert (
        one_line("x.yaml: invalid environment:\n  a.b: bad\n  c: worse\n")
        == "x.yaml: invalid environment: a.b: bad; c: worse"
    )
    assert one_line("a\nb") == "a; b"


def test_the_docs_table_lists_every_exit_code_and_no_other():
    text = (Path(__file__).resolve().parents[2] / "docs/cli.md").read_text(encoding="utf-8")
    table = text.split("## Errors and exit codes", 1)[1].split("\n## ", 1)[0]
    documented = [int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)]
    assert documented == sorted(code.value for code in ExitCode)
