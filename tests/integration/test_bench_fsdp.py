"""`python -m gym bench trainer --fsdp` end to end on a small Qwen2 (the bench's own runs use 112 M parameters,
docs/benchmarks.md): one plain process and 2 FSDP ranks each take a GRPO step, count the bytes they hold, and the
figures are printed and written side by side."""

from __future__ import annotations

import json

import pytest

from gym.cli import main
from trainer import bench_fsdp

SMALL = {
    "vocab_size": 2048,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}


@pytest.mark.slow
def test_two_fsdp_ranks_hold_about_half_the_state_of_one_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_fsdp, "QWEN2_100M", SMALL)
    out = tmp_path / "fsdp.json"
    assert main(["bench", "trainer", "--fsdp", "--fsdp-layers", "2", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    printed = dict(line.split(None, 1) for line in capsys.readouterr().out.strip().splitlines())
    assert set(printed) == set(figures)
    params = figures["params_total"]
    assert 700_000 < params < 1_000_000  # the small model: embedding and head 2 x 262 k, two blocks
    one = figures["per_rank_state_bytes_w1"]
    # one process: fp32 weights, gradients and AdamW's two moments (plus a step counter per tensor)
    assert figures["parameters_bytes_w1"] == figures["gradients_bytes_w1"] == 4 * params
    assert 8 * params <= figures["optimizer_bytes_w1"] <= 8 * params + 4 * 100
    assert one == 16 * params + (figures["optimizer_bytes_w1"] - 8 * params)
    # two ranks: each holds its shards, both ranks alike, about half (counted from the tensors held)
    assert figures["per_rank_state_bytes_w2"] == max(figures["per_rank_state_bytes_w2_each"])
    assert sum(figures["per_rank_state_bytes_w2_each"]) >= one  # every shard held somewhere (the counters twice)
    assert 0.45 <= figures["state_ratio"] <= 0.55
    assert figures["step_s_w1"] > 0 and figures["step_s_w2"] > 0 and figures["tokens_per_step"] > 0
