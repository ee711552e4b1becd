"""Attacks on self-play as an adversary who edits a chain bundle after the fact: every edit that would change
what the chain claims (its acceptance, its check, its verifier row, its roles) must make `gym replay` report
a difference, never "identical". A chain bundle is checked for consistency offline; a bundle naming a
tokenizer this machine cannot load was the hole: nothing of it was re-checked and it replayed as identical."""

from __future__ import annotations

import functools

import pytest
import trio

from gym.selfplay.chain import Decision
from gym.selfplay.chain_bundle import ChainBundle, replay_chain
from gym.selfplay.roles import MetaVerdict, Verdict
from sandbox import failure
from tasks.math.grader import MathGraderConfig
from tests import selfplay_support

chain_bundles = selfplay_support.chain_bundles  # the fixture: honest chain bundles, right and wrong


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
