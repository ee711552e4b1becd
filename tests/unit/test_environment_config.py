"""Environment files: validation errors that name the field, YAML/TOML, task pools and the task stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.environment import Environment, task_text
from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from gym.task_stream import TaskStream
from images.inputs import runner_image
from tasks.task import StdinTest, Task

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tasks" / "samples"


def jsonl(name: str, **extra) -> dict:
    return {"type": "jsonl", "path": str(SAMPLES / f"{name}.jsonl"), "format": name, **extra}


def config_error(data) -> str:
    with pytest.raises(EnvironmentConfigError) as caught:
        EnvironmentConfig.from_dict(data, source="env.yaml")
    return str(caught.value)


def test_errors_name_the_file_and_the_field():
    message = config_error(
        {"name": "x", "task_pool": {"type": "mixture", "sources": [{"weight": -1, "pool": jsonl("taco")}]}}
    )
    assert message.startswith("env.yaml: task_pool.sources.0.weight: ")  # the path written, no union member tags
    assert "'jsonl', 'hf', 'generated', 'mixture'" in config_error(
        {"name": "x", "task_pool": {"type": "csv", "path": "a"}}
    )
    assert "env.yaml: task_pool.formt: Extra inputs" in config_error(
        {"name": "x", "task_pool": {**jsonl("taco"), "formt": 1}}
    )
    message = config_error({"task_pool": jsonl("taco"), "episode": {"max_turns": 0}, "sandbox": {"pool": {"size": -1}}})
    assert "name: Field required" in message and "episode.max_turns" in message and "sandbox.pool.size" in message
    assert "exceeds max_total_tokens" in config_error(
        {"name": "x", "task_pool": jsonl("taco"), "episode": {"max_tokens_per_turn": 900, "max_total_tokens": 800}}
    )
    assert "tools" in config_error({"name": "x", "task_pool": jsonl("taco"), "tools": {"enabled": ["python", "ssh"]}})


def test_unreadable_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(EnvironmentConfigError, match="bad.yaml: not valid YAML"):
        EnvironmentConfig.from_file(bad)
    with pytest.raises(EnvironmentConfigError, match="cannot read"):
        EnvironmentConfig.from_file(tmp_path / "missing.yaml")


def test_yaml_and_toml_give_the_same_config(tmp_path):
    (tmp_path / "e.yaml").write_text(
        f"name: t\ntask_pool:\n  type: jsonl\n  path: {SAMPLES / 'taco.jsonl'}\n  format: taco\nepisode:\n  max_turns: 3\n"
    )
    (tmp_path / "e.toml").write_text(
        f'name = "t"\n[task_pool]\ntype = "jsonl"\npath = "{SAMPLES / "taco.jsonl"}"\nformat = "taco"\n'
        "[episode]\nmax_turns = 3\n"
    )
    assert EnvironmentConfig.from_file(tmp_path / "e.yaml") == EnvironmentConfig.from_file(tmp_path / "e.toml")


def test_shipped_smoke_config_loads_every_sample_with_a_reference():
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    assert len(env.tasks) == 16 and set(env.reference_programs()) == set(env.tasks)
    assert {task.source_format for task in env.tasks.values()} == {
        "nemotron",
        "taco",
        "apps",
        "codecontests",
        "lcb",
        "humaneval",
        "mbpp",
    }
    resolved = json.loads(env.resolved())
    assert resolved["name"] == "cp_smoke" and resolved["sandbox"]["image"] == runner_image()
    messages = env.prompt(env.tasks["humaneval/GymEval/0"])
    assert [m.role for m in messages] == ["system", "developer", "user"]
    assert "type submit" in messages[1].content and "running_max" in messages[2].content


def test_duplicate_ids_across_sources_need_a_prefix():
    pool = {"type": "mixture", "sources": [{"weight": 1, "pool": jsonl("taco")}, {"weight": 1, "pool": jsonl("taco")}]}
    with pytest.raises(EnvironmentConfigError, match="already taken.*id_prefix"):
        Environment(EnvironmentConfig(name="d", task_pool=pool))
    pool["sources"][1]["pool"]["id_prefix"] = "again/"
    assert len(Environment(EnvironmentConfig(name="d", task_pool=pool)).tasks) == 4


def test_hf_pool_reads_local_datasets_files(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the hf pool needs the datasets package")
    rows = [json.loads(line) for line in (SAMPLES / "nemotron.jsonl").read_text().splitlines()]
    for row in rows:  # arrow needs one schema: keep the fields the format reads
        row.pop("source", None)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "rows.parquet"))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    for path in (tmp_path / "rows.parquet", tmp_path / "saved"):
        env = Environment(
            EnvironmentConfig(name="hf", task_pool={"type": "hf", "path": str(path), "format": "nemotron"})
        )
        assert sorted(env.tasks) == ["nemotron-reverse-words", "nemotron-sum-pairs"]


def test_limit_and_empty_pools(tmp_path):
    env = Environment(EnvironmentConfig(name="l", task_pool=jsonl("mbpp", limit=2)))
    assert len(env.tasks) == 2
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(EnvironmentConfigError, match="no usable task"):
        Environment(
            EnvironmentConfig(
                name="e", task_pool={"type": "jsonl", "path": str(tmp_path / "empty.jsonl"), "format": "mbpp"}
            )
        )


def fake_tasks(prefix: str, n: int) -> list[Task]:
    return [
        Task(
            task_id=f"{prefix}{i}",
            source_format="nemotron",
            kind="stdin",
            prompt="p",
            tests=(StdinTest(input="", output=""),),
        )
        for i in range(n)
    ]


def ids(draws) -> list[str]:
    return [task.task_id for _, task in draws]


def test_stream_is_deterministic_and_follows_the_weights():
    sources, weights = [fake_tasks("a", 5), fake_tasks("b", 3)], [3.0, 1.0]
    first = TaskStream(sources, weights, seed=1, shuffle=[True, False]).take(4000)
    assert first == TaskStream(sources, weights, seed=1, shuffle=[True, False]).take(4000)
    assert ids(first) != ids(TaskStream(sources, weights, seed=2, shuffle=[True, False]).take(4000))
    share_a = sum(t.startswith("a") for t in ids(first)) / 4000
    assert 0.72 < share_a < 0.78  # 3:1 weights
    a_draws = [t for t in ids(first) if t.startswith("a")]
    for epoch in range(20):  # a shuffled source gives each task once per epoch
        assert sorted(a_draws[epoch * 5 : epoch * 5 + 5]) == [f"a{i}" for i in range(5)]
    assert [t for t in ids(first) if t.startswith("b")][:6] == ["b0", "b1", "b2", "b0", "b1", "b2"]  # file order


def test_shards_are_disjoint_and_cover_the_stream():
    sources, weights = [fake_tasks("a", 4), fake_tasks("b", 7)], [1.0, 2.0]
    whole = TaskStream(sources, weights, seed=5, shuffle=[True, True]).take(90)
    shards = [TaskStream(sources, weights, seed=5, shuffle=[True, True], shard=(w, 3)).take(30) for w in range(3)]
    merged = sorted((p, t.task_id) for shard in shards for p, t in shard)
    assert merged == [(p, t.task_id) for p, t in whole]
    assert [p % 3 for p, _ in shards[1]] == [1] * 30
    with pytest.raises(ValueError, match="shard"):
        TaskStream(sources, weights, shard=(3, 3))


def test_cursor_resumes_exactly():
    sources, weights = [fake_tasks("a", 4), fake_tasks("b", 7)], [1.0, 2.0]
    stream = TaskStream(sources, weights, seed=9, shuffle=[True, True], shard=(1, 2))
    stream.take(13)
    cursor = stream.position
    rest = stream.take(20)
    resumed = TaskStream(sources, weights, seed=9, shuffle=[True, True], shard=(1, 2))
    resumed.seek(cursor)
    assert resumed.take(20) == rest


def test_task_text_adds_starter_code_and_function_name():
    env = Environment.load(ROOT / "configs" / "cp_smoke.yaml")
    call_task = env.tasks["apps/9002"]
    text = task_text(call_task)
    assert text.startswith(call_task.prompt.rstrip()) and "class Solution" in text and "`numIdenticalPairs`" in text
    stdin_task = env.tasks["nemotron/nemotron-sum-pairs"]
    assert task_text(stdin_task) == stdin_task.prompt.rstrip()
