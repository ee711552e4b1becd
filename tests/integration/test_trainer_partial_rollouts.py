"""The real training loop with ``loop.partial_rollouts`` on (tests/trainer_support.py's fakes, no Docker): the
in-process engine is built to swap weights between decode steps, every trajectory it writes keeps each token's
version, and every step reports its staleness in tokens; with the switch off (the default) none of that is
there and the engine waits for its rows (the control)."""

from __future__ import annotations

import json

import pytest

import trainer.policy
from gym.trajectory import read_jsonl
from tests.trainer_support import config_data, train_with_fakes
from trainer.config import TrainConfig


@pytest.mark.parametrize("partial", [True, False])
def test_the_switch_reaches_the_engine_and_the_step_metrics(tmp_path, monkeypatch, partial: bool) -> None:
    built = []
    real = trainer.policy.build_engine

    def recording(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(trainer.policy, "build_engine", recording)
    data = config_data(tmp_path / "run", bound=1.0, steps=2)
    data["loop"] |= {"partial_rollouts": partial, "max_staleness": 1}
    summary = train_with_fakes(TrainConfig.model_validate(data))
    assert summary["steps"] == 2 and [engine.partial_rollouts for engine in built] == [partial]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "staleness/mean" in row]
    assert len(steps) == 2
    for row in steps:
        assert ("staleness/token_mean" in row) == partial and ("count/stale_tokens_dropped" in row) == partial
        if partial:
            assert 0.0 <= row["staleness/token_mean"] <= row["staleness/token_max"] <= 1.0
    trajectories = list(read_jsonl(tmp_path / "run" / "trajectories.jsonl"))
    assert trajectories and all(t.token_versions is not None for t in trajectories if t.num_sampled)
