"""`torchrun --nproc-per-node 2 -m gym train` with FSDP2, as a user launches it: the shipped main job (real Docker
workspaces, real grader) trains 2 steps sharded over 2 gloo ranks, exits 0 on every rank, resumes from its
sharded checkpoint to step 3, and `gym export RUN OUT` turns the run into a directory transformers loads.

The step equivalence itself is tests/integration/test_trainer_fsdp.py's; this is the command line around it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_support import ROOT, gym, one_line

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SETTINGS = ["--set", "distributed.fsdp.enabled=true", "--set", "eval.every=0", "--set", "warm_start.steps=3"]


def torchrun_train(run_dir: Path, steps: int, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run(
        [*argv, "-m", "gym", "train", "configs/cp_grpo_tiny.yaml", "--steps", str(steps), "--run-dir", str(run_dir)]
        + SETTINGS
        + list(extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        check=False,
    )


def test_two_ranks_train_resume_and_export(tmp_path):
    run = tmp_path / "run"
    first = torchrun_train(run, 2)
    assert first.returncode == 0, first.stderr[-4000:]
    newest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert {"__0_0.distcp", "__1_0.distcp", "digests.json"} <= {p.name for p in newest.iterdir()}
    assert json.loads((run / "summary.json").read_text())["steps"] == 2

    again = torchrun_train(run, 3, "--resume")
    assert again.returncode == 0, again.stderr[-4000:]
    assert "resumed from" in again.stderr and "step 2" in again.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["resumed"] is True

    out = tmp_path / "hf"
    exported = gym("export", str(run), str(out))  # the run directory's own config.json is the training config
    assert exported.returncode == 0, exported.stderr[-3000:]
    from transformers import AutoModelForCausalLM

    import policies.modeling  # noqa: F401  registers the RDEP policy

    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.isfinite(model(input_ids=ids).logits).all()


@pytest.mark.parametrize(
    "config_json", ['{"model_type": "qwen2", "hidden_size": "wide"}', '{"model_type": "no-such-arch"}', "[1, 2]"]
)
def test_export_of_a_directory_that_holds_no_readable_model_is_one_line(tmp_path, config_json):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(config_json)
    done = gym("export", str(model), str(tmp_path / "out"))
    assert done.returncode == 5, done.stderr[-2000:]
    one_line(done, 5, str(model))
    assert not (tmp_path / "out").exists()
