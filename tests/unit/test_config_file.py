"""One reader for every config kind (sandbox/config_file.py): YAML or TOML by suffix, one error line per problem."""

from __future__ import annotations

import pytest
import yaml

from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from policies.serve_config import ServeConfig, ServeConfigError
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxConfigError
from tests.config_support import TRAIN_TOML
from trainer.config import TrainConfig
from trainer.errors import ConfigError

POLICY = {
    "type": "rdep_moe",
    "model": {
        "vocab_size": 64,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_dense_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "intermediate_size": 32,
        "moe_intermediate_size": 8,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "max_position_embeddings": 256,
    },
}


def test_yaml_and_toml_give_the_same_train_config(tmp_path):
    (tmp_path / "t.toml").write_text(TRAIN_TOML)
    (tmp_path / "t.yaml").write_text(
        yaml.safe_dump(
            {"run_dir": "runs/x", "environment": "configs/cp_smoke.yaml", "policy": POLICY, "optimizer": {"lr": 0.001}}
        )
    )
    from_toml, from_yaml = TrainConfig.load(tmp_path / "t.toml"), TrainConfig.load(tmp_path / "t.yaml")
    assert from_toml == from_yaml and from_toml.optimizer.lr == 0.001 and from_toml.env.name
    from gym.overrides import parse_override  # the path the CLI's --steps takes

    steps = TrainConfig.load(tmp_path / "t.toml", overrides=[parse_override("loop.steps=3")])
    assert steps.loop.steps == 3


def test_a_typo_inside_a_union_names_the_path_written(tmp_path):
    data = yaml.safe_load(open("configs/cp_smoke.yaml"))
    data["task_pool"]["sources"][0]["pool"]["pth"] = "x"
    env = tmp_path / "env.yaml"
    env.write_text(yaml.safe_dump(data))
    with pytest.raises(EnvironmentConfigError) as caught:
        EnvironmentConfig.from_file(env)
    assert str(caught.value) == f"{env}: task_pool.sources.0.pool.pth: Extra inputs are not permitted"
    train = tmp_path / "t.yaml"
    train.write_text(yaml.safe_dump({"environment": data, "policy": POLICY}))
    with pytest.raises(ConfigError) as caught:
        TrainConfig.load(train)
    assert str(caught.value) == f"{train}: environment.task_pool.sources.0.pool.pth: Extra inputs are not permitted"


def test_every_problem_is_one_line_naming_the_file(tmp_path):
    train = tmp_path / "t.yaml"
    train.write_text(
        yaml.safe_dump(
            {"environment": "configs/cp_smoke.yaml", "policy": POLICY, "optimizer": {"lrr": 1}, "loop": {"steps": -1}}
        )
    )
    with pytest.raises(ConfigError) as caught:
        TrainConfig.load(train)
    lines = str(caught.value).splitlines()
    assert f"{train}: optimizer.lrr: Extra inputs are not permitted" in lines and len(lines) == 2, lines
    assert any(line.startswith(f"{train}: loop.steps: Input should be greater than") for line in lines), lines


@pytest.mark.parametrize(
    "load, error",
    [
        (TrainConfig.load, ConfigError),
        (EnvironmentConfig.from_file, EnvironmentConfigError),
        (ServeConfig.load, ServeConfigError),
        (SandboxConfig.from_yaml, SandboxConfigError),
    ],
)
def test_missing_file_and_syntax_errors_are_one_line_naming_the_file(tmp_path, load, error):
    for name, text, says in [
        ("missing.yaml", None, "cannot read"),
        ("bad.yaml", "a: [1,\n", "not valid YAML"),
        ("bad.toml", "a = [1,\n", "not valid TOML"),
    ]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(error) as caught:
            load(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: {says}") and "\n" not in message, message


def test_serve_and_sandbox_configs_read_toml(tmp_path):
    (tmp_path / "s.toml").write_text('[policy]\ntype = "hf"\npath = "x"\n\n[server]\nport = 0\n')
    assert ServeConfig.load(tmp_path / "s.toml").policy.type == "hf"
    (tmp_path / "box.toml").write_text('[sandbox]\nallowlist = ["/work"]\n')
    assert SandboxConfig.from_yaml(tmp_path / "box.toml").allowlist == ["/work"]
    (tmp_path / "box.toml").write_text("[sandbox.pool]\nsizee = 1\n")
    with pytest.raises(SandboxConfigError, match=r"box.toml: pool.sizee: Extra inputs are not permitted"):
        SandboxConfig.from_yaml(tmp_path / "box.toml")
