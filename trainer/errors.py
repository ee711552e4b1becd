"""The exception tree of the `trainer` layer.

A bad sample is data (masked, counted, dropped by `trainer.selection`), never an exception; these
are for a run that cannot start, or must not go on.
"""

from __future__ import annotations


class TrainerError(Exception):
    """Base of every error raised by `trainer`."""


class ConfigError(TrainerError, ValueError):
    """A config file that cannot be used; the message names the field and the reason."""


class CheckpointError(TrainerError):
    """A checkpoint that cannot be read (a file missing, truncated or altered since it was written, state that does
    not fit the model) or an export another rank could not write; the message names the directory and each file
    at fault."""


class MaskedShareError(TrainerError):
    """Too many samples were masked (infrastructure failures): the run stopped after writing summary.json.

    Masked samples never enter the loss, so a run whose workspaces, grader or engine keep failing
    would train on whatever survives while its reward curve still looks normal.
    """

    def __init__(self, message: str, share: float, bound: float, reasons: list[tuple[str, int]]) -> None:
        super().__init__(message)
        self.share, self.bound, self.reasons = share, bound, reasons


class RayRolloutError(TrainerError):
    """`gym train --ray`: the cluster's address does not answer, or no rollout actor started on any of its nodes
    (each node's cause named)."""
