"""The learner of one rank: model, optimizer, scheduler, the update step, checkpoints.

Rank 0 drives it from the asynchronous loop (`trainer.loop`); every other rank runs `follow`,
which mirrors rank 0's commands (train this batch, gather weights for the engine, save a
checkpoint, stop) so that every collective is entered by every rank in the same order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from trainer.batch import collate, shard
from trainer.checkpoint import Checkpointer, TrainerState
from trainer.commands import FreezeReference, Gather, Save, Step, Stop, WarmStart
from trainer.config import OptimizerConfig, TrainConfig
from trainer.distributed import (
    ProcessGroupSync,
    World,
    barrier,
    full_state_dict,
    rank_device,
    receive_command,
    shard_experts,
)
from trainer.loss import kl_penalty
from trainer.policy import build_model, frozen_copy
from trainer.sample import Group
from trainer.selection import Scored
from trainer.update import GradientSync, PolicyUpdate, score
from trainer.warmup import warm_start

log = logging.getLogger(__name__)


def make_optimizer(model: nn.Module, config: OptimizerConfig, total_steps: int):
    """AdamW over trainable parameters, with linear warm-up then a constant or cosine schedule."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay
    )

    def factor(step: int) -> float:
        if config.warmup_steps and step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "constant":
            return 1.0
        span = max(1, total_steps - config.warmup_steps)
        progress = min(1.0, (step - config.warmup_steps) / span)
        return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def router_bias_hook(model: nn.Module, mode: str) -> Callable[[], dict[str, float]] | None:
    """After each step: apply the aux-loss-free bias rule (continued) or just clear the counts (frozen)."""
    if not hasattr(model, "update_router_biases"):
        return None

    def continued() -> dict[str, float]:
        violations = model.update_router_biases()
        return {"router/load_violation": max(violations) if violations else 0.0}

    def frozen() -> dict[str, float]:
        for block in model.model.moe_blocks():
            block.router.load.zero_()
        return {}

    return continued if mode == "continued" else frozen


class Learner:
    """Model, optimizer, update step and checkpoints of one rank."""

    def __init__(self, config: TrainConfig, world: World, resume: bool) -> None:
        self.config, self.world = config, world
        self.run_dir = Path(config.run_dir)
        torch.manual_seed(config.seed)
        self.device = rank_device(config.device, world)
        self.model = build_model(config.policy, config.dtype, self.device, config.algorithm.aux_loss_coef)
        self.lora = None
        if config.lora is not None:  # only the adapters train; the engine gets merged weights (trainer/lora.py)
            from trainer.lora import LoraPolicy

            self.lora = LoraPolicy(self.model, config.lora, config.policy.path)
            self.model = self.lora.model
        # what a checkpoint holds of the model: every tensor, or a LoRA run's adapters only
        self.checkpointed: nn.Module = self.lora.checkpointed() if self.lora is not None else self.model
        self.dispatcher = shard_experts(self.model, config.distributed, world)
        self.sharding = None
        if config.distributed.fsdp.enabled:  # dense weights sharded over the ranks (trainer/fsdp.py)
            from trainer.fsdp import shard_model

            self.sharding = shard_model(self.model, config.distributed, world, self.device)
        sharded = world.distributed or self.sharding is not None
        self.sync: GradientSync = ProcessGroupSync(self.model) if sharded else GradientSync()
        self.optimizer, self.scheduler = make_optimizer(self.model, config.optimizer, config.loop.steps)
        self.checkpointer = Checkpointer(
            self.run_dir / "checkpoints",
            world.rank,
            world.world_size,
            config.checkpoint.keep,
            barrier=lambda: barrier(world),
        )
        self.state = TrainerState(world_size=world.world_size)
        self.resumed = False
        latest = self.checkpointer.latest() if resume else None
        if resume and latest is None:
            log.warning("--resume: no checkpoint under %s; starting from scratch", self.run_dir / "checkpoints")
        if latest is not None:
            self.state = self.checkpointer.load(latest, self.checkpointed, self.optimizer, self.scheduler)
            self.resumed = True
        self.reference: nn.Module | None = None
        self.update = PolicyUpdate(
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            algorithm=config.algorithm,
            micro_batch_size=config.loop.micro_batch_size,
            norm_length=config.norm_length,
            temperature=config.env.sampling.temperature,
            grad_clip=config.optimizer.grad_clip,
            sync=self.sync,
            updates_per_batch=config.loop.updates_per_batch,
            on_step=router_bias_hook(self.model, config.algorithm.router_bias),
        )

    def freeze_reference(self) -> None:
        """The KL reference is the policy RL starts from (after any warm start); loaded only when used. LoRA:
        the base with the adapters switched off, no copy."""
        if self.config.algorithm.kl.coef > 0:
            self.reference = self.lora.reference() if self.lora is not None else self._reference_copy()
            self.update.reference = self.reference

    def _reference_copy(self) -> nn.Module:
        """A frozen copy of the policy; sharded alike under FSDP (whose modules cannot be deep-copied)."""
        if self.sharding is None:
            return frozen_copy(self.model)
        from trainer.fsdp import sharded_frozen_copy

        config = self.config
        fresh = build_model(config.policy, config.dtype, self.device, config.algorithm.aux_loss_coef)
        return sharded_frozen_copy(self.model, fresh, config.distributed, self.world, self.device)

    def train_step(self, scored: list[Scored]) -> dict[str, float]:
        """This rank's share of one batch (every rank passes the same full list)."""
        return self.update.run(shard(scored, self.world.rank, self.world.world_size))

    def weights_for_engine(self) -> Mapping[str, torch.Tensor]:
        """Full weights (expert shards gathered from every rank when sharded); collective. LoRA: the merged
        weights under the base model's names, each computed as the engine reads it (`trainer.lora.MergedWeights`)."""
        if self.lora is not None:
            return self.lora.merged()
        return full_state_dict(self.model, self.world, keep=self.world.is_main)  # the other ranks only join in

    def save(self) -> None:
        self.checkpointer.save(self.checkpointed, self.optimizer, self.scheduler, self.state)
        if self.lora is not None and self.world.is_main and self.state.step >= self.config.loop.steps:
            self.lora.export(self.run_dir / "lora")  # the last step's adapter (peft) and a merged model directory

    @torch.no_grad()
    def kl_reward_offsets(self, group: Group) -> list[float] | None:
        """-coef * sum_t KL(behaviour || ref) per sample, when the KL goes into the reward."""
        kl = self.config.algorithm.kl
        if self.reference is None or kl.placement != "reward" or kl.coef == 0:
            return None
        items = [Scored(sample=s, advantage=0.0) for s in group.samples]
        batch = collate(items).to(next(self.reference.parameters()).device)
        ref = score(self.reference, batch, self.update.temperature, self.config.algorithm.routing_replay).logprobs
        per_token = kl_penalty(batch.behaviour_logprobs, ref, kl.estimator) * batch.loss_mask
        return [-kl.coef * float(v) for v in per_token.sum(-1).cpu()]


def follow(learner: Learner) -> None:
    """Ranks > 0: mirror rank 0's commands until told to stop."""
    while True:
        command = receive_command()
        match command:
            case Stop():
                return
            case WarmStart(demos):
                warm_start(
                    learner.model,
                    demos,
                    learner.config.warm_start,
                    learner.config.seed,
                    learner.sync,
                    learner.world.rank,
                    learner.world.world_size,
                    learner.update.temperature,
                )
            case FreezeReference():
                learner.freeze_reference()
            case Step(scored):
                learner.train_step(scored)
            case Gather():
                learner.weights_for_engine()
            case Save(state):
                learner.state = state
                learner.save()
            case _:
                raise TypeError(f"unknown command {command!r} from rank 0")
