"""`python -m gym plan` as a user runs it: the printed plan, --json, the exit status by the verdict, and one
`gym: error:` line for bad sizes or a policy directory whose config.json cannot be read (the counts
themselves: tests/unit/test_memory_plan.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.cli_support import ROOT, gym, one_line


def test_cli_prints_the_plan_writes_json_and_exits_by_the_verdict(tmp_path):
    done = gym(
        "plan", "configs/qwen2_7b_grpo.yaml", "--gpus", "8", "--gpu-memory", "80", "--json", str(tmp_path / "p.json")
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fits: " in done.stdout and "7,615,616,512" in done.stdout
    written = json.loads((tmp_path / "p.json").read_text())
    assert written["fits"] is True and written["gpus"] == 8 and written["params_total"] == 7_615_616_512
    small = gym("plan", "configs/qwen2_7b_grpo.yaml", "--gpus", "2", "--gpu-memory", "24")
    assert small.returncode == 1 and "does NOT fit" in small.stdout, small.stderr[-2000:]


@pytest.mark.parametrize("args", [["--gpus", "0", "--gpu-memory", "80"], ["--gpus", "2", "--gpu-memory", "nan"]])
def test_cli_refuses_bad_sizes(args):
    done = gym("plan", "configs/qwen2_1.5b_grpo.yaml", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    "config_json",
    [None, "{not json", '{"model_type": "no-such-arch"}', '{"model_type": "qwen2", "hidden_size": "wide"}'],
)
def test_cli_names_a_policy_directory_it_cannot_read(tmp_path, config_json):
    model = tmp_path / "model"
    model.mkdir()
    if config_json is not None:
        (model / "config.json").write_text(config_json)
    train = yaml.safe_load((ROOT / "configs/qwen2_1.5b_grpo.yaml").read_text())
    train["policy"]["path"] = str(model)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(train))
    done = gym("plan", str(tmp_path / "t.yaml"), "--gpus", "2", "--gpu-memory", "80")
    one_line(done, 2, str(model))
