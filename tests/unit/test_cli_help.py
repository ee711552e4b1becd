"""`python -m gym --version`, and every command's ``--help`` ends with examples (gym/cli.py EXAMPLES)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gym import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_help_shows_an_example(name, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "example" in out.lower(), out
    assert re.search(rf"^  python -m gym {name}\b", out, re.MULTILINE), out  # an example of this very command


def test_a_command_without_examples_has_none_to_show():
    assert cli.examples("no-such-command") is None  # so the loop above can fail: the table must name each command


def test_version_is_the_project_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"python -m gym {expected}"
