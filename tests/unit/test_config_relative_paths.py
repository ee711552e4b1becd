"""A user's config finds its own files from any working directory: a relative path that names a file beside the
config (and none under the working directory) is read from there; a file under the working directory wins."""

from __future__ import annotations

import shutil
from pathlib import Path

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from sandbox.config_file import read_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """\
name: mine
task_pool: {type: jsonl, path: data/tasks.jsonl, format: nemotron, solutions: data/solutions.jsonl}
tools: {enabled: [bash, submit]}
"""


def user_config(folder: Path) -> Path:
    (folder / "data").mkdir(parents=True)
    shutil.copy(ROOT / "tasks/samples/nemotron.jsonl", folder / "data/tasks.jsonl")
    shutil.copy(ROOT / "tasks/samples/nemotron.solutions.jsonl", folder / "data/solutions.jsonl")
    (folder / "mine.yaml").write_text(CONFIG)
    return folder / "mine.yaml"


def test_a_config_reads_its_own_files_from_another_directory(tmp_path, monkeypatch):
    config = user_config(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    data = read_config(config)
    assert data["task_pool"]["path"] == str(tmp_path / "project/data/tasks.jsonl")
    assert data["task_pool"]["solutions"] == str(tmp_path / "project/data/solutions.jsonl")
    assert data["task_pool"]["format"] == "nemotron" and data["tools"]["enabled"] == ["bash", "submit"]
    env = Environment(EnvironmentConfig.from_file(config))
    assert len(env.tasks) == 2 and env.reference_programs()


def test_a_file_under_the_working_directory_wins(tmp_path, monkeypatch):
    config = user_config(tmp_path / "project")
    user_config(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    assert read_config(config)["task_pool"]["path"] == "data/tasks.jsonl"  # relative: the working directory's


def test_names_and_shipped_paths_are_left_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = read_config(ROOT / "configs/cp_smoke.yaml")  # shipped: resolved against the distribution when used
    assert data["task_pool"]["sources"][0]["pool"]["path"] == "tasks/samples/nemotron.jsonl"
    assert data["tokenizer"] == "bpe"
