"""Trainer test set-up: tiny architectures, hand-made scored samples, and the real loop on the fakes.

``train_with_fakes`` runs `trainer.loop.train` with tests/fakes.py's in-memory workspaces and grader
on ``FAKE_ENVIRONMENT`` (one turn, submit only), so the loop, rollout workers, engine and learner are
real and nothing needs Docker.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import trainer.loop
from gym.environment import Environment
from gym.trajectory import Trajectory
from policies.config import MoEArchitecture
from tests.fakes import SAMPLES, FakeGrader, FakePool
from trainer.config import TrainConfig
from trainer.sample import Sample
from trainer.selection import Scored

TINY = {
    "vocab_size": 8192,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_dense_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "intermediate_size": 32,
    "moe_intermediate_size": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "num_shared_experts": 1,
    "max_position_embeddings": 1024,
}


FAKE_ENVIRONMENT = {
    "name": "masked",
    "task_pool": {
        "type": "jsonl",
        "path": str(SAMPLES / "codecontests.jsonl"),
        "format": "codecontests",
        "solutions": str(SAMPLES / "codecontests.solutions.jsonl"),
    },
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
        "loop": {
            "steps": steps,
            "max_staleness": 0,
            "micro_batch_size": 8,
            "max_masked_share": bound,
            "masked_share_min_samples": 8,
        },
        "checkpoint": {"every": 100},
        "metrics": {"progress": False, "tensorboard": False},
    }


def train_with_fakes(config: TrainConfig, resume: bool = False, real_train=trainer.loop.train) -> dict:
    """`trainer.loop.train` on the in-memory workspaces and grader (also stands in for it under the CLI)."""
    env = Environment(config.env)
    pool = FakePool()
    return real_train(config, resume=resume, workspaces=pool, grader=FakeGrader(env, pool))


ARCH = MoEArchitecture(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=2,
    num_dense_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    intermediate_size=32,
    moe_intermediate_size=16,
    num_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=128,
)


def scored_samples(n: int = 4, seed: int = 0) -> list[Scored]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = tuple(int(x) for x in rng.integers(9, 64, size=3 + i))
        completion = tuple(int(x) for x in rng.integers(9, 64, size=4 + 2 * i))
        t = Trajectory(
            task_id=f"t{i}",
            tokenizer="test",
            policy_version=0,
            prompt_ids=prompt,
            ids=prompt + completion,
            sampled=(False,) * len(prompt) + (True,) * len(completion),
            logprobs=(None,) * len(prompt) + tuple(float(-rng.uniform(3, 5)) for _ in completion),
            reward=float(i % 2),
        )
        out.append(Scored(sample=Sample(t), advantage=1.0 if i % 2 else -1.0))
    return out
