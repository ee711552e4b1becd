"""The policy's context window, in the real sandbox: an episode whose own tool outputs push its context past the
model's window ends there and is scored (as when it spends `episode.max_total_tokens`), never masked; an honest
episode under a window smaller than `max_tokens_per_turn` asks for less and earns its reward; a task whose prompt
alone fills the window is masked with that reason. In-process and through the real policy server (HTTP 400 read
back as ContextExceeded). Issue 41, class 1 (the outside round's "context window" variant)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gym.environment import Environment, task_text
from gym.environment_config import EnvironmentConfig
from gym.format.message import Message
from gym.policy_client import HttpEngine
from gym.rollout import collect_async
from gym.scripted import ReferencePolicy
from policies.sampling import Completion, SamplingParams, check_request
from sandbox.pool import WorkspacePool
from tests.policy_server_support import ServedReference, serving

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
TASK = "nemotron/nemotron-sum-pairs"
FLOOD = "python3 -c \"print('ab ' * 2700)\""  # 8,100 characters, ~4,100 shown (stdout: half of output_chars)


def environment() -> Environment:
    config = EnvironmentConfig.from_file(ROOT / "configs/cp_smoke.yaml")
    sandbox = config.sandbox.model_copy(update={"pool": config.sandbox.pool.model_copy(update={"size": 1})})
    env = Environment(config.model_copy(update={"sandbox": sandbox}))
    env.sources, env.tasks = [[env.tasks[TASK]]] * len(env.sources), {TASK: env.tasks[TASK]}
    return env


class Scripted(ReferencePolicy):
    """The scripted reference, after one bash call printing 8,100 characters when ``flood``."""

    def __init__(self, env: Environment, flood: bool) -> None:
        text = {task_id: task_text(task) for task_id, task in env.tasks.items()}
        super().__init__(env.harmony, env.tasks, env.reference_programs(), text, tools=tuple(env.config.tools.enabled))
        self.flood = flood

    def script(self, task):
        first = [[Message.tool_call("bash", {"command": FLOOD})]] if self.flood else []
        return [*first, *super().script(task)]


class Windowed:
    """A RolloutEngine over a scripted policy that refuses what a model with a ``context``-token window would."""

    def __init__(self, policy: ReferencePolicy, context: int, vocab_size: int) -> None:
        self.policy, self.context, self.vocab_size = policy, context, vocab_size

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        for prompt in prompts:
            check_request(prompt, params, self.vocab_size, self.context)
        return await self.policy.generate(prompts, params)


class ServedWindowed(ServedReference):
    """The same behind the real policy server: its refusal is an HTTP 400 the client reads back."""

    def __init__(self, env: Environment, policy: ReferencePolicy, context: int) -> None:
        super().__init__(env)
        self.policy, self.context_length = policy, context

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        check_request(prompt, params, self.vocab_size, self.context_length)


def play(env: Environment, engine):
    async def go():
        async with WorkspacePool(env.config.sandbox) as pool:
            trajectories, workers = await collect_async(env, engine, pool, 1, 1, seed=0)
            return trajectories[0], workers.results[0]

    return trio.run(go)


@pytest.fixture(scope="module")
def sizes() -> tuple[int, int]:
    """(prompt tokens, tokens of the whole honest episode) with no window."""
    env = environment()
    trajectory, _ = play(env, Scripted(env, flood=False))
    assert trajectory.reward_breakdown["correctness"] == 1.0
    return len(trajectory.prompt_ids), len(trajectory.ids)


def test_an_honest_episode_under_a_small_window_asks_for_less_and_earns_its_reward(sizes):
    env = environment()
    prompt, whole = sizes
    window = whole + 16  # smaller than the prompt + max_tokens_per_turn (2,048) of every request
    assert prompt + env.config.episode.max_tokens_per_turn > window
    trajectory, _ = play(env, Windowed(Scripted(env, flood=False), window, env.tokenizer.vocab_size))
    assert not trajectory.masked and trajectory.reward_breakdown["correctness"] == 1.0, trajectory.end_reason


def test_a_tool_output_that_fills_the_window_ends_the_episode_scored(sizes):
    env = environment()
    _, whole = sizes
    trajectory, result = play(env, Windowed(Scripted(env, flood=True), whole + 16, env.tokenizer.vocab_size))
    assert result.tool_calls[0].outcome.failure == "ok" and len(result.tool_calls[0].outcome.output) > 4000
    assert not trajectory.masked and trajectory.reward is not None and trajectory.end_reason == "max_tokens"
    assert trajectory.reward_breakdown["correctness"] == 0.0 and len(trajectory.ids) > whole + 16  # the output did it


def test_a_prompt_that_fills_the_window_is_masked_with_its_reason(sizes):
    env = environment()
    prompt, _ = sizes
    trajectory, result = play(env, Windowed(Scripted(env, flood=False), prompt - 1, env.tokenizer.vocab_size))
    assert trajectory.masked and trajectory.reward is None
    assert f"the prompt of {prompt} tokens fills the policy's context of {prompt - 1}" in result.infra, result.infra


def test_through_the_policy_server_the_same(sizes):
    env = environment()
    _, whole = sizes
    with serving(ServedWindowed(env, Scripted(env, flood=False), whole + 16)) as url:
        honest, _ = play(env, HttpEngine(url))
    assert not honest.masked and honest.reward_breakdown["correctness"] == 1.0, honest.end_reason
    with serving(ServedWindowed(env, Scripted(env, flood=True), whole + 16)) as url:
        flooded, _ = play(env, HttpEngine(url))
    assert not flooded.masked and flooded.end_reason == "max_tokens" and flooded.reward is not None
