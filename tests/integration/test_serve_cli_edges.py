"""`gym serve` edges a newcomer hits: a tokenizer file that is missing or is not a tokenizer is one ``gym: error:``
line naming it (exit 2, a config error), never a traceback; Ctrl-C stops the server with exit 130 (128 + SIGINT),
as a shell reports a command stopped by a signal."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cli_support import gym as run_gym
from tests.cli_support import one_line
from tests.serve_support import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]


def config_with_tokenizer(tmp_path: Path, tokenizer: str) -> Path:
    lines = [
        line
        for line in (ROOT / "configs/policy_tiny.yaml").read_text().splitlines()
        if not line.startswith("tokenizer")
    ]
    path = tmp_path / "serve.yaml"
    path.write_text("\n".join([*lines, f"tokenizer: {tokenizer}", ""]))
    return path


@pytest.mark.parametrize(
    ("content", "named"),
    [(None, "no tokenizer JSON file at"), ("not json", "not a tokenizer.json")],
    ids=["missing", "not-json"],
)
def test_a_bad_tokenizer_file_is_one_line(tmp_path, content, named):
    tokenizer = tmp_path / "tokenizer.json"
    if content is not None:
        tokenizer.write_text(content)
    done = run_gym("serve", str(config_with_tokenizer(tmp_path, str(tokenizer))), "--port", "0")
    one_line(done, 2, str(tokenizer), named)


def test_ctrl_c_stops_the_server_with_130():
    proc, _ = start_server(ROOT / "configs/policy_tiny.yaml")
    try:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        stop_server(proc)
