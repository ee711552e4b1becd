"""The ``distributed.fsdp`` section: off by default, each field validated, errors that name the field; and the
parts of sharded training that need no process group (the compute dtype, finding the decoder blocks, each
rank's device)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.trainer_support import FAKE_ENVIRONMENT, TINY
from trainer.config import DistributedConfig, FSDPConfig, TrainConfig
from trainer.distributed import World, rank_device
from trainer.errors import ConfigError
from trainer.fsdp import compute_dtype, decoder_blocks


def parse(fsdp: dict, **top) -> TrainConfig:
    data = {
        "environment": FAKE_ENVIRONMENT,
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        "distributed": {"fsdp": fsdp},
        **top,
    }
    return TrainConfig.parse(data, source="run.yaml")


def test_sharding_is_off_by_default_so_one_process_trains_as_before() -> None:
    assert DistributedConfig().fsdp == FSDPConfig(enabled=False)
    config = parse({"enabled": True, "mixed_precision": "float32", "activation_checkpointing": True})
    assert config.distributed.fsdp.enabled and config.distributed.fsdp.activation_checkpointing
    assert parse({"enabled": True, "cpu_offload": True}, device="cuda:0").distributed.fsdp.cpu_offload


@pytest.mark.parametrize(
    ("fsdp", "top", "names"),
    [
        (
            {"activation_checkpointing": True},
            {},
            ["distributed.fsdp: ", "activation_checkpointing has no effect", "enabled: true"],
        ),
        (
            {"mixed_precision": "bfloat16", "cpu_offload": True},
            {},
            ["mixed_precision, cpu_offload have no effect", "remove them"],
        ),
        ({"enabled": True, "mixed_precision": "fp16"}, {}, ["distributed.fsdp.mixed_precision", "'bfloat16'"]),
        ({"enabled": True, "shard_experts": True}, {}, ["distributed.fsdp.shard_experts", "Extra inputs"]),
        ({"enabled": "sometimes"}, {}, ["distributed.fsdp.enabled", "boolean"]),
        ({"enabled": True, "cpu_offload": True}, {}, ["distributed.fsdp.cpu_offload", "CUDA", "device is cpu"]),
        (
            {"enabled": True},
            {"algorithm": {"kl": {"coef": 0.1, "placement": "reward"}}},
            ["algorithm.kl.placement", "rank 0 alone", "placement: loss"],
        ),
    ],
)
def test_a_setting_sharding_cannot_honour_is_a_config_error_naming_the_field(fsdp, top, names) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(fsdp, **top)
    message = str(caught.value)
    assert message.startswith("run.yaml: ")
    assert all(name in message for name in names), message


def test_the_kl_in_the_loss_is_fine_sharded() -> None:
    assert parse({"enabled": True}, algorithm={"kl": {"coef": 0.1}}).algorithm.kl.coef == 0.1


@pytest.mark.parametrize(
    ("choice", "device", "dtype"),
    [
        ("auto", "cuda", torch.bfloat16),
        ("auto", "cuda:1", torch.bfloat16),
        ("auto", "cpu", None),
        ("bfloat16", "cpu", torch.bfloat16),
        ("float32", "cuda", None),
    ],
)
def test_mixed_precision_computes_in_bfloat16_on_cuda_and_float32_on_the_cpu(choice, device, dtype) -> None:
    assert compute_dtype(FSDPConfig(enabled=True, mixed_precision=choice), device) == dtype


def test_the_decoder_blocks_are_the_classes_a_model_names_unsplittable() -> None:
    from policies.hf_config import RdepMoeConfig
    from policies.modeling import RdepMoeForCausalLM
    from tests.trainer_support import ARCH

    model = RdepMoeForCausalLM(RdepMoeConfig.from_architecture(ARCH))
    assert decoder_blocks(model) == list(model.model.layers)

    class Flat(nn.Module):
        _no_split_modules = ["Block"]

        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 2)

    with pytest.raises(ConfigError, match=r"Flat names no decoder block class .*\['Block'\]"):
        decoder_blocks(Flat())


@pytest.mark.parametrize(
    ("device", "world", "placed"),
    [
        ("cuda", World(rank=1, world_size=2, local_rank=1), "cuda:1"),
        ("cuda", World(), "cuda"),
        ("cuda:3", World(rank=1, world_size=2, local_rank=1), "cuda:3"),
        ("cpu", World(rank=1, world_size=2, local_rank=1), "cpu"),
    ],
)
def test_under_torchrun_a_bare_cuda_is_each_ranks_own_gpu(device, world, placed) -> None:
    assert rank_device(device, world) == placed
