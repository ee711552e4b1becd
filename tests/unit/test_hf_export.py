"""`export_hf` and the checkpoint digests in one process, without a process group.

The two-rank paths (FSDP2 DTensors, RDEP expert shards, DCP save and resume) are
tests/integration/test_sharded_checkpoint.py; here the parts that need no torchrun: a tied Qwen2 written as
several safetensors files with an index, loaded back by transformers to the same logits, and digests that name
each damaged file.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from trainer.errors import CheckpointError, ConfigError
from trainer.sharded_checkpoint import export_hf, record_digests, verify_digests


def tied_qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).eval()


def test_a_tied_model_exports_as_several_files_that_transformers_loads_to_the_same_logits(tmp_path):
    model = tied_qwen2()
    out = export_hf(model, tmp_path / "hf", max_shard_bytes=8_000)  # ~5 KB per layer: one file per few tensors
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(files) > 2 and sorted(set(index["weight_map"].values())) == files
    assert "lm_head.weight" not in index["weight_map"]  # tied: written once, as the embedding
    assert set(index["weight_map"]) == set(model.state_dict()) - {"lm_head.weight"}
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    loaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    ids = torch.arange(20).reshape(2, 10)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert not (tmp_path / "hf.tmp").exists()
    with pytest.raises(ConfigError, match="exists and is not empty"):
        export_hf(model, out)


def test_digests_name_each_missing_added_or_altered_file(tmp_path):
    for name, data in (("a.distcp", b"a" * 100), ("b.pt", b"b" * 10), ("state.json", b"{}")):
        (tmp_path / name).write_bytes(data)
    record_digests(tmp_path)
    assert set(json.loads((tmp_path / "digests.json").read_text())) == {"a.distcp", "b.pt"}  # not state.json
    verify_digests(tmp_path)
    (tmp_path / "a.distcp").write_bytes(b"a" * 99)
    (tmp_path / "b.pt").unlink()
    (tmp_path / "c.distcp").write_bytes(b"c")
    with pytest.raises(CheckpointError) as raised:
        verify_digests(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path}: damaged checkpoint: a.distcp: altered or truncated since it was written; b.pt: missing; "
        "c.distcp: not written by this checkpoint"
    )
