"""A tokenizer file the ``tokenizers`` library cannot load is one line naming it, exit 2 (an unknown spec's
class, docs/cli.md), not the library's bare ``Exception``: real runs of ``python -m gym tokenizer info``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def info(spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym", "tokenizer", "info", spec],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # a few seconds idle; bounds a run on a loaded 2-core machine
        check=False,
    )


@pytest.mark.parametrize(
    ("spec", "content", "reason"),
    [
        ("bpe", bytes(range(256)) * 2, "stream did not contain valid UTF-8"),  # binary
        ("bpe", b"hello\n", "expected value at line 1 column 1"),
        ("hf", b'{"model": 1}', ""),  # JSON, but not a tokenizer
    ],
)
def test_a_tokenizer_file_that_cannot_be_loaded_is_one_line_exit_2(tmp_path, spec, content, reason):
    file = tmp_path / "bin.jsonl"
    file.write_bytes(content)
    done = info(f"{spec}:{file}")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"gym: error: {file}: not a tokenizer.json the tokenizers library can load"), line
    assert reason in line


def test_a_valid_tokenizer_file_still_loads():
    """The check above can pass only because bad files fail: the default tokenizer file itself loads."""
    from gym.format.bpe import DEFAULT_PATH, load_bpe

    load_bpe()  # trains the default once when missing (a checkout)
    done = info(f"bpe:{DEFAULT_PATH}")
    assert done.returncode == 0 and '"available": true' in done.stdout, done.stderr[-3000:]
