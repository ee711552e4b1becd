"""``--log-level LEVEL`` (before or after the command) sets the stderr log level; ``-v`` is DEBUG wherever it is.

Real runs of ``gym.cli.main`` in a subprocess (logging is configured once per process) with a stand-in
command that logs one line per level, plus a line from httpx (the policy client's library, which logs
every request at INFO and is kept at WARNING unless ``-v``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOUD = """
import logging, sys, types
import gym.cli
module = types.ModuleType("loud")
module.configure = lambda parser, argv: parser.add_argument("--flag", action="store_true")
def run(args):
    for level in ("debug", "info", "warning", "error"):
        getattr(logging.getLogger("loud"), level)("a %s line", level)
    logging.getLogger("httpx").info("HTTP Request: POST")
    return 0
module.run = run
sys.modules["loud"] = module
gym.cli.COMMANDS["loud"] = ("loud", "log one line per level")
sys.exit(gym.cli.main(sys.argv[1:]))
"""


def logged(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", LOUD, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {level for level in ("debug", "info", "warning", "error") if f"a {level} line" in done.stderr} | (
        {"httpx"} if "HTTP Request" in done.stderr else set()
    )


@pytest.mark.parametrize(
    ("args", "levels"),
    [
        (["loud"], {"info", "warning", "error"}),  # the default: INFO
        (["--log-level", "warning", "loud"], {"warning", "error"}),
        (["--log-level=ERROR", "loud", "--flag"], {"error"}),
        (["loud", "--log-level", "debug"], {"debug", "info", "warning", "error"}),
        (["--log-level", "error", "loud", "--log-level", "info"], {"info", "warning", "error"}),  # the later one wins
        (["-v", "loud"], {"debug", "info", "warning", "error", "httpx"}),
        (["loud", "-v"], {"debug", "info", "warning", "error", "httpx"}),
        (["--log-level", "error", "loud", "-v"], {"debug", "info", "warning", "error", "httpx"}),  # -v is DEBUG
    ],
)
def test_log_level_before_or_after_the_command(args, levels):
    assert logged(*args) == levels


def test_an_unknown_level_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-c", LOUD, "--log-level", "loud", "loud"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "invalid choice: 'LOUD'" in done.stderr
