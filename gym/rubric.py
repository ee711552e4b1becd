"""The rubric: an episode's reward as a weighted sum of named terms.

    reward = w_c * correctness - w_f * format - w_h * tool_hygiene - w_l * length

- ``correctness`` in [0, 1]: 1 when every hidden test passed (``all_pass``) or
  the fraction of tests passed (``fraction``); 0 when nothing was submitted.
- ``format`` in [0, 1]: the share of sampled turns that were not valid Harmony
  (parse errors).
- ``tool_hygiene`` in [0, 1]: the share of tool calls that ended in one of the
  configured failure kinds (by default ``tool_error``, ``sandbox_denied`` and ``workspace_lost``:
  calls the policy should not have made; a program that exits non-zero is not
  one of them).
- ``length`` in [0, 1]: how far the sampled tokens went past ``free_tokens``,
  as a share of the rest of the episode's token budget.

The breakdown holds each term's weighted contribution (penalties negative),
so ``sum(breakdown.values()) == reward``. A masked episode (infrastructure
error) gets no reward at all: ``score`` is not called for it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.trajectory import Trajectory
from sandbox.failure import FailureKind
from tasks.result import TaskResult


class _Term(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CorrectnessTerm(_Term):
    """Reward for the graded program."""

    mode: Literal["all_pass", "fraction"] = Field(
        "all_pass", description="all_pass (1 or 0) or the fraction of tests passed."
    )
    weight: float = Field(1.0, ge=0, description="Multiplier of the correctness value.")


class FormatTerm(_Term):
    """Penalty for sampled turns that are not valid Harmony."""

    weight: float = Field(0.2, ge=0, description="Multiplier of the share of turns that failed to parse.")


class ToolHygieneTerm(_Term):
    """Penalty for tool calls the policy should not have made."""

    weight: float = Field(0.1, ge=0, description="Multiplier of the share of tool calls that failed as below.")
    kinds: tuple[FailureKind, ...] = Field(
        (FailureKind.TOOL_ERROR, FailureKind.SANDBOX_DENIED, FailureKind.WORKSPACE_LOST),
        description="Failure kinds that count as a bad call.",
    )


class LengthTerm(_Term):
    """Penalty for long episodes (off by default)."""

    weight: float = Field(0.0, ge=0, description="Multiplier of the overlong share.")
    free_tokens: int = Field(4096, ge=0, description="Sampled tokens that cost nothing.")


class RubricConfig(_Term):
    """The reward terms and their weights."""

    correctness: CorrectnessTerm = Field(default_factory=CorrectnessTerm, description="Graded correctness.")
    format: FormatTerm = Field(default_factory=FormatTerm, description="Valid Harmony.")
    tool_hygiene: ToolHygieneTerm = Field(default_factory=ToolHygieneTerm, description="Tool errors and denied calls.")
    length: LengthTerm = Field(default_factory=LengthTerm, description="Sampled length.")


def correctness(config: CorrectnessTerm, grading: TaskResult | None) -> float:
    if grading is None:
        return 0.0
    return float(grading.passed) if config.mode == "all_pass" else grading.fraction


def score(
    config: RubricConfig, trajectory: Trajectory, grading: TaskResult | None, *, turns: int, token_budget: int
) -> dict[str, float]:
    """Weighted contributions of each term for one graded (not masked) episode; their sum is the reward."""
    parse_errors = sum(event.kind == "parse_error" for event in trajectory.events)
    results = [event for event in trajectory.events if event.kind == "result"]
    bad_calls = sum(event.failure in config.tool_hygiene.kinds for event in results)
    free = config.length.free_tokens
    overlong = max(0, trajectory.num_sampled - free) / max(1, token_budget - free)
    return {
        "correctness": config.correctness.weight * correctness(config.correctness, grading),
        "format": _penalty(config.format.weight, parse_errors / turns if turns else 0.0),
        "tool_hygiene": _penalty(config.tool_hygiene.weight, bad_calls / len(results) if results else 0.0),
        "length": _penalty(config.length.weight, min(1.0, overlong)),
    }


def _penalty(weight: float, share: float) -> float:
    return 0.0 - weight * share  # 0.0 - 0.0 is 0.0, never -0.0


def total(breakdown: dict[str, float]) -> float:
    """The reward of a breakdown."""
    return float(sum(breakdown.values()))
