"""Config files through the CLI (sandbox/config_file.py): `train` reads TOML as it reads YAML, and an invalid
field is one line naming the file and the dotted path. Real `python -m gym` subprocesses; no Docker: each run
stops at the run-directory check or at validation, before any policy, workspace or container."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.config_support import TRAIN_TOML

ROOT = Path(__file__).resolve().parents[2]


def gym(*args: str) -> subprocess.CompletedProcess[str]:
    # 120 s bounds a run on a loaded 2-core machine (train imports the trainer)
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_train_reads_a_toml_config_past_validation(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = tmp_path / "run.toml"
    config.write_text(TRAIN_TOML.replace('run_dir = "runs/x"', f'run_dir = "{blocker / "run"}"'))
    done = gym("train", str(config), "--steps", "3")
    # validated, then the run directory check (before the policy is built) refuses the path: exit 6
    assert done.returncode == 6 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.startswith("gym: error: ") and str(blocker) in done.stderr


def test_train_toml_typo_in_a_union_is_one_line_with_the_dotted_path(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(
        TRAIN_TOML.replace('environment = "configs/cp_smoke.yaml"\n', "")
        + '\n[environment]\nname = "e"\n[environment.task_pool]\ntype = "jsonl"\npth = "x.jsonl"\n'
    )
    done = gym("train", str(config))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{config}: environment.task_pool.pth: Extra inputs are not permitted" in done.stderr
    assert "mixture" not in done.stderr and "jsonl.pth" not in done.stderr
