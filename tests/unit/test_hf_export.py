"""`export_hf` and the checkpoint digests in one process, without a process group.

The two-rank paths (FSDP2 DTensors, RDEP expert shards, DCP save and resume) are
tests/integration/test_sharded_checkpoint.py; here the parts that need no torchrun: a tied Qwen2 written as
several safetensors files with an index, loaded back by transformers to the same logits; digests that name
each damaged file; and what ``python -m gym export`` reads of the one-process and DP+RDEP formats.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
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


def test_export_reads_the_one_process_and_the_data_parallel_formats(tmp_path):
    import copy

    from policies.config import MoEArchitecture
    from policies.experts import ExpertShard
    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM
    from trainer.checkpoint import Checkpointer, TrainerState, model_tensors, weights_file
    from trainer.export_cli import checkpoint_model

    arch = MoEArchitecture(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_dense_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=16,
        moe_intermediate_size=8,
        num_experts=4,
        num_experts_per_tok=2,
        num_shared_experts=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = RdepMoeForCausalLM(RdepMoeConfig.from_architecture(arch))
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    one = Checkpointer(tmp_path / "one").save(model, optimizer, scheduler, TrainerState(step=1))
    two = tmp_path / "two"  # what two DP+RDEP ranks write: experts [0, 2) and [2, 4), the rest on both
    two.mkdir()
    for rank in (0, 1):
        shard = copy.deepcopy(model)
        for module in shard.modules():
            if isinstance(module, ExpertShard):
                module.shard_(2 * rank, 2)
        save_file(model_tensors(shard), str(two / weights_file(rank, 2)))
    model.config.to_json_file(str(two / "config.json"))
    (two / "state.json").write_text(TrainerState(step=1, world_size=2).model_dump_json())
    for path in (one, two):
        state = checkpoint_model(path).state_dict()
        assert set(state) == set(model.state_dict())
        for key, value in model.state_dict().items():
            assert torch.equal(state[key], value), (path.name, key)
