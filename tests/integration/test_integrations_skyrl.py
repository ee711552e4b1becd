"""SkyRL-Gym builds and steps our env (issue 44 item 2): skyrl-gym 0.4.0 from the package registry, in a venv of its
own (built once and cached outside the checkout), makes env class ``code_rl_gym`` from its registry for each sample as
SkyRL's generator does and steps it with a reply (tests/skyrl_driver.py): the program runs in the real Docker sandbox,
the answer goes through the math check. Honest replies score 1; a forged PASSED, sys.exit(0), a hedge and a malformed
ground truth 0 with their reasons."""

from __future__ import annotations

import pytest

from tests.install_support import cached_venv, driven

pytestmark = [pytest.mark.slow, pytest.mark.docker]

SKYRL_GYM = "0.4.0"


def test_skyrl_gym_makes_and_steps_our_env():
    python = cached_venv(f"skyrl-gym-{SKYRL_GYM}", (f"skyrl-gym=={SKYRL_GYM}",))
    out = driven(python, "tests.skyrl_driver")
    assert out.pop("registered")
    assert {name: step["reward"] for name, step in out.items()} == {
        "honest program": 1.0,
        "forged PASSED": 0.0,
        "sys.exit(0)": 0.0,
        "honest math": 1.0,
        "hedged math": 0.0,
        "malformed ground truth": 0.0,
    }
    assert all(step["done"] for step in out.values())
    assert (
        out["malformed ground truth"]["verdict"] == "refused"
        and "not valid JSON" in out["malformed ground truth"]["reason"]
    )
    assert out["hedged math"]["verdict"] == "wrong_answer" and out["forged PASSED"]["verdict"] == "wrong_answer"
    assert out["honest program"]["metrics"] == {"passed": 1.0, "fraction": 1.0}
