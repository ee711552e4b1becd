"""Attacks on self-play as an adversary who edits a chain bundle after the fact: every edit that would change
what the chain claims (its acceptance, its check, its verifier row, its roles) must make `gym replay` report
a difference, never "identical". A chain bundle is checked for consistency offline; a bundle naming a
tokenizer this machine cannot load was the hole: nothing of it was re-checked and it replayed as identical."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import trio

from gym.chain import Decision, verifier_row
from gym.chain_bundle import ChainBundle, replay_chain
from gym.environment import Environment
from gym.registry import environment_config
from gym.roles import MetaVerdict, Verdict
from gym.selfplay import ChainRunner, SelfplayConfig
from gym.selfplay_scripted import answers_wrong, load_selfplay_scripted
from sandbox import failure
from tasks.math.grader import MathGraderConfig

ROOT = Path(__file__).resolve().parents[2]
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


def _replay(bundle: ChainBundle):
    return trio.run(functools.partial(replay_chain, bundle))


def _chain(bundle: ChainBundle, **update) -> ChainBundle:
    return bundle.model_copy(update={"chain": bundle.chain.model_copy(update=update)})


def _tampered(bundle: ChainBundle) -> dict[str, ChainBundle]:
    """Edits of one bundle, each named by the difference it must show."""
    chain = bundle.chain
    generator, verifier, meta = chain.roles
    rejected = Decision(accepted=False, reason="meta_rejects")
    flipped = Verdict(steps_correct=(True,) * len(verifier.output.steps_correct), correct=not verifier.output.correct)
    wrong_check = chain.grading.model_copy(update={"passed": not chain.grading.passed})
    unreadable = "hf:/nonexistent/tokenizer.json"
    forged_gold = "123456789" if chain.grading.passed else generator.output.answer  # the check's verdict flips
    return {
        "decision": _chain(bundle, decision=rejected),
        "verifier row": bundle.model_copy(update={"row": None}),
        "math check": _chain(bundle, grading=wrong_check),
        "math check ": _chain(bundle, grading=chain.grading.model_copy(update={"infra_error": True})),
        "role order": _chain(bundle, roles=(generator, verifier, meta, meta)),
        "decision ": _chain(bundle, roles=(generator, verifier)),  # the meta-verifier cut out of an accepted chain
        "verifier parsed output": _chain(
            bundle, roles=(generator, verifier.model_copy(update={"output": flipped}), meta)
        ),
        "meta_verifier parsed output": _chain(
            bundle, roles=(generator, verifier, meta.model_copy(update={"output": MetaVerdict(agree=False)}))
        ),
        "generator prompt ids": _chain(bundle, task=chain.task.model_copy(update={"problem": "What is 1+1?"})),
        "math check  ": _chain(bundle, task=chain.task.model_copy(update={"gold": forged_gold})),
        # the hole: an unloadable tokenizer skipped every role check and replayed as identical
        "tokenizer": bundle.model_copy(update={"tokenizer": unreadable}),
        "tokenizer ": _chain(bundle.model_copy(update={"tokenizer": unreadable}), decision=rejected),
        "decision  ": _chain(bundle.model_copy(update={"tokenizer": unreadable}), decision=rejected),
        "verifier row ": bundle.model_copy(update={"tokenizer": unreadable, "row": None}),
    }


@pytest.mark.parametrize("kind", ["right", "wrong"])
def test_every_edit_of_a_chain_bundle_is_a_difference(chain_bundles, kind):
    bundle = chain_bundles[kind]
    assert _replay(bundle).identical, _replay(bundle).differences  # the untouched bundle: the check can pass
    for name, tampered in _tampered(bundle).items():
        report = _replay(tampered)
        assert not report.identical, name
        assert any(d.what.startswith(name.strip()) for d in report.differences), (name, report.differences)


def test_a_looser_math_config_in_the_bundle_cannot_pass_a_hedge(chain_bundles):
    """The bundle names its own check bounds; none of them turns off the hedge rule."""
    bundle = chain_bundles["wrong"]
    loose = bundle.model_copy(update={"math": MathGraderConfig(max_answers=10_000, max_chars=100_000, timeout_s=60)})
    report = _replay(loose)
    assert report.identical and report.reward_replayed == 0.0  # the wrong answer stays wrong under any bounds
    assert bundle.chain.grading.tests[0].verdict == failure.Verdict.WRONG_ANSWER
