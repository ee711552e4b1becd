"""verl drives our reward functions (issue 44 item 2): verl 0.9.1 from the package registry, in a venv of its own
(``--no-deps``, plus what its reward managers import: tensordict, omegaconf, codetiming; built once and cached outside
the checkout), loads ``compute_score`` and ``compute_score_batch`` with its own ``get_custom_reward_fn`` (as a
``pkg://`` module and as a file) and scores one batch of token ids through its naive and batch reward managers and
its reward loop's naive manager (tests/verl_driver.py). Honest code and math score 1 where verl puts the reward; a
forged verdict, a hedge and a malformed ground truth 0, the same through every manager."""

from __future__ import annotations

import pytest

from tests.install_support import cached_venv, driven
from tests.tokenizer_support import train_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.docker]

VERL = "0.9.1"


def test_verl_reward_managers_call_our_compute_score(tmp_path):
    python = cached_venv(
        f"verl-{VERL}",
        ("--no-deps", f"verl=={VERL}"),
        ("tensordict>=0.8.0,<=0.10.0,!=0.9.0", "codetiming", "omegaconf"),
    )
    tokenizer = train_tokenizer(tmp_path / "tokenizer.json")
    out = driven(python, "tests.verl_driver", str(tokenizer))
    assert out["verl"] == VERL
    expected = [1.0, 0.0, 1.0, 0.0, 0.0]  # honest code, PASSED, honest math, boxed hedge, malformed ground truth
    assert out["naive"] == out["batch"] == out["reward_loop"] == expected
    assert out["naive_extra"]["verdict"] == ["passed", "wrong_answer", "passed", "wrong_answer", "refused"]
    assert out["reward_loop_verdicts"] == out["naive_extra"]["verdict"]
    assert "not valid JSON" in out["naive_extra"]["reason"][4]
