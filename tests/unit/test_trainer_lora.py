"""LoRA on a Hugging Face policy (trainer/lora.py): a tiny random Qwen2 written here, never downloaded.

Two GRPO steps move the adapters and nothing else; the merged weights reach an in-process engine and change
its samples, and equal peft's own merge; the KL reference is the base; a checkpoint resumes exactly; the
exports load with peft and with transformers alone; bad lora sections are refused, naming the field.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from policies.sampling import SamplingParams
from tests.policy_support import HF_TINY
from tests.tokenizer_support import build_hf_dir
from tests.trainer_support import FAKE_ENVIRONMENT, TINY, scored_samples
from trainer.batch import collate
from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.errors import ConfigError
from trainer.learner import Learner
from trainer.lora import write_merged
from trainer.policy import InProcessSync, build_engine
from trainer.update import score


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A random-init Qwen2 directory (seeded) with a tokenizer beside it (for the export's copy)."""
    directory = build_hf_dir(tmp_path_factory.mktemp("qwen"))
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**HF_TINY)).save_pretrained(directory)
    return directory


def train_config(hf_dir, run_dir, lora: dict | None = None, **top) -> dict:
    return {
        "run_dir": str(run_dir),
        "environment": FAKE_ENVIRONMENT,
        "policy": {"type": "hf", "path": str(hf_dir)},
        "optimizer": {"lr": 0.01, "grad_clip": None},
        "loop": {"steps": 2, "micro_batch_size": 2},
        "metrics": {"progress": False, "tensorboard": False},
        "lora": {"r": 4, "alpha": 8} if lora is None else lora,
        **top,
    }


def learner(hf_dir, run_dir, resume: bool = False, **top) -> Learner:
    return Learner(TrainConfig.parse(train_config(hf_dir, run_dir, **top)), World(), resume)


def adapters_and_base(model) -> tuple[dict, dict]:
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {k: v for k, v in state.items() if ".lora_" in k}, {k: v for k, v in state.items() if ".lora_" not in k}


def test_two_grpo_steps_change_only_the_adapters_and_the_kl_reference_is_the_base(hf_dir, tmp_path):
    run = learner(hf_dir, tmp_path, algorithm={"kl": {"coef": 0.1}})
    run.freeze_reference()
    trainable = {id(p) for p in run.model.parameters() if p.requires_grad}
    assert {id(p) for group in run.optimizer.param_groups for p in group["params"]} == trainable
    names = [n for n, p in run.model.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    adapters, base = adapters_and_base(run.model)
    assert len(adapters) == 2 * 7 * HF_TINY["num_hidden_layers"]  # A and B of 7 projections per layer

    first = run.train_step(scored_samples(4, seed=1))
    second = run.train_step(scored_samples(4, seed=2))

    adapters_after, base_after = adapters_and_base(run.model)
    assert base_after.keys() == base.keys()
    assert [k for k in base if not torch.equal(base[k], base_after[k])] == []  # every base weight bit-identical
    assert [k for k in adapters if torch.equal(adapters[k], adapters_after[k])] == []  # every A and B moved
    # B starts at 0: step 1's policy is the base exactly, so its KL to the reference is exactly 0; after it not
    assert first["kl"] == 0.0 and second["kl"] > 1e-6

    batch = collate(scored_samples(4, seed=3))
    plain = AutoModelForCausalLM.from_pretrained(hf_dir, local_files_only=True)
    policy = score(run.model, batch).logprobs
    reference = score(run.reference, batch).logprobs
    assert torch.equal(reference, score(plain, batch).logprobs)  # adapters off: the base, bit for bit
    assert not torch.equal(policy, reference)
    assert torch.equal(score(run.model, batch).logprobs, policy)  # the adapters are back on after it
    assert run.model.training  # the reference's eval mode did not stick


def test_merged_weights_reach_the_engine_change_its_samples_and_equal_peft_merge(hf_dir, tmp_path):
    run = learner(hf_dir, tmp_path)
    engine = build_engine(AutoModelForCausalLM.from_pretrained(hf_dir, local_files_only=True), max_batch_size=4)
    sync = InProcessSync(engine)
    plain = {k: v.clone() for k, v in engine.policy.model.state_dict().items()}
    fresh = run.weights_for_engine()
    assert fresh.keys() == plain.keys()
    assert [k for k in plain if not torch.equal(fresh[k], plain[k])] == []  # B = 0: merged is the base exactly

    prompts = [[3, 4, 5, 6], [7, 8]]
    params = [SamplingParams(max_tokens=12, seed=5, temperature=1.0)] * 2
    before = engine.generate_batch(prompts, params)
    run.train_step(scored_samples(4, seed=1))
    run.train_step(scored_samples(4, seed=2))
    trainer_state = {k: v.clone() for k, v in run.model.state_dict().items()}

    merged = run.weights_for_engine()
    adapter_bytes = sum(p.nbytes for p in run.model.parameters() if p.requires_grad)
    assert merged.snapshot_bytes == adapter_bytes  # its own memory: the adapters' copy, nothing of the base
    assert len(merged.targets) == 7 * HF_TINY["num_hidden_layers"]
    sync.push(merged, 1)
    after = engine.generate_batch(prompts, params)
    assert engine.weights_version == 1 and {c.weights_version for c in after} == {1}
    assert [(c.token_ids, c.logprobs) for c in after] != [(c.token_ids, c.logprobs) for c in before]
    loaded = engine.policy.model.state_dict()
    assert [k for k in merged if not torch.equal(loaded[k], merged[k])] == []
    assert [k for k in merged.targets if torch.equal(loaded[k], plain[k])] == []  # every target moved

    # the push neither merged nor changed the trainer's model
    assert not any(m.merged for m in run.model.modules() if isinstance(m, LoraLayer))
    state = run.model.state_dict()
    assert [k for k in trainer_state if not torch.equal(trainer_state[k], state[k])] == []

    reference = copy.deepcopy(run.lora.peft).merge_and_unload().state_dict()
    assert reference.keys() == merged.keys()
    error = max(float((merged[k] - reference[k]).abs().max()) for k in reference)
    # measured 0.0 in float32: W + (B @ A) * scaling in the order peft's merge adds it
    assert error == 0.0


def test_bfloat16_merge_equals_peft_merge(hf_dir, tmp_path):
    run = learner(hf_dir, tmp_path, dtype="bfloat16")
    with torch.no_grad():  # adapters as a few steps would leave them (peft keeps them in float32)
        generator = torch.Generator().manual_seed(0)
        for m in run.model.modules():
            if isinstance(m, LoraLayer):
                m.lora_B["default"].weight.copy_(torch.randn(m.lora_B["default"].weight.shape, generator=generator))
    merged = run.weights_for_engine()
    base = run.model.state_dict()
    reference = copy.deepcopy(run.lora.peft).merge_and_unload().state_dict()
    for name in merged.targets:
        assert merged[name].dtype == reference[name].dtype == torch.bfloat16
        assert not torch.equal(merged[name], base[name.replace(".weight", ".base_layer.weight")])
    # measured identical: peft adds its float32 delta into the bf16 weight in place (one rounding of the float32
    # sum), as MergedWeights does
    assert [k for k in merged.targets if not torch.equal(merged[k], reference[k])] == []


def test_a_checkpoint_holds_the_adapters_and_resumes_exactly(hf_dir, tmp_path):
    first = learner(hf_dir, tmp_path)
    first.train_step(scored_samples(4, seed=1))
    first.state.step = 1
    first.save()
    first.train_step(scored_samples(4, seed=2))

    checkpoint = tmp_path / "checkpoints" / "step_000001"
    saved = load_file(str(checkpoint / "model.safetensors"))
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert sum(t.nbytes for t in saved.values()) == sum(p.nbytes for p in first.model.parameters() if p.requires_grad)
    assert not (checkpoint / "config.json").exists()  # adapters alone are no model directory

    resumed = learner(hf_dir, tmp_path, resume=True)
    assert resumed.resumed and resumed.state.step == 1
    resumed.train_step(scored_samples(4, seed=2))
    theirs, ours = resumed.model.state_dict(), first.model.state_dict()
    assert [k for k in ours if not torch.equal(ours[k], theirs[k])] == []
    optimizer_a, optimizer_b = first.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert optimizer_a.keys() == optimizer_b.keys()
    for key in optimizer_a:
        assert all(torch.equal(optimizer_a[key][n], optimizer_b[key][n]) for n in ("exp_avg", "exp_avg_sq", "step"))


def test_exports_load_with_peft_and_with_transformers_alone(hf_dir, tmp_path):
    run = learner(hf_dir, tmp_path)
    run.train_step(scored_samples(4, seed=1))
    run.train_step(scored_samples(4, seed=2))
    run.state.step = 2  # the last step: save exports
    run.save()
    out = tmp_path / "lora"
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])
    run.model.eval()
    with torch.no_grad():
        trained = run.model(input_ids=ids).logits
        merged = (
            AutoModelForCausalLM.from_pretrained(out / "merged", local_files_only=True).eval()(input_ids=ids).logits
        )
        base = AutoModelForCausalLM.from_pretrained(hf_dir, local_files_only=True)
        adapter = PeftModel.from_pretrained(base, out / "adapter").eval()(input_ids=ids).logits
    assert (out / "merged" / "tokenizer.json").is_file() and (out / "merged" / "model.safetensors").is_file()
    assert torch.equal(adapter, trained)  # the same modules and tensors: bit for bit
    # merged W + BA vs x W^T + (x A^T) B^T: the same sums in another order; measured max |diff| 8.9e-8 on logits of
    # magnitude up to 0.37 (the adapters moved them by 0.24), allowed 1e-5 (110x)
    assert float((merged - trained).abs().max()) <= 1e-5
    assert not torch.equal(merged, base.eval()(input_ids=ids).logits)

    (out / "merged" / "model.safetensors.index.json").write_text("{}")  # a stale file of an earlier export
    run.lora.export(out)
    assert not (out / "merged" / "model.safetensors.index.json").exists() and not (tmp_path / "lora.tmp").exists()

    sharded = tmp_path / "sharded"
    write_merged(run.model, run.weights_for_engine(), sharded, shard_bytes=40_000)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2 and not list(sharded.glob("*.tmp"))
    with torch.no_grad():
        again = AutoModelForCausalLM.from_pretrained(sharded, local_files_only=True).eval()(input_ids=ids).logits
    assert torch.equal(again, merged)


def test_target_modules_the_model_lacks_are_refused_naming_the_field(hf_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"lora\.target_modules: 'qkv_proj' matches no module") as err:
        learner(hf_dir, tmp_path, lora={"target_modules": ["q_proj", "qkv_proj"]})
    assert "q_proj" in str(err.value).split("linear layers are")[1]  # it lists what the model has
    with pytest.raises(ConfigError, match=r"lora\.target_modules: 'lm_head' is the output head"):
        learner(hf_dir, tmp_path, lora={"target_modules": ["lm_head"]})
    with pytest.raises(ConfigError, match=r"lora\.target_modules: 'embed_tokens' matches Embedding, not nn.Linear"):
        learner(hf_dir, tmp_path, lora={"target_modules": ["embed_tokens"]})
    learner(hf_dir, tmp_path, lora={"target_modules": ["q_proj", "down_proj"]})  # the control: names it has


@pytest.mark.parametrize(
    ("lora", "top", "field"),
    [
        ({"r": 0}, {}, "lora.r"),
        ({"r": -4}, {}, "lora.r"),
        ({"alpha": 0}, {}, "lora.alpha"),
        ({"dropout": 1.0}, {}, "lora.dropout"),
        ({"target_modules": []}, {}, "lora.target_modules"),
        ({"target_modules": [""]}, {}, "lora.target_modules.0"),
        ({"rank": 8}, {}, "lora.rank"),
        ({}, {"policy": {"type": "rdep_moe", "seed": 0, "model": TINY}}, "lora: adapters train a"),
        ({}, {"warm_start": {"steps": 2}, "algorithm": {"kl": {"coef": 0.1}}}, "lora: with warm_start.steps > 0"),
        ({}, {"distributed": {"fsdp": {"enabled": True}}}, "lora: adapters train replicated"),
    ],
)
def test_bad_lora_sections_are_refused_naming_the_field(hf_dir, tmp_path, lora, top, field):
    with pytest.raises(ConfigError, match=f"config: {field}"):
        TrainConfig.parse(train_config(hf_dir, tmp_path, lora=lora, **top))


def test_the_default_section_targets_every_projection(hf_dir, tmp_path):
    config = TrainConfig.parse(train_config(hf_dir, tmp_path, lora={}))
    assert config.lora.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert TrainConfig.parse({k: v for k, v in train_config(hf_dir, tmp_path).items() if k != "lora"}).lora is None
