"""A warm start that covers most of a small task pool says so: RL would then train on memorised tasks."""

from __future__ import annotations

import pytest

from trainer.warmup import memorised_pool


def test_the_main_job_gets_no_warning():
    assert memorised_pool(96, 96, 168) is None  # configs/cp_grpo_tiny.yaml: 96 demos, 168 training tasks


@pytest.mark.parametrize(
    "demos, asked, pool, says",
    [
        (2, 96, 2, ["2 demos of the 96 asked", "cover 2 of the pool's 2 tasks (100%)"]),  # a small user pool
        (2, 96, 500, ["2 demos of the 96 asked"]),  # few tasks carry a reference
        (90, None, 100, ["cover 90 of the pool's 100 tasks (90%)"]),
    ],
)
def test_a_pool_the_demos_cover_or_too_few_demos_is_a_warning(demos, asked, pool, says):
    warning = memorised_pool(demos, asked, pool)
    assert warning is not None and warning.startswith("warm start: ")
    assert all(part in warning for part in says), warning
