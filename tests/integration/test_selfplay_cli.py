"""`python -m gym selfplay` end to end in a subprocess: scripted chains accepted and bundled, and `gym replay`
re-checks the bundles as identical (and finds an edited one); an existing --out refused; Ctrl-C leaving
valid partial output; the real tiny policy (random init, in process, CPU) with its failures counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_support import ROOT, gym, one_line

CONFIG = "configs/selfplay_tiny.yaml"


def lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, each one whole JSON (a torn last line fails here)."""
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), f"{path} ends inside a line"
    return [json.loads(line) for line in text.splitlines()]


def selfplay(out: Path, *args: str) -> dict:
    done = gym("selfplay", CONFIG, "--out", str(out), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(done.stdout) == summary
    return summary


@pytest.mark.slow
def test_scripted_chains_are_accepted_bundled_and_replay_identically(tmp_path):
    out = tmp_path / "sp"
    summary = selfplay(out, "--max-problems", "6", "--policy", "scripted:selfplay", "--replay-rate", "1")
    assert (summary["chains"], summary["accepted"], summary["acceptance_rate"], summary["parse_failures"]) == (
        6,
        6,
        1.0,
        0,
    )
    assert summary["check"]["right"] >= 1 and summary["check"]["wrong"] >= 1 and summary["bundles"] == 6
    assert summary["interrupted"] is False and summary["verifier_rows"] == 6
    accepted, rows = lines(out / "accepted.jsonl"), lines(out / "verifier_rows.jsonl")
    assert len(accepted) == len(lines(out / "chains.jsonl")) == 6
    for row in rows:
        assert set(row) == {"id", "problem", "steps", "labels", "source"} and len(row["labels"]) == len(row["steps"])
    flagged = [row for row in rows if row["source"] == "selfplay:flagged"]
    assert flagged and all(row["labels"][-1] == 0 for row in flagged)
    assert all(set(row["labels"]) == {1} for row in rows if row["source"] == "selfplay:right")

    done = gym("replay", str(out / "bundles"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 bundles replayed identically" in done.stdout

    edited = sorted((out / "bundles").iterdir())[0]
    bundle = json.loads(edited.read_text())
    bundle["chain"]["decision"] = {"accepted": False, "reason": "meta_rejects"}
    edited.write_text(json.dumps(bundle))
    done = gym("replay", str(edited))
    assert done.returncode == 1 and "decision" in done.stdout and "0/1 bundles replayed identically" in done.stdout


@pytest.mark.slow
def test_a_gullible_verifier_leaves_only_right_answers(tmp_path):
    summary = selfplay(tmp_path / "g", "--max-problems", "4", "--policy", "scripted:selfplay-gullible")
    assert summary["accepted"] == summary["check"]["right"] < summary["chains"] == 4
    assert summary["rejected"] == {"verifier_disagrees": summary["check"]["wrong"]}
    assert summary["meta_verifier"]["ran"] == summary["check"]["right"]


def test_an_existing_output_directory_is_refused(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "chains.jsonl").write_text("earlier\n")
    line = one_line(gym("selfplay", CONFIG, "--max-problems", "1", "--out", str(out)), 2, str(out))
    assert "new --out" in line and (out / "chains.jsonl").read_text() == "earlier\n"
    (tmp_path / "empty").mkdir()  # an empty directory is no earlier run
    summary = selfplay(tmp_path / "empty", "--max-problems", "1", "--policy", "scripted:selfplay")
    assert summary["chains"] == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--policy", "scripted:reference"], "scripted:reference"),
        (["--policy", "nonsense"], "nonsense"),
        (["--policy", "local:"], "local:"),
        (["--replay-rate", "2"], "replay_rate"),
        (["--max-problems", "0"], "--max-problems"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, args, named):
    argv = ["selfplay", CONFIG, "--out", str(tmp_path / "x"), "--max-problems", "1", *args]
    one_line(gym(*argv), 2, named)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_local_policy_must_cover_the_tokenizer(tmp_path):
    serve = tmp_path / "small.yaml"
    serve.write_text(
        "policy: {type: rdep_moe, seed: 0, model: {vocab_size: 256, hidden_size: 16, num_hidden_layers: 1, "
        "num_dense_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 8, intermediate_size: 32, "
        "moe_intermediate_size: 8, num_experts: 2, num_experts_per_tok: 1, num_shared_experts: 0, "
        "max_position_embeddings: 512}}\n"
    )
    argv = ["selfplay", CONFIG, "--max-problems", "1", "--out", str(tmp_path / "x"), "--policy", f"local:{serve}"]
    one_line(gym(*argv), 2, "256 token ids", "selfplay --policy takes")
    assert not (tmp_path / "x").exists()


def test_a_bad_config_file_is_a_one_line_error(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("environment: configs/math_smoke.yaml\nreplay_rat: 0.5\n")
    one_line(gym("selfplay", str(config), "--max-problems", "1", "--out", str(tmp_path / "x")), 2, "replay_rat")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_leaves_whole_lines_and_a_summary(tmp_path, signum, code):
    out = tmp_path / "int"
    process = subprocess.Popen(
        [sys.executable, "-m", "gym", "selfplay", CONFIG, "--max-problems", "36", "--policy", "scripted:selfplay"]
        + ["--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        (out / "chains.jsonl").exists() and (out / "chains.jsonl").read_text().count("\n") >= 2
    ):
        time.sleep(0.2)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr and f"interrupted by {signal.Signals(signum).name}" in stderr
    summary = json.loads((out / "summary.json").read_text())
    chains = lines(out / "chains.jsonl")
    assert summary["interrupted"] is True and 2 <= summary["chains"] == len(chains) < 36
    assert len(lines(out / "accepted.jsonl")) == summary["accepted"]
    assert len(lines(out / "verifier_rows.jsonl")) == summary["verifier_rows"]
    assert json.loads(stdout) == summary


@pytest.mark.slow
def test_the_tiny_policy_runs_end_to_end_and_its_failures_are_counted(tmp_path):
    """Random init: its turns almost never parse; every one is a counted, classified failure."""
    summary = selfplay(tmp_path / "tiny", "--max-problems", "2")
    assert summary["policy"] == "local:configs/policy_tiny.yaml" and summary["chains"] == 2
    generator = summary["generator"]
    assert generator["ran"] == 2 and generator["parsed"] + sum(generator["failures"].values()) == 2
    assert summary["parse_failures"] == sum(
        sum(summary[r]["failures"].values()) for r in ("generator", "verifier", "meta_verifier")
    )
    assert sum(summary["rejected"].values()) + summary["accepted"] == 2
    chains = lines(tmp_path / "tiny" / "chains.jsonl")
    assert len(chains) == 2 and all(set(c["roles"]) <= {"generator", "verifier", "meta_verifier"} for c in chains)


def test_an_unreachable_policy_server_is_an_infrastructure_exit(tmp_path):
    """Every problem's engine call fails: no chain, no role failure counted, exit 3 (the infrastructure class)."""
    out = tmp_path / "down"
    done = gym("selfplay", CONFIG, "--max-problems", "2", "--policy", "http://127.0.0.1:9", "--out", str(out))
    assert done.returncode == 3 and "the engine failed on every problem" in done.stderr, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["engine_errors"], summary["chains"], summary["parse_failures"]) == (2, 0, 0)
    assert [set(c) for c in lines(out / "chains.jsonl")] == [{"chain_id", "task_id", "engine_error"}] * 2
