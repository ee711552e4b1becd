"""The masked-share bound on real runs: the loop, rollout workers, episodes, in-process engine and learner
are real; workspaces and grading are the gym tests' in-memory fakes, and the engine fails on purpose.

A failing `generate` is what an unreachable policy server does: the episode ends `infra_error`,
masked. Every call failing must stop the run with `MaskedShareError` after summary.json is written
(masked_share 1.0); one call in four failing stays under a bound of 0.5 and the run finishes;
`python -m gym train` prints the error as one line and exits non-zero.
"""

from __future__ import annotations

import itertools
import json

import pytest
import yaml

import trainer.generation_engine
import trainer.loop
from gym.cli import main
from gym.policy_client import EngineError
from tests.trainer_support import config_data, train_with_fakes
from trainer.config import TrainConfig
from trainer.errors import MaskedShareError


@pytest.fixture
def failing_engine(monkeypatch):
    """Make every `fail_every`-th generate call of the in-process engine fail (set the returned dict's key)."""
    setting = {"fail_every": 1}
    calls = itertools.count(1)

    class FlakyEngine(trainer.generation_engine.BatchingEngine):
        async def generate(self, prompts, params):
            if next(calls) % setting["fail_every"] == 0:
                raise EngineError("http://policy:8000: connection refused (test)")
            return await super().generate(prompts, params)

    monkeypatch.setattr(trainer.generation_engine, "BatchingEngine", FlakyEngine)
    return setting


@pytest.mark.slow
def test_every_sample_masked_stops_the_run_after_writing_the_summary(tmp_path, failing_engine):
    config = TrainConfig.parse(config_data(tmp_path, bound=0.05, steps=3), source="test")
    with pytest.raises(MaskedShareError) as caught:
        train_with_fakes(config)
    error = caught.value
    assert error.share == 1.0 and error.bound == 0.05
    assert error.reasons[0][0] == "engine: infra_error before an answer"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 1  # judged after the first step: 8 groups drawn (dynamic sampling's budget), all masked
    assert summary["masked_share"] == 1.0 and summary["masked"] == summary["samples"] == 32
    assert summary["stopped"] == str(error) and "loop.max_masked_share = 0.05" in summary["stopped"]
    assert summary["masked_reasons"] == {"engine: infra_error before an answer": 32}
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["samples/masked_share"] == 1.0 and row["samples/masked_share_run"] == 1.0


@pytest.mark.slow
def test_share_under_the_bound_finishes_and_is_reported(tmp_path, failing_engine):
    failing_engine["fail_every"] = 4
    config = TrainConfig.parse(config_data(tmp_path, bound=0.5), source="test")
    summary = train_with_fakes(config)
    assert summary["steps"] == 2 and summary["stopped"] is None
    assert 0 < summary["masked"] < summary["samples"]
    assert summary["masked_share"] == round(summary["masked"] / summary["samples"], 4) <= 0.5
    assert json.loads((tmp_path / "summary.json").read_text())["masked_share"] == summary["masked_share"]


@pytest.mark.slow
def test_train_command_prints_one_line_and_exits_nonzero(tmp_path, failing_engine, monkeypatch, capsys):
    config_path = tmp_path / "train.yaml"
    config_path.write_text(yaml.safe_dump(config_data(tmp_path / "run", bound=0.05)))
    monkeypatch.setattr(trainer.loop, "train", train_with_fakes)
    assert main(["train", str(config_path)]) == 1
    printed = capsys.readouterr()
    message = printed.err.splitlines()[-1]  # gym: error: PROBLEM — FIX (gym/fault.py)
    assert message.startswith(
        "gym: error: train stopped: masked share 1.000 (32 of 32 samples) exceeds loop.max_masked_share = 0.05"
    )
    assert message.endswith(f" — see {tmp_path / 'run' / 'summary.json'}") and "Traceback" not in printed.err
    assert printed.out == ""  # no summary printed as if the run had finished
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["masked_share"] == 1.0
