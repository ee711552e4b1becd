"""What rank 0 of the learner tells the other ranks to do next (`trainer.distributed.broadcast_command`): the
command types, shared by the learner that sends and follows them and the broadcast that carries them."""

from __future__ import annotations

from dataclasses import dataclass

from gym.trajectory import Trajectory
from trainer.checkpoint import TrainerState
from trainer.selection import Scored


@dataclass(frozen=True)
class Stop:
    """Leave `follow`: the run is over."""


@dataclass(frozen=True)
class FreezeReference:
    """Freeze a copy of the current weights as the KL reference."""


@dataclass(frozen=True)
class WarmStart:
    """Run the supervised warm start on these demos."""

    demos: list[Trajectory]


@dataclass(frozen=True)
class Gather:
    """Gather the full weights for the rollout engine."""


@dataclass(frozen=True)
class Step:
    """Train one GRPO step on this batch (each rank takes its shard)."""

    scored: list[Scored]


@dataclass(frozen=True)
class Save:
    """Save a checkpoint with rank 0's trainer state."""

    state: TrainerState


Command = Stop | FreezeReference | WarmStart | Gather | Step | Save
