"""A LoRA run through the real loop (trainer/loop.py) on the in-memory workspaces and grader: the engine starts on
the base and samples each later step on the pushed merged weights; the run ends with adapter-only checkpoints and
the two exports (trainer/lora.py)."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tests.policy_support import HF_TINY
from tests.trainer_support import config_data, train_with_fakes
from trainer.checkpoint import checkpoint_directory
from trainer.config import TrainConfig
from trainer.errors import ConfigError


@pytest.mark.slow
def test_a_lora_run_samples_on_merged_weights_and_exports_them(tmp_path):
    base_dir = tmp_path / "qwen"
    torch.manual_seed(0)
    # the environment's tokenizer has 8192 ids, its episodes up to 1024 tokens
    Qwen2ForCausalLM(Qwen2Config(**{**HF_TINY, "vocab_size": 8192, "max_position_embeddings": 1024})).save_pretrained(
        base_dir
    )
    data = config_data(tmp_path / "run", bound=1.0, steps=2)
    data.update(
        policy={"type": "hf", "path": str(base_dir)},
        lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]},
        optimizer={"lr": 0.05},
        algorithm={  # a random policy's groups tie (every sample hits the budget): the entropy bonus moves it
            "kl": {"coef": 0.05},
            "entropy_coef": 0.1,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"mode": "none"},
        },
    )
    summary = train_with_fakes(TrainConfig.parse(data, source="test"))
    run = tmp_path / "run"
    assert summary["steps"] == 2 and summary["weights_version"] == 2

    versions = [json.loads(line)["policy_version"] for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(set(versions)) == [0, 1]  # step 2 sampled on the merged weights pushed after step 1

    saved = load_file(str(run / "checkpoints" / "step_000002" / "model.safetensors"))
    assert len(saved) == 2 * 3 * 2 and all(".lora_" in k for k in saved)  # A, B x 3 targets x 2 layers

    base = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True)
    merged = AutoModelForCausalLM.from_pretrained(run / "lora" / "merged", local_files_only=True)
    moved = [k for k, v in merged.state_dict().items() if not torch.equal(v, base.state_dict()[k])]
    assert sorted({k.split(".")[-2] for k in moved}) == ["down_proj", "q_proj", "v_proj"]  # only the targets
    ids = torch.tensor([[5, 17, 300, 4000, 12]])
    with torch.no_grad():
        ours = merged.eval()(input_ids=ids).logits
        theirs = PeftModel.from_pretrained(base, run / "lora" / "adapter").eval()(input_ids=ids).logits
    # measured max |diff| 6e-8 (the merged product vs peft's adapter path), allowed 1e-5
    assert float((ours - theirs).abs().max()) <= 1e-5

    # the run's checkpoints hold adapters only: a whole model is asked of them, the error names the merged export
    with pytest.raises(ConfigError, match="lora/merged"):
        checkpoint_directory(run)
