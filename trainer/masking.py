"""The run's masked share: why each masked sample was masked, and the bound `loop.max_masked_share`.

A masked sample (an infrastructure failure of the engine, a tool's workspace or the grader) never
enters the loss, so a run whose infrastructure keeps failing would train on whatever survives while
its reward curve still looks normal. `MaskedTally` counts every consumed sample and the reason of
each masked one; after each step the loop asks `exceeded()`, which gives a `MaskedShareError` once
at least `loop.masked_share_min_samples` samples were consumed and the cumulative share exceeds the
bound (the loop writes summary.json, then raises it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gym.trajectory import Trajectory
from sandbox.failure import FailureKind
from trainer.config import LoopConfig
from trainer.errors import MaskedShareError
from trainer.sample import Sample

REASON_CHARS = 120  # a reason is a counter key: long tool outputs would make every one distinct


def masked_reason(trajectory: Trajectory) -> str:
    """Which part failed, read from the trajectory (the episode's own detail text is only logged).

    A tool's infra_error keeps the first line of its observation (``[infra_error] DETAIL``); an
    episode that ended with an answer failed in grading; one without an answer failed in the engine;
    a group that no rollout node could run (``gym train --ray``) says why in ``placement["error"]``.
    """
    if not trajectory.masked:
        return "never graded (reward None)"
    if "engine_error" in trajectory.placement:  # a version newer than the trainer's (trainer.staleness.mask_ahead)
        return f"engine: {trajectory.placement['engine_error'][:REASON_CHARS]}"
    if "error" in trajectory.placement:  # a group no Ray node could run (trainer.ray_workers.lost_group)
        return f"rollout node: {trajectory.placement['error'][:REASON_CHARS]}"
    for event in trajectory.events:
        if event.kind == "result" and event.failure is FailureKind.INFRA_ERROR:
            outputs = [m.content for m in trajectory.messages if m.role == "tool" and m.name == event.tool]
            detail = outputs[-1].splitlines()[0] if outputs and outputs[-1] else "infra_error"
            return f"tool {event.tool}: {detail[:REASON_CHARS]}"
    if _answered(trajectory):
        return "grading: infra_error"
    return "engine: infra_error before an answer"


def _answered(trajectory: Trajectory) -> bool:
    submitted = any(e.kind == "call" and (e.tool or "").endswith(".submit") for e in trajectory.events)
    final = any(m.role == "assistant" and m.channel == "final" for m in trajectory.messages)
    return submitted or final


class MaskedTally:
    """Samples consumed, masked ones and their reasons, over the whole run (this process's part of it)."""

    def __init__(self, loop: LoopConfig) -> None:
        self.bound, self.min_samples = loop.max_masked_share, loop.masked_share_min_samples
        self.samples = 0
        self.masked = 0
        self.reasons: Counter[str] = Counter()

    def add(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            self.samples += 1
            if sample.masked:
                self.masked += 1
                self.reasons[masked_reason(sample.trajectory)] += 1

    @property
    def share(self) -> float:
        return self.masked / self.samples if self.samples else 0.0

    def exceeded(self) -> MaskedShareError | None:
        """The error to stop with when enough samples were consumed and the share exceeds the bound, else None."""
        if self.samples < self.min_samples or self.share <= self.bound:
            return None
        top = self.reasons.most_common(3)
        reasons = "; ".join(f"{count}x {reason}" for reason, count in top) or "none recorded"
        return MaskedShareError(
            f"masked share {self.share:.3f} ({self.masked} of {self.samples} samples) exceeds "
            f"loop.max_masked_share = {self.bound:g}; most frequent: {reasons}. Fix the infrastructure, "
            f"or raise loop.max_masked_share (or loop.masked_share_min_samples) in the config to go on",
            share=self.share,
            bound=self.bound,
            reasons=top,
        )
