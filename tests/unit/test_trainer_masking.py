"""The masked share: reasons read from hand-made trajectories, the bound, the minimum sample count."""

from __future__ import annotations

import pytest

from gym.format.message import Message
from gym.trajectory import Event, Trajectory
from sandbox.failure import FailureKind
from trainer.config import ConfigError, LoopConfig, TrainConfig
from trainer.errors import MaskedShareError, TrainerError
from trainer.masking import MaskedTally, masked_reason
from trainer.sample import Sample


def trajectory(masked: bool = False, events=(), messages=(), reward: float | None = 0.0) -> Trajectory:
    return Trajectory(
        task_id="t",
        tokenizer="test",
        policy_version=0,
        prompt_ids=(1,),
        ids=(1, 2, 3),
        sampled=(False, True, True),
        logprobs=(None, -0.5, -0.5),
        events=tuple(events),
        messages=tuple(messages),
        masked=masked,
        reward=None if masked else reward,
    )


ENGINE = trajectory(masked=True)
GRADING = trajectory(masked=True, messages=[Message(role="assistant", channel="final", content="print(1)")])
TOOL = trajectory(
    masked=True,
    events=[
        Event(kind="call", start=1, end=2, tool="functions.bash"),
        Event(kind="result", start=2, end=3, tool="functions.bash", failure=FailureKind.INFRA_ERROR),
    ],
    messages=[
        Message(
            role="tool",
            name="functions.bash",
            channel="commentary",
            recipient="assistant",
            content="[infra_error] runner lost\nmore",
        )
    ],
)


def test_reason_names_the_part_that_failed():
    assert masked_reason(TOOL) == "tool functions.bash: [infra_error] runner lost"
    assert masked_reason(GRADING) == "grading: infra_error"
    assert masked_reason(ENGINE) == "engine: infra_error before an answer"
    assert masked_reason(trajectory(reward=None)) == "never graded (reward None)"


def tally(masked: int, clean: int, bound: float = 0.05, min_samples: int = 8) -> MaskedTally:
    tally = MaskedTally(LoopConfig(max_masked_share=bound, masked_share_min_samples=min_samples))
    tally.add([Sample(TOOL)] * masked + [Sample(trajectory())] * clean)
    return tally


def test_share_over_the_bound_gives_the_error_naming_share_bound_reasons_and_field():
    error = tally(masked=3, clean=5, bound=0.25).exceeded()
    assert isinstance(error, MaskedShareError) and isinstance(error, TrainerError)
    assert error.share == 3 / 8 and error.bound == 0.25
    assert error.reasons == [("tool functions.bash: [infra_error] runner lost", 3)]
    text = str(error)
    for part in (
        "0.375",
        "3 of 8 samples",
        "loop.max_masked_share = 0.25",
        "3x tool functions.bash",
        "masked_share_min_samples",
    ):
        assert part in text, part
    assert "\n" not in text  # the CLI prints it as one line


def test_share_at_or_under_the_bound_or_too_few_samples_goes_on():
    assert tally(masked=2, clean=6, bound=0.25).exceeded() is None  # exactly at the bound
    assert tally(masked=0, clean=8, bound=0.0).exceeded() is None
    assert tally(masked=1, clean=2, bound=0.05, min_samples=8).exceeded() is None  # 1 of 3: no verdict yet
    assert tally(masked=1, clean=7, bound=0.05, min_samples=8).exceeded() is not None  # the check can fire
    assert tally(masked=8, clean=0, bound=1.0).exceeded() is None  # bound 1: never stops
    empty = MaskedTally(LoopConfig(masked_share_min_samples=1))
    assert empty.share == 0.0 and empty.exceeded() is None


@pytest.mark.parametrize(
    "field, value", [("max_masked_share", 1.5), ("max_masked_share", -0.1), ("masked_share_min_samples", 0)]
)
def test_bounds_of_the_fields_are_checked(field, value):
    with pytest.raises(ConfigError, match=rf"loop\.{field}"):
        TrainConfig.parse(
            {"environment": "configs/cp_smoke.yaml", "policy": {"type": "rdep_moe"}, "loop": {field: value}}
        )
