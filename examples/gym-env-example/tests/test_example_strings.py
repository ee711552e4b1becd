"""The example package's own tests: its entry point, its shipped tasks and their reference programs.

Run after installing it beside the gym (``pip install -e examples/gym-env-example --no-deps``):
``python -m pytest examples/gym-env-example/tests``. No Docker: the references run on this host, which is
safe for programs this package wrote; the gym runs candidates only in its sandbox.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import gym_env_example
import pytest

from gym.environment_config import EnvironmentConfig
from gym.registry import GROUP, environment_config
from gym.task_stream import load_pool
from tasks.task import StdinTest, Task

PACKAGE = Path(gym_env_example.__file__).resolve().parent


def tasks() -> list[Task]:
    return load_pool(gym_env_example.environment().task_pool)


def passes(program: str, test: StdinTest) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", program], input=test.input, capture_output=True, text=True, timeout=30, check=False
    )
    return done.returncode == 0 and done.stdout.split() == test.output.split()


def test_the_entry_point_names_the_environment_function():
    (entry,) = [e for e in importlib.metadata.entry_points(group=GROUP) if e.name == "example_strings"]
    assert entry.value == "gym_env_example:environment" and entry.dist.name == "gym-env-example"
    assert entry.load() is gym_env_example.environment


def test_the_environment_reads_its_tasks_from_the_package_not_the_working_directory():
    config = gym_env_example.environment()
    assert isinstance(config, EnvironmentConfig) and config.name == "example_strings"
    assert config.task_pool.path == PACKAGE / "tasks.jsonl" and config.task_pool.path.is_absolute()


def test_the_gym_loads_it_by_name_with_overrides():
    assert environment_config("example_strings") == gym_env_example.environment()
    changed = environment_config("example_strings", overrides=[(("episode", "max_turns"), 3)])
    assert changed.episode.max_turns == 3 and changed.task_pool == gym_env_example.environment().task_pool


def test_four_stdin_tasks_each_with_a_reference():
    loaded = tasks()
    assert [t.task_id for t in loaded] == [
        "example/reverse-words",
        "example/run-length",
        "example/caesar-shift",
        "example/palindromes",
    ]
    assert all(t.kind == "stdin" and t.solutions and len(t.tests) >= 3 for t in loaded)


@pytest.mark.parametrize("task", tasks(), ids=lambda t: t.task_id)
def test_each_reference_passes_every_test_and_a_wrong_program_does_not(task):
    assert all(passes(task.solutions[0], test) for test in task.tests)
    assert not all(passes("print(input())", test) for test in task.tests)  # the check can fail
