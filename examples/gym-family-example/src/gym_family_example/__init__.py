"""An example task family package for the code-RL gym: ``letters``, sort a word's letters.

`family` holds the family (its `FamilyKind`, ``LETTERS``, registered under ``code_rl_gym.task_families``),
`rows` the row format that reads ``{"id", "word"}`` rows into `rows.LettersTask`; `environment` is the environment
``example_letters`` (group ``code_rl_gym.environments``). Importing this package has no side effect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gym.environment_config import EnvironmentConfig


def environment() -> EnvironmentConfig:
    """Four words whose letters the policy sorts, answered on the final channel."""
    # imported here: the gym imports this package while it registers task families, before it is itself loaded
    from gym.registry import packaged

    return packaged(__name__, "environment.yaml")
