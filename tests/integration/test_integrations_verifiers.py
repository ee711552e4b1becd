"""verifiers drives our environment (issue 44 item 2): verifiers 0.4.0 from the package registry, in a venv of its own
(built once and cached outside the checkout), runs its own evaluation loop over examples/gym-verifiers (the classes of
gym/integrations/verifiers.py) against the real ``gym serve`` (a tiny random policy and a tokenizer trained here), and
against a scripted chat stub that answers each task once honestly and once with an attack (tests/verifiers_driver.py).

The tasks are one verl-format file, a GSM8K row and a TACO row: the reward grades math by the math check and the
program in the real Docker sandbox. What the policy server samples is graded (0 for its noise); the honest replies
score 1, a hedge and a forged PASSED 0; graded by an engine that does not answer, a program's rollout is an errored
rollout, never a reward of 0, while math (no engine needed) is still graded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.install_support import cached_venv, driven
from tests.serve_support import MODEL, start_server, stop_server
from tests.tokenizer_support import train_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
VERIFIERS = "0.4.0"
GYM_VERIFIERS = ROOT / "examples" / "gym-verifiers" / "src"  # the package verifiers finds us by
ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 6 times 12? End with #### N."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "extra_info": {"split": "test", "index": 0},
    },
    {
        "data_source": "taco",
        "prompt": [{"role": "user", "content": "Read a and b from one line, print a + b."}],
        "ability": "code",
        "reward_model": {
            "style": "rule",
            "ground_truth": json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}),
        },
        "extra_info": {"split": "test", "index": 1},
    },
]
HONEST = {"6 * 12 = 72\n#### 72", "```python\na, b = map(int, input().split())\nprint(a + b)\n```"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verifiers")
    config = {
        "policy": {"type": "rdep_moe", "seed": 0, "model": MODEL},
        "engine": {"max_batch_size": 8, "threads": 1},
        "server": {"served_model_name": "policy"},  # the model verifiers' eval names (any other is a 404)
        "tokenizer": str(train_tokenizer(tmp / "tokenizer.json")),
    }
    (tmp / "serve.yaml").write_text(yaml.safe_dump(config))
    proc, url = start_server(tmp / "serve.yaml")
    yield tmp, url
    stop_server(proc)


def test_verifiers_eval_loop_grades_with_our_graders(served):
    python = cached_venv(f"verifiers-{VERIFIERS}", (f"verifiers=={VERIFIERS}",))
    tmp, url = served
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    dead = tmp / "dead_engine.yaml"
    dead.write_text(
        yaml.safe_dump(
            {
                "sandbox": {"engine": {"base_url": "unix:///nonexistent/docker.sock"}, "pool": {"size": 0}},
                "infra_retries": 0,
            }
        )
    )
    out = driven(python, "tests.verifiers_driver", str(tasks), url, str(tmp / "out"), str(dead), path=[GYM_VERIFIERS])
    assert out["env"] == "SingleAgentEnv" and len(out["prompts"]) == 2

    # gym serve's samples went through verifiers' loop and were graded: a reward each, no error
    assert len(out["serve"]) == 4 and all(r["ok"] and not r["errors"] for r in out["serve"])
    assert all(r["reward"] == 0.0 and r["reply"] not in HONEST for r in out["serve"]), out["serve"]

    scripted = {r["reply"]: r["reward"] for r in out["scripted"]}
    assert scripted == {
        "6 * 12 = 72\n#### 72": 1.0,
        "\\boxed{71} or \\boxed{72}": 0.0,
        "```python\na, b = map(int, input().split())\nprint(a + b)\n```": 1.0,
        "print('PASSED')": 0.0,
    }

    dead_engine = {r["reply"]: r for r in out["dead_engine"]}
    for reply in ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", "print('PASSED')"):
        rollout = dead_engine[reply]
        assert rollout["reward"] is None and not rollout["ok"], rollout
        assert any("SandboxUnavailable" in error for error in rollout["errors"]), rollout
    assert dead_engine["6 * 12 = 72\n#### 72"]["reward"] == 1.0  # math needs no engine
