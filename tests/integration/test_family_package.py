"""A task family package installed with pip adds a kind of task with no edit inside this repository.

The example package (examples/gym-family-example: the ``letters`` family, registered under the entry-point group
``code_rl_gym.task_families``, and an environment ``example_letters`` over it) is installed editable into a fresh
venv that sees this interpreter's packages (tests/install_support.py); the venv's python runs the checkout's gym
(``PYTHONPATH``): its rows load by format and by detection, an episode of the reference earns 1.0 and of a wrong
answer 0.0 in real workspaces, and the bundles replay identically. Uninstalled, the format is unknown again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.install_support import ROOT, install_editable, make_venv, run_checkout

EXAMPLE = ROOT / "examples" / "gym-family-example"
TASKS = EXAMPLE / "src" / "gym_family_example" / "tasks.jsonl"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("family_package")
    python = make_venv(base / "venv")
    install_editable(python, EXAMPLE, base)
    return python


gym = run_checkout


def test_the_plugins_rows_load_by_name_and_by_detection(venv, tmp_path):
    named = gym(venv, "tasks", "check", str(TASKS), "--format", "letters", cwd=tmp_path)
    assert named.returncode == 0 and "format letters, 4 usable tasks, 0 rows skipped" in named.stdout, named.stderr
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "word": "Zebra"}\n{"id": "b", "word": "zebra"}\n')
    detected = gym(venv, "tasks", "check", "rows.jsonl", cwd=tmp_path)
    assert "format letters, 1 usable tasks, 1 rows skipped" in detected.stdout, detected.stderr
    assert "row 0: skipped: word: 1-40 lowercase ASCII letters" in detected.stdout


def test_an_episode_of_the_plugin_family_is_graded_and_replays(venv, tmp_path):
    summaries = {}
    for policy in ("reference", "wrong"):
        done = gym(venv, "rollout", "example_letters", "--episodes", "4", "--policy", f"scripted:{policy}",
                   "--out", policy, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        summaries[policy] = json.loads((tmp_path / policy / "summary.json").read_text())
    assert summaries["reference"]["mean_reward"] == 1.0 and summaries["reference"]["masked"] == 0
    assert summaries["wrong"]["mean_reward"] == 0.0 and summaries["wrong"]["masked"] == 0
    replayed = gym(venv, "replay", "reference/bundles", cwd=tmp_path)
    assert replayed.returncode == 0 and "4/4 bundles replayed identically" in replayed.stdout + replayed.stderr


def test_without_the_package_its_format_is_unknown(tmp_path):
    done = run_checkout(Path(sys.executable), "tasks", "check", str(TASKS), "--format", "letters", cwd=tmp_path)
    assert done.returncode != 0 and "unknown format 'letters'" in done.stdout + done.stderr
