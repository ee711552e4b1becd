"""A SkyRL-Gym environment over the gym's graders: env class ``code_rl_gym``.

SkyRL rows are verl-shaped with SkyRL's names (``reward_spec`` for ``reward_model``)::

    {"data_source": "taco", "prompt": [...], "env_class": "code_rl_gym",
     "reward_spec": {"method": "rule", "ground_truth": "{\\"inputs\\": ..., \\"outputs\\": ...}"}, "extra_info": {...}}

and SkyRL makes an env per sample with ``skyrl_gym.make(env_class, env_config=..., extras=row)``. `register()` adds
the class (call it in your SkyRL entrypoint, as SkyRL registers its own envs; importing this module registers
nothing). One step: the action (the model's reply) is routed and read as `gym.integrations.ground_truth` says,
graded by the process's shared `Scorer`, and the episode ends. ``env_config`` may name ``scorer_config`` (a
`ScorerConfig` YAML) and ``sources`` (``{data_source: code | math}``).

Rewards: 1.0 / 0.0 (or the fraction passed); 0.0 for a malformed ground truth or an oversized reply, with the reason in
the step's metadata. SkyRL has no per-sample mask either: a sample the sandbox or host failed raises
`SandboxUnavailable`, as in verl's default, rather than teach the policy a 0.
"""

from __future__ import annotations

from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from gym.integrations.ground_truth import sample
from gym.integrations.scorer import SandboxUnavailable, Score, shared_scorer

ENV_CLASS = "code_rl_gym"


def register() -> None:
    """Make ``skyrl_gym.make("code_rl_gym", ...)`` build `GymEnv`."""
    if ENV_CLASS not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_CLASS, entry_point=f"{__name__}:GymEnv")


class GymEnv(BaseTextEnv):
    """One sample, graded in one step (see the module docstring)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        config, extras = env_config or {}, extras or {}
        spec = extras.get("reward_spec") or {}
        self.data_source = extras.get("data_source", config.get("data_source"))
        self.ground_truth = spec.get("ground_truth") if isinstance(spec, dict) else None
        self.extra_info = extras.get("extra_info")
        self.sources = dict(config.get("sources") or {}) or None
        self.scorer = shared_scorer(config.get("scorer_config"))
        self.score: Score | None = None

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        planned = sample(
            self.data_source,
            action,
            self.ground_truth,
            self.extra_info,
            config=self.scorer.config,
            sources=self.sources,
        )
        score = planned if isinstance(planned, Score) else self.scorer.score(*planned)
        if score.masked:
            raise SandboxUnavailable(f"the sandbox or host failed to grade this sample: {score.reason}")
        self.score = score
        metadata = {
            "verdict": score.verdict,
            "reason": score.reason,
            "passed": score.passed,
            "fraction": score.fraction,
        }
        return BaseTextEnvStepOutput(observations=[], reward=score.reward, done=True, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        if self.score is None:
            return {}
        return {"passed": float(self.score.passed), "fraction": self.score.fraction}
