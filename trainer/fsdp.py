"""Sharded training: torch's FSDP2 (`fully_shard`) for every weight that is not a routed expert.

What is sharded. Attention, dense MLPs, shared experts, routers, norms, the embedding and the LM head
of our RDEP policy or of any Hugging Face causal LM: each decoder block is one FSDP unit (its weights
all-gathered in one collective before its forward and again in backward, its gradients
reduce-scattered in one collective), and the root unit holds what is left (embedding, final norm,
head). Each rank keeps 1/W of every such weight (a DTensor sharded on dim 0), of its gradient and of
its AdamW moments (the optimizer steps the local shards). Blocks are the classes a model names in
``_no_split_modules`` (transformers' own list of what must not be split: ``DecoderLayer`` of ours,
``Qwen2DecoderLayer``, ...).

Routed experts stay RDEP-sharded (`trainer.distributed.shard_experts`: expert e on rank e // (E/W))
and are kept out of FSDP with ``fully_shard(..., ignored_params=...)``: a block is still one FSDP unit
(one all-gather for its attention, router and shared experts) while its expert shards are never
gathered, and their gradients are already complete when backward returns through the RDEP
exchange. Sharding only the submodules without experts instead would cut each MoE block into
several units and collectives for no memory gain.

The mesh is 2-D, ``("dp", "ep")``: experts are split over ``ep`` and replicated over ``dp``; dense
weights are sharded over the flattening of both, every rank. RDEP places experts over all ranks, so
with experts to shard the mesh is (1, W) (at W=2: dp=1, ep=2); without (a Hugging Face model, or
``expert_parallel: false``, where every rank holds every expert and `ProcessGroupSync` all-reduces
their gradients, as without FSDP) it is (W, 1).

Gradients. FSDP sums gradients over ranks (divide factor 1, plain SUM): the loss is normalised by the
whole batch's counts (`trainer.update.Denominators`), so the sum of the ranks' gradients is the
one-process gradient; FSDP's default would average them. `ProcessGroupSync` leaves DTensor gradients
alone and counts their local shards once each in the global norm. A parameter no token reached on a
rank still joins the reduce-scatter as zeros (``set_reduce_scatter_unused_params``).

The scoring pass. `trainer.update.score` runs ``model.base_model`` and reads the head's weight for the
fused logprob kernel without calling the root module, so the root's FSDP hooks (gathering the
embedding, norm and head) would never run; the scoring function is registered on the root as an
FSDP forward method (``register_fsdp_forward_method``) and `score` calls it.

Mixed precision (`MixedPrecisionPolicy`): bf16 compute with fp32 parameters and fp32 reduction on CUDA,
fp32 on the CPU (``mixed_precision: auto``). Expert shards are outside FSDP, so a bf16 block's rows are
cast to the experts' dtype on the way in and back on the way out. Activation checkpointing wraps each
block with torch's composable ``checkpoint`` (module hooks: parameter names do not change). CPU offload
is FSDP's ``CPUOffloadPolicy`` (CUDA only). One process (no torchrun) joins a one-rank process group, so
the same settings apply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import MethodType

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor

from policies.experts import ExpertShard, MoEBlock
from trainer.config import DistributedConfig, FSDPConfig
from trainer.distributed import World, sharded_parameters
from trainer.errors import ConfigError
from trainer.update import SCORE_FORWARD, sampled_token_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sharding:
    """How one model was sharded: the mesh, the settings, and the mesh of its dense weights."""

    mesh: DeviceMesh  # ("dp", "ep")
    dense: DeviceMesh  # 1-D, every rank: the flattening of ("dp", "ep")
    config: FSDPConfig
    compute_dtype: torch.dtype | None  # None: the weights' own dtype


def compute_dtype(config: FSDPConfig, device: str) -> torch.dtype | None:
    """bf16 when asked (auto: on CUDA); None keeps the weights' dtype."""
    choice = config.mixed_precision
    if choice == "auto":
        choice = "bfloat16" if device.startswith("cuda") else "float32"
    return torch.bfloat16 if choice == "bfloat16" else None


def training_mesh(world: World, device: str, experts_sharded: bool) -> DeviceMesh:
    """The ("dp", "ep") mesh: (1, W) when RDEP shards experts over every rank, else (W, 1)."""
    ep = world.world_size if experts_sharded else 1
    return init_device_mesh(torch.device(device).type, (world.world_size // ep, ep), mesh_dim_names=("dp", "ep"))


def decoder_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's decoder blocks: modules of the classes it names in ``_no_split_modules``."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ConfigError(
            f"distributed.fsdp.enabled: {type(model).__name__} names no decoder block class in _no_split_modules "
            f"(found {sorted(names) or 'none'}), and FSDP shards one unit per block"
        )
    return blocks


def shard_model(
    model: nn.Module, config: DistributedConfig, world: World, device: str, trained: bool = True
) -> Sharding:
    """Shard ``model`` in place (after `shard_experts`, before the optimizer is built); collective.
    ``trained=False`` (a frozen reference) takes no activation checkpointing: it has no backward."""
    fsdp = config.fsdp
    _join_process_group(config, device)
    experts = _expert_parameters(model)
    mesh = training_mesh(world, device, experts_sharded=bool(sharded_parameters(model)))
    dense = mesh["dp", "ep"]._flatten("dp_ep")  # torch's own way to name the product of two dimensions
    dtype = compute_dtype(fsdp, device)
    mixed = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype is not None else None)
    offload = CPUOffloadPolicy() if fsdp.cpu_offload else OffloadPolicy()
    blocks = decoder_blocks(model)
    for block in blocks:
        if fsdp.activation_checkpointing and trained:
            checkpoint(block)
        fully_shard(block, mesh=dense, mp_policy=mixed, offload_policy=offload, ignored_params=experts)
    fully_shard(model, mesh=dense, mp_policy=mixed, offload_policy=offload, ignored_params=experts)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum, not mean: the loss already divides by the whole batch
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
            module.set_reduce_scatter_unused_params(True, recurse=False)
    if experts and dtype is not None:
        _cast_around_experts(model, dtype)
    _register_scoring(model)
    log.info(
        "FSDP: %d blocks over %d rank(s), mesh %s, compute %s%s%s",
        len(blocks),
        world.world_size,
        dict(zip(mesh.mesh_dim_names, mesh.shape)),
        dtype or next(model.parameters()).dtype,
        ", activation checkpointing" if fsdp.activation_checkpointing and trained else "",
        ", CPU offload" if fsdp.cpu_offload else "",
    )
    return Sharding(mesh=mesh, dense=dense, config=fsdp, compute_dtype=dtype)


def sharded_frozen_copy(model: nn.Module, fresh: nn.Module, config: DistributedConfig, world: World, device: str):
    """A no-grad copy of sharded ``model`` (the KL reference) made of ``fresh``, an unsharded model of the same
    architecture: its experts are cut to the same RDEP shards (same dispatcher), it is sharded the same way, and
    it takes ``model``'s local shards one by one. FSDP modules cannot be deep-copied, and gathering the full
    weights to copy them would hold the whole model on every rank."""
    for mine, theirs in zip(model.modules(), fresh.modules(), strict=True):
        if isinstance(mine, MoEBlock):
            theirs.experts.shard_(mine.experts.first, mine.experts.count)
            theirs.dispatcher = mine.dispatcher
    for p in fresh.parameters():
        p.requires_grad_(False)
    shard_model(fresh, config, world, device, trained=False)
    with torch.no_grad():
        theirs = fresh.state_dict()
        for name, mine in model.state_dict().items():
            _local(theirs[name]).copy_(_local(mine))
    return fresh.eval()


@dataclass(frozen=True)
class StateBytes:
    """Bytes this rank holds of the model's parameters, their gradients and the optimizer's state."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def resident_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> StateBytes:
    """Counted from the tensors this rank holds: a DTensor's local shard, an expert shard, the optimizer's
    state tensors (AdamW's moments over local shards, its step counters)."""

    def size(tensor: torch.Tensor) -> int:
        local = _local(tensor)
        return local.numel() * local.element_size()

    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return StateBytes(
        parameters=sum(size(p) for p in params),
        gradients=sum(size(p.grad) for p in params if p.grad is not None),
        optimizer=sum(size(v) for v in state),
    )


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _join_process_group(config: DistributedConfig, device: str) -> None:
    """One process (no torchrun): a one-rank group, so FSDP's settings apply there too."""
    placed = torch.device(device)
    if placed.type == "cuda" and placed.index is not None:
        torch.cuda.set_device(placed)  # FSDP's mesh uses the current CUDA device (a bare cuda is already it)
    if dist.is_initialized():
        return
    backend = config.backend if config.backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def _expert_parameters(model: nn.Module) -> set[nn.Parameter]:
    """Routed experts, kept out of FSDP: RDEP shards, or whole on every rank without expert parallel."""
    return {p for module in model.modules() if isinstance(module, ExpertShard) for p in module.parameters()}


def _cast_around_experts(model: nn.Module, dtype: torch.dtype) -> None:
    """Rows reach the experts in their weights' dtype and leave in the blocks' compute ``dtype``.

    Hazard: `MoEBlock`'s inference shortcut (no grad, on the CPU, every expert whole on this rank: the
    ``expert_parallel: false`` case) reads the expert weights without calling the shard, so a bf16 compute
    dtype on the CPU there would meet fp32 experts; on CUDA, and with RDEP, every row goes through the shard.
    """

    def cast_in(module: ExpertShard, args: tuple) -> tuple:
        rows, *rest = args
        return (rows.to(module.w_up.dtype), *rest)

    def cast_out(_module: ExpertShard, _args: tuple, out: torch.Tensor) -> torch.Tensor:
        return out.to(dtype)

    for module in model.modules():
        if isinstance(module, ExpertShard):
            module.register_forward_pre_hook(cast_in)
            module.register_forward_hook(cast_out)


def _register_scoring(model: nn.Module) -> None:
    """`trainer.update.score`'s pass as an FSDP forward method of the root (the root's hooks gather and
    release the embedding, final norm and head around it)."""
    setattr(model, SCORE_FORWARD, MethodType(sampled_token_scores, model))
    register_fsdp_forward_method(model, SCORE_FORWARD)
    hooked = getattr(model, SCORE_FORWARD)

    def scoring(*args):
        out = hooked(*args)
        if not torch.is_grad_enabled():  # the root stays gathered after forward for its backward; this has none
            model.reshard()
        return out

    setattr(model, SCORE_FORWARD, scoring)
