"""An example environment package for the code-RL gym.

The entry point ``example_strings = "gym_env_example:environment"`` (pyproject.toml, group
``code_rl_gym.environments``) names `environment`: the gym calls it with no argument when a config
or a command names ``example_strings`` and expects a `gym.environment_config.EnvironmentConfig` back.
Importing this package has no side effect; the gym imports it only when the name is used or listed.
"""

from __future__ import annotations

from gym.environment_config import EnvironmentConfig
from gym.registry import packaged


def environment() -> EnvironmentConfig:
    """Four stdin/stdout string tasks (reverse words, run-length encoding, a Caesar shift, palindromes)."""
    # environment.yaml names tasks.jsonl relative to itself: both ship inside this package.
    return packaged(__name__, "environment.yaml")
