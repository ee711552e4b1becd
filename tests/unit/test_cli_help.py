"""`python -m gym --version`, and every command's and sub-command's ``--help`` ends with examples.

The parsers are walked through argparse's sub-parser actions, so a new command or sub-command
(`images build`, `bench sandbox`, `tokenizer info`) is checked without being listed here.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import pytest

from gym import cli

ROOT = Path(__file__).resolve().parents[2]


def walk(parser: argparse.ArgumentParser):
    """``parser`` and every parser below it, through its sub-parser actions."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from walk(child)


def command_parsers(name: str) -> list[argparse.ArgumentParser]:
    """Command ``name``'s parser (its module configured, as `python -m gym NAME --help` does) and those below."""
    top = cli.build_parser(name, [name])
    (commands,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return list(walk(commands.choices[name]))


def missing_examples(parser: argparse.ArgumentParser) -> str | None:
    """Why ``parser``'s help lacks a real example of itself, or None when it has one.

    A real example is a line under ``examples:`` that runs this parser's program (its prog) with
    arguments other than only ``--help``."""
    text = parser.format_help()
    if "\nexamples:\n" not in text:
        return f"{parser.prog}: no examples: section\n{text}"
    section = text.split("\nexamples:\n", 1)[1]
    lines = [line.strip() for line in section.splitlines() if line.startswith("  ")]
    real = [
        line
        for line in lines
        if re.match(rf"{re.escape(parser.prog)}(\s|$)", line) and line.split()[-1] not in ("--help", "-h")
    ]
    return None if real else f"{parser.prog}: no example runs it (other than --help): {lines}"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_and_sub_command_help_ends_with_real_examples(name):
    parsers = command_parsers(name)
    failures = [why for why in map(missing_examples, parsers) if why]
    assert not failures, "\n".join(failures)


def test_the_walk_reaches_the_nested_sub_commands():
    progs = {p.prog for name in ("images", "bench", "tasks", "tokenizer") for p in command_parsers(name)}
    expected = {"images build", "images tag", "bench sandbox", "bench trainer", "tasks generate", "tokenizer info"}
    assert {f"python -m gym {e}" for e in expected} <= progs, progs


def test_the_check_fails_without_an_epilog_or_with_only_help_examples():
    bare = argparse.ArgumentParser(prog="python -m gym x")
    assert "no examples: section" in missing_examples(bare)
    only_help = argparse.ArgumentParser(
        prog="python -m gym x", epilog=cli.epilog(["--help"]), formatter_class=cli.HELP_FORMATTER
    )
    assert "no example runs it" in missing_examples(only_help)
    other = argparse.ArgumentParser(
        prog="python -m gym x", epilog="examples:\n  python -m gym y --json f", formatter_class=cli.HELP_FORMATTER
    )
    assert "no example runs it" in missing_examples(other)  # an example of another command does not count
    assert cli.examples("no-such-command") is None  # the EXAMPLES table must name each command


def test_help_prints_examples_through_main(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "sandbox", "--help"])
    assert done.value.code == 0
    assert re.search(r"^examples:\n  python -m gym bench sandbox$", capsys.readouterr().out, re.MULTILINE)


def test_examples_name_the_console_script_when_run_as_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/code-rl-gym", "tokenizer", "info", "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    out = capsys.readouterr().out
    assert "\n  code-rl-gym tokenizer info bpe" in out and "python -m gym" not in out, out
    monkeypatch.setattr(sys, "argv", ["/venv/bin/code-rl-gym", "grade", "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    assert "\n  code-rl-gym grade --tasks " in capsys.readouterr().out


def test_version_is_the_project_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"python -m gym {expected}"
