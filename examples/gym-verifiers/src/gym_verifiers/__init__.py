"""The gym's tasks and graders as a verifiers environment: id ``gym-verifiers`` (gym/integrations/verifiers.py)."""

from gym.integrations.verifiers import GymChatHarness, GymTaskset, load_environment

__all__ = ["GymChatHarness", "GymTaskset", "load_environment"]
