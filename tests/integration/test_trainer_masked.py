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
from pathlib import Path

import pytest
import yaml

import trainer.engine
import trainer.loop
from gym.cli import main
from gym.engine import EngineFailure
from gym.environment import Environment
from tests.unit.test_episode_loop import FakeGrader, FakePool
from trainer.config import TrainConfig
from trainer.errors import MaskedShareError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tasks" / "samples"
TINY = {"vocab_size": 8192, "hidden_size": 32, "num_hidden_layers": 2, "num_dense_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 32, "moe_intermediate_size": 16, "num_experts": 4,
        "num_experts_per_tok": 2, "num_shared_experts": 1, "max_position_embeddings": 1024}


FAKE_ENVIRONMENT = {
    "name": "masked",
    "task_pool": {"type": "jsonl", "path": str(SAMPLES / "codecontests.jsonl"), "format": "codecontests",
                  "solutions": str(SAMPLES / "codecontests.solutions.jsonl")},
    "tools": {"enabled": ["submit"]},
    "episode": {"max_turns": 1, "max_tokens_per_turn": 16, "max_total_tokens": 1024, "on_parse_error": "end"},
    "replay": {"rate": 0.0, "failures": False},
    "rubric": {"length": {"weight": 1.0, "free_tokens": 0}},  # rewards differ by length: groups are kept
    "concurrency": 4,
}
"""A one-turn environment for the in-memory workspaces and grader (tests of the loop)."""


def config_data(run_dir: Path, bound: float, steps: int = 2) -> dict:
    return {
        "run_dir": str(run_dir),
        "environment": FAKE_ENVIRONMENT,
        "policy": {"type": "rdep_moe", "seed": 0, "model": TINY},
        "rollout": {"group_size": 4, "groups_per_step": 2, "seed": 0},
        "optimizer": {"lr": 0.001},
        "loop": {"steps": steps, "max_staleness": 0, "micro_batch_size": 8, "max_masked_share": bound,
                 "masked_share_min_samples": 8},
        "checkpoint": {"every": 100},
        "metrics": {"progress": False, "tensorboard": False},
    }


@pytest.fixture
def failing_engine(monkeypatch):
    """Make every `fail_every`-th generate call of the in-process engine fail (set the returned dict's key)."""
    setting = {"fail_every": 1}
    calls = itertools.count(1)

    class FlakyEngine(trainer.engine.BatchingEngine):
        async def generate(self, prompts, params):
            if next(calls) % setting["fail_every"] == 0:
                raise EngineFailure("http://policy:8000: connection refused (test)")
            return await super().generate(prompts, params)

    monkeypatch.setattr(trainer.engine, "BatchingEngine", FlakyEngine)
    return setting


def train_with_fakes(config: TrainConfig, resume: bool = False, real_train=trainer.loop.train) -> dict:
    """`trainer.loop.train` on the in-memory workspaces and grader (also stands in for it under the CLI)."""
    env = Environment(config.env)
    pool = FakePool()
    return real_train(config, resume=resume, workspaces=pool, grader=FakeGrader(env, pool))


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
    assert message.startswith("gym: error: train stopped: masked share 1.000 (32 of 32 samples) exceeds "
                              "loop.max_masked_share = 0.05")
    assert message.endswith(f" — see {tmp_path / 'run' / 'summary.json'}") and "Traceback" not in printed.err
    assert printed.out == ""  # no summary printed as if the run had finished
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["masked_share"] == 1.0

