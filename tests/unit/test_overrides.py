"""`--set KEY=VALUE` overrides: parsing, applying to a raw mapping, and the two loaders that take them."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from gym.cli import build_parser
from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from gym.overrides import OverrideError, apply_overrides, parse_override
from trainer.config import ConfigError, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "cp_smoke.yaml"
TINY = ROOT / "configs" / "cp_grpo_tiny.yaml"
SAMPLES_JOB = ROOT / "configs" / "cp_grpo_samples.yaml"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a=4", 4),
        ("a=0.5", 0.5),
        ("a=-3", -3),
        ("a=true", True),
        ("a=false", False),
        ("a=null", None),
        ("a=", None),
        ("a=other.jsonl", "other.jsonl"),
        ("a='4'", "4"),
        ("a=hello world", "hello world"),
        ("a=[x, 2]", ["x", 2]),
        ("a={k: v, n: [1]}", {"k": "v", "n": [1]}),
        ("a=x=y", "x=y"),
        ("a=2024-01-01", datetime.date(2024, 1, 1)),
        ("a=1e-3", "1e-3"),  # YAML 1.1 wants a dot in a float, as in the config files; pydantic takes it for a float
    ],
)
def test_values_are_yaml(text, value):
    path, parsed = parse_override(text)
    assert path == ("a",) and parsed == value and type(parsed) is type(value)


def test_keys_are_dotted_paths():
    assert parse_override("task_pool.sources.0.weight=2") == (("task_pool", "sources", "0", "weight"), 2)
    assert parse_override("name=x")[0] == ("name",)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("episode.max_turns", "expected KEY=VALUE"),
        ("", "expected KEY=VALUE"),
        ("=4", "empty key"),
        ("  =4", "empty key"),
        ("a..b=1", "empty segment"),
        (".a=1", "empty segment"),
        ("a.=1", "empty segment"),
        ("a=[1,", "not valid YAML"),
        ("a={k: v", "not valid YAML"),
    ],
)
def test_malformed_items_are_refused(text, reason):
    with pytest.raises(OverrideError, match=reason) as caught:
        parse_override(text)
    assert repr(text) in str(caught.value) and "\n" not in str(caught.value)


def overridden(mapping, *texts):
    return apply_overrides(mapping, [parse_override(text) for text in texts])


def test_apply_sets_nested_fields_and_list_items_without_touching_the_input():
    original = {"episode": {"max_turns": 8}, "sources": [{"weight": 1, "pool": {"path": "a"}}, {"weight": 1}]}
    result = overridden(original, "episode.max_turns=4", "sources.1.weight=2", "sources.0.pool.path=b.jsonl")
    assert result == {
        "episode": {"max_turns": 4},
        "sources": [{"weight": 1, "pool": {"path": "b.jsonl"}}, {"weight": 2}],
    }
    assert original == {"episode": {"max_turns": 8}, "sources": [{"weight": 1, "pool": {"path": "a"}}, {"weight": 1}]}
    assert result["sources"][1] is not original["sources"][1]  # no subtree shared with the input


def test_apply_creates_missing_keys_replaces_whole_values_and_later_wins():
    assert overridden({}, "sampling.top_k=5") == {"sampling": {"top_k": 5}}
    assert overridden({"a": {"b": 1}}, "a.c.d=[1, 2]") == {"a": {"b": 1, "c": {"d": [1, 2]}}}
    assert overridden({"a": {"b": 1}}, "a={c: 2}") == {"a": {"c": 2}}
    assert overridden({"a": [1, 2, 3]}, "a.2=x") == {"a": [1, 2, "x"]}
    assert overridden({"a": 1}, "a=2", "a=3") == {"a": 3}
    value = ["shared"]
    result = apply_overrides({}, [(("a",), value), (("b",), value)])
    assert result["a"] is not value and result["a"] is not result["b"]


@pytest.mark.parametrize(
    ("mapping", "text", "reason"),
    [
        (
            {"episode": {"max_turns": 8}},
            "episode.max_turns.x=1",
            "'episode.max_turns.x': episode.max_turns is 8, not a mapping",
        ),
        ({"name": "cp"}, "name.first=1", "name is 'cp', not a mapping"),
        ({"solutions": None}, "solutions.x=1", "solutions is None, not a mapping"),
        ("not a mapping", "a=1", "the config is 'not a mapping'"),
        ({"s": [{"w": 1}]}, "s.1.w=2", r"'s.1.w': index 1 out of range \(s has 1 items\)"),
        ({"s": [{"w": 1}]}, "s.-1.w=2", "s is a list, '-1' is not an index"),
        ({"s": [{"w": 1}]}, "s.first.w=2", "s is a list, 'first' is not an index"),
        ({"s": [[1, 2]]}, "s.0.5=9", r"index 5 out of range \(s.0 has 2 items\)"),
    ],
)
def test_apply_names_an_override_that_does_not_fit(mapping, text, reason):
    with pytest.raises(OverrideError, match=reason):
        overridden(mapping, text)


def test_the_commands_parse_repeated_set_options(capsys):
    argv = ["rollout", "c.yaml", "--episodes", "1", "--out", "o", "--set", "a.b=1", "--set", "c=[x]"]
    assert build_parser("rollout", argv).parse_args(argv).set == [(("a", "b"), 1), (("c",), ["x"])]
    argv = ["train", "c.yaml"]
    assert build_parser("train", argv).parse_args(argv).set == []
    argv = ["train", "c.yaml", "--set", "optimizer"]
    with pytest.raises(SystemExit) as caught:
        build_parser("train", argv).parse_args(argv)
    assert caught.value.code == 2 and "argument --set: 'optimizer': expected KEY=VALUE" in capsys.readouterr().err


def test_environment_loader_validates_the_overridden_mapping():
    config = EnvironmentConfig.from_file(
        SMOKE,
        overrides=[
            parse_override("episode.max_turns=4"),
            parse_override("task_pool.sources.0.pool.limit=1"),
            parse_override("tools.enabled=[bash, submit]"),
        ],
    )
    assert config.episode.max_turns == 4 and config.task_pool.sources[0].pool.limit == 1
    assert config.tools.enabled == ("bash", "submit")
    assert EnvironmentConfig.from_file(SMOKE).episode.max_turns == 8
    with pytest.raises(EnvironmentConfigError) as caught:
        EnvironmentConfig.from_file(
            SMOKE, overrides=[parse_override("episode.max_turns=0"), parse_override("episode.turnz=1")]
        )
    message = str(caught.value)
    assert message.startswith(f"{SMOKE} (with overrides): episode.")
    assert (
        "episode.max_turns: Input should be greater than or equal to 1" in message
        and "episode.turnz: Extra inputs" in message
    )
    with pytest.raises(OverrideError, match="index 7 out of range"):
        EnvironmentConfig.from_file(SMOKE, overrides=[parse_override("task_pool.sources.7.weight=2")])


def test_training_loader_applies_overrides_inline_and_through_an_environment_file(tmp_path):
    config = TrainConfig.load(
        SAMPLES_JOB,
        overrides=[
            parse_override("optimizer.lr=1e-3"),
            parse_override("rollout.group_size=2"),
            parse_override("environment.task_pool.sources.0.pool.limit=3"),
        ],
    )
    assert config.optimizer.lr == 0.001 and config.rollout.group_size == 2
    assert config.env.task_pool.sources[0].pool.limit == 3
    assert TrainConfig.load(SAMPLES_JOB).optimizer.lr == 0.0001
    main_job = TrainConfig.load(TINY, overrides=[parse_override("environment.task_pool.templates.0=linear")])
    assert main_job.optimizer.lr == 0.0005 and main_job.env.task_pool.templates[0] == "linear"

    by_path = tmp_path / "train.yaml"
    by_path.write_text(
        yaml.safe_dump({"environment": str(SMOKE), "policy": yaml.safe_load(TINY.read_text())["policy"]})
    )
    config = TrainConfig.load(
        by_path,
        overrides=[
            parse_override("environment.episode.max_turns=4"),
            parse_override("environment.task_pool.sources.1.weight=2"),
        ],
    )
    assert (
        config.env.name == "cp_smoke"
        and config.env.episode.max_turns == 4
        and config.env.task_pool.sources[1].weight == 2
    )
    assert TrainConfig.load(by_path, overrides=[parse_override("seed=3")]).env.episode.max_turns == 8

    with pytest.raises(ConfigError, match=r"environment\..*episode\.max_turnz: Extra inputs are not permitted"):
        TrainConfig.load(by_path, overrides=[parse_override("environment.episode.max_turnz=4")])
    with pytest.raises(ConfigError, match="optimizer.lr: Input should be greater than or equal to 0"):
        TrainConfig.load(TINY, overrides=[parse_override("optimizer.lr=-1")])
    assert TrainConfig.load(TINY, overrides=[parse_override("optimizer.lr=0")]).optimizer.lr == 0.0  # a control run
    with pytest.raises(OverrideError, match="'environment.task_pool.sources.9.weight': index 9 out of range"):
        TrainConfig.load(by_path, overrides=[parse_override("environment.task_pool.sources.9.weight=2")])
    by_path.write_text(yaml.safe_dump({"environment": str(tmp_path / "nowhere.yaml"), "policy": {"type": "rdep_moe"}}))
    with pytest.raises(ConfigError, match="environment: .*nowhere.yaml: cannot read"):
        TrainConfig.load(by_path, overrides=[parse_override("environment.name=x")])
