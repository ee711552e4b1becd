"""TensorBoard is on by default (`metrics.tensorboard`) and a dependency: a training run leaves event files.

A short run of the real loop, learner and in-process engine on the in-memory workspaces and grader
(tests/integration/test_trainer_masked.py's fakes); its run directory must hold an events file whose
scalars are the steps' metrics.
"""

from __future__ import annotations

import pytest

from tests.trainer_support import config_data, train_with_fakes
from trainer.config import TrainConfig


@pytest.mark.slow
def test_a_training_run_with_tensorboard_on_writes_event_files(tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    data = config_data(tmp_path, bound=1.0, steps=1)
    data["metrics"] = {"progress": False, "tensorboard": True}
    summary = train_with_fakes(TrainConfig.parse(data, source="test"))
    assert summary["steps"] == 1
    events = sorted((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events, f"no event file under {tmp_path / 'tensorboard'}"
    accumulator = EventAccumulator(str(events[0]))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    assert "train/reward/mean" in tags, tags
    assert [event.step for event in accumulator.Scalars("train/reward/mean")] == [1]
    assert "TensorBoard not installed" not in caplog.text
