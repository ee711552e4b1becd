"""Honest self-play chain bundles, made by the scripted self-play policy, for the tests that tamper with them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from gym.environment import Environment
from gym.registry import environment_config
from gym.selfplay.chain import verifier_row
from gym.selfplay.chain_bundle import ChainBundle
from gym.selfplay.run import ChainRunner, SelfplayConfig
from gym.selfplay.scripted import answers_wrong, load_selfplay_scripted

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/math_smoke.yaml"


@pytest.fixture(scope="module")
def chain_bundles() -> dict[str, ChainBundle]:
    """One untouched bundle of a right answer and one of a wrong answer, from the scripted self-play policy."""
    here = os.getcwd()
    os.chdir(ROOT)  # the config's pool paths are relative to the repository root
    try:
        env = Environment(environment_config(CONFIG))
    finally:
        os.chdir(here)
    settings = SelfplayConfig(environment=CONFIG, policy="scripted:selfplay", replay_rate=1.0)
    runner = ChainRunner(settings, env, load_selfplay_scripted("selfplay", env, settings.prompts))

    async def main():
        return [await runner.run(task, position) for position, task in env.stream().take(4)]

    made = trio.run(main)
    common = {"environment": env.name, "tokenizer": env.config.tokenizer, "prompts": settings.prompts}
    return {
        ("wrong" if answers_wrong(chain.task) else "right"): ChainBundle(
            **common, math=env.config.math, chain=chain, row=verifier_row(chain)
        )
        for chain in made
    }
