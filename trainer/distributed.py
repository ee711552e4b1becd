"""Multi-process training under ``torchrun``: data parallel for dense weights, RDEP for experts.

Each rank trains on its shard of the batch. Routed experts are sharded over ranks (expert e on
rank e // (E / W)) and reached through an RDEP dispatcher, so an expert's gradient already holds
every rank's tokens when backward returns through the exchange; every other (replicated)
parameter's gradient is summed over ranks with one all-reduce. With ``distributed.fsdp`` those
other parameters are FSDP-sharded DTensors instead (`trainer.fsdp`), whose gradients FSDP's own
reduce-scatter has summed by then. The loss is normalised by the whole batch's counts (all ranks),
so the sum of the ranks' losses is exactly the one-process loss on the same data. gloo on CPU,
nccl on CUDA.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from policies.experts import ExpertShard
from trainer.config import DistributedConfig
from trainer.update import GradientSync

if TYPE_CHECKING:
    from trainer.commands import Command

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_world(config: DistributedConfig, device: str) -> World:
    """Join the torchrun process group when WORLD_SIZE > 1; a plain process is world size 1."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return World()
    backend = config.backend if config.backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=10))
    world = World(
        rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", "0"))
    )
    log.info("rank %d of %d (%s)", world.rank, world.world_size, backend)
    return world


def rank_device(device: str, world: World) -> str:
    """This rank's torch device: under torchrun a bare ``cuda`` is the rank's own GPU (``cuda:LOCAL_RANK``, as
    nccl needs one GPU per rank); any other device as written."""
    return f"cuda:{world.local_rank}" if device == "cuda" and world.distributed else device


def shard_experts(model: nn.Module, config: DistributedConfig, world: World) -> object | None:
    """Keep this rank's routed experts and route MoE layers through an RDEP dispatcher."""
    if not world.distributed or not config.expert_parallel or not hasattr(model, "use_dispatcher"):
        return None
    if config.dispatcher == "shared_memory":
        from policies.shm_dispatcher import SharedMemoryDispatcher

        dispatcher = SharedMemoryDispatcher(
            model.config.num_experts, model.config.hidden_size, config.dispatch_capacity
        )
    else:
        from policies.collective_dispatcher import CollectiveDispatcher

        dispatcher = CollectiveDispatcher(model.config.num_experts, config.dispatch_capacity)
    model.use_dispatcher(dispatcher)
    return dispatcher


def sharded_parameters(model: nn.Module) -> set[int]:
    """ids of parameters that live on one rank only (RDEP expert shards)."""
    ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, ExpertShard) and module.count < getattr(model.config, "num_experts", module.count + 1):
            ids.update(id(p) for p in module.parameters())
    return ids


class ProcessGroupSync(GradientSync):
    """GradientSync over the default process group."""

    def __init__(self, model: nn.Module) -> None:
        self.sharded = sharded_parameters(model)

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor

    def reduce_gradients(self, model: nn.Module) -> None:
        # expert shards are complete after the RDEP exchange, FSDP's DTensors after its reduce-scatter
        replicated = [p for p in model.parameters() if id(p) not in self.sharded and not isinstance(p, DTensor)]
        grads = [p.grad for p in replicated if p.grad is not None]
        missing = [p for p in replicated if p.requires_grad and p.grad is None]
        for p in missing:  # a rank whose tokens never reached a parameter still joins the all-reduce
            p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def grad_norm(self, model: nn.Module) -> float:
        replicated = torch.zeros((), dtype=torch.float64)
        sharded = torch.zeros((), dtype=torch.float64)
        for p in model.parameters():
            if p.grad is None:
                continue
            grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad  # FSDP: each element on one rank
            square = grad.detach().double().pow(2).sum().cpu()
            if id(p) in self.sharded or isinstance(p.grad, DTensor):
                sharded += square
            else:
                replicated += square
        dist.all_reduce(sharded)  # each expert shard is on one rank only
        total = float(replicated + sharded)
        return math.sqrt(total) if math.isfinite(total) else total


def full_state_dict(model: nn.Module, world: World, keep: bool = True) -> dict[str, torch.Tensor]:
    """Every persistent tensor with expert shards and FSDP's DTensors gathered from all ranks (collective when
    sharded), one tensor at a time: the full model exists once, in the returned dict, beside this rank's shards.
    ``keep=False`` (a rank that only takes part in the gathers) drops each gathered tensor at once and returns {}.
    """
    started = time.perf_counter()
    sharded = {name for name, p in model.named_parameters() if id(p) in sharded_parameters(model)}
    state: dict[str, torch.Tensor] = {}
    tensors = gathered = 0
    for name, value in model.state_dict().items():
        if isinstance(value, DTensor):
            full = value.full_tensor()
        elif world.distributed and name in sharded:
            local = value.detach().contiguous()
            parts = [torch.empty_like(local) for _ in range(world.world_size)]
            dist.all_gather(parts, local)
            full = torch.cat(parts, dim=0)
            del parts
        else:
            full = value
        tensors += 1
        gathered += full.numel() * full.element_size()
        if keep:
            state[name] = full.detach()
        del full
    log.info(
        "full weights: %d tensors, %.1f MB gathered in %.3f s",
        tensors,
        gathered / 1e6,
        time.perf_counter() - started,
    )
    return state


def broadcast_command(command: Command, world: World) -> None:
    """Rank 0 tells the other ranks what to do next (they wait in `receive_command`)."""
    if world.distributed:
        dist.broadcast_object_list([command], src=0)


def receive_command() -> Command:
    box: list = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def shutdown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
