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
import re
import subprocess
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


def test_verifiers_rollouts_use_our_workspaces_as_tools(tmp_path):
    """The workspace tools (gym/integrations/verifiers_workspace.py) through verifiers' own loop, driven by a scripted
    model that emits OpenAI ``tool_calls`` (tests/verifiers_tools_driver.py): the honest agent's program, written and
    run in its workspace, scores 1; the attacker's writes and cwd outside the workspace are refused as data, its
    output flood is cut to the bound, its forged verdict scores 0; each rollout had a container of its own, a real
    one of the gym's sandbox, and none is left once the rollouts end."""
    python = cached_venv(f"verifiers-{VERIFIERS}", (f"verifiers=={VERIFIERS}",))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(ROWS[1]) + "\n")  # the TACO row: a program, graded in a fresh container
    out = driven(python, "tests.verifiers_tools_driver", str(tasks), str(tmp_path / "out"), path=[GYM_VERIFIERS])
    assert out["toolsets"] == ["GymWorkspaceToolset"]
    tools = [f"workspace_{name}" for name in ("bash", "list_dir", "python", "read_file", "write_file")]
    assert out["tools"] == {"0": tools, "1": tools}
    rewards = {r["reply"]: r["reward"] for r in out["rollouts"]}
    assert rewards == {"```python\na, b = map(int, input().split())\nprint(a + b)\n```": 1.0, "print('PASSED')": 0.0}
    assert all(not r["errors"] for r in out["rollouts"]), out["rollouts"]

    honest, attack = out["tool_results"]["0"], out["tool_results"]["1"]
    assert len(honest) == 3 and len(attack) == 6
    assert "3" in honest[2].split() and honest[1].startswith("wrote")  # its program ran on the example, in /workspace
    for refused in attack[1:4]:  # a write, a cwd and a read outside the allowlist: refused, said to the model
        assert refused.startswith("[sandbox_denied]"), refused
    for flood in attack[4:6]:  # 3 MB of output from bash and python: cut to the bound, never the whole
        assert flood.startswith("[output_truncated]") and len(flood) < 4096 + 200, flood[:200]

    # each workspace's container id, from its own mounts: two containers, and no trace of them once it is over
    containers = {re.search(r"containers/([0-9a-f]{64})", result).group(1) for result in (honest[0], attack[0])}
    assert len(containers) == 2, (honest[0], attack[0])
    for container in containers:
        listed = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"id={container}"], capture_output=True,
                                text=True, check=True)  # fmt: skip
        assert listed.stdout.strip() == "", f"workspace {container} left behind"


def test_workspace_tools_called_out_of_bounds_answer_data():
    """The rollout's tools (`WorkspaceSession`) called as a hostile model or a late client would: paths and a cwd
    outside the workspace are refused, arguments of the wrong type are a tool error, an 8 MiB write is bounded data;
    a call after the rollout ended raised from the MCP tool (trio's 'this thread wasn't created by Trio') and now
    answers a tool error without starting a workspace. Control: the honest call before it runs."""
    import docker

    python = cached_venv(f"verifiers-{VERIFIERS}", (f"verifiers=={VERIFIERS}",))
    seen = driven(python, "tests.verifiers_session_driver", path=[GYM_VERIFIERS])
    assert seen["honest"].startswith("[exit code 0]") and "hi" in seen["honest"], seen
    assert seen["outside"].startswith("[sandbox_denied] ") and seen["cwd"].startswith("[sandbox_denied] "), seen
    assert seen["outside"].count("[sandbox_denied]") == 1  # the kind heads the text once
    assert seen["not a string"].startswith("[tool_error] "), seen
    assert len(seen["huge"]) <= 300 and "Traceback" not in seen["huge"], seen
    for late in ("after the end", "after the end, twice"):
        assert seen[late].startswith("[tool_error] the rollout has ended"), seen
    left = docker.from_env().containers.list(all=True, filters={"label": f"gym.owner={seen['owner']}"})
    assert left == [], left
