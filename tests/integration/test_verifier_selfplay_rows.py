"""The rows `gym selfplay` emits (verifier_rows.jsonl, issue 17 item 3) are process-verifier rows: the
verifier's reader takes every one, and each renders with one label slot per step."""

from __future__ import annotations

from gym.format.tokenizer import load_tokenizer
from gym.format.verifier import VerifierFormat
from tasks.step_labels import load_step_rows
from tests.cli_support import gym


def test_selfplay_rows_load_and_render_without_a_skip(tmp_path):
    done = gym(
        "selfplay", "configs/selfplay_tiny.yaml", "--max-problems", "6", "--policy", "scripted:selfplay",
        "--out", str(tmp_path / "sp"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = load_step_rows(tmp_path / "sp" / "verifier_rows.jsonl")
    assert len(rows.rows) == 6 and not rows.skipped, rows.summary()
    fmt = VerifierFormat(load_tokenizer("bpe"))
    for row in rows.rows:
        rendered = fmt.render(row)
        assert len(rendered.positions) == len(row.steps) and set(row.labels) <= {0, 1}
