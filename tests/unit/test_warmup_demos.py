"""Which tasks the warm start's demos come from, and where RL's task stream starts after them."""

from __future__ import annotations

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from trainer.warmup import demo_draw, demo_tasks


def _env(count: int = 40) -> Environment:
    pool = {"type": "generated", "count": count, "levels": [1], "shuffle": True, "params_in": "input"}
    return Environment(EnvironmentConfig.model_validate({"name": "demos", "task_pool": pool}))


def test_demos_are_the_first_distinct_tasks_and_rl_draws_on_after_them():
    env = _env()
    chosen, position = demo_draw(env, 8)
    drawn = [task.task_id for _, task in env.stream().take(position)]
    assert [t.task_id for t in chosen] == list(dict.fromkeys(drawn)) and len(chosen) == 8
    stream = env.stream()
    stream.seek(position)
    after = {task.task_id for _, task in stream.take(len(env.tasks) - position)}
    # the rest of the first epoch: every other task, none of the demos
    assert after == set(env.tasks) - {t.task_id for t in chosen}
    assert demo_tasks(env, 8) == chosen


def test_every_task_as_a_demo_leaves_rl_at_the_start():
    env = _env(12)
    chosen, position = demo_draw(env, None)
    assert position == 0 and [t.task_id for t in chosen] == sorted(env.tasks)
    assert demo_draw(env, 50) == (chosen, 0)
