"""An environment package installed with pip is listed and runs by name; uninstalled, it is gone.

The example package (examples/gym-env-example, one environment ``example_strings`` registered under
the entry-point group ``code_rl_gym.environments``) is installed editable into a fresh venv that sees
this interpreter's packages (tests/install_support.py: offline, ``--no-deps --no-build-isolation``);
the venv's python runs the checkout's gym (``PYTHONPATH``) from another directory, so the package's
task files are found through the package, not the working directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_support import one_line
from tests.install_support import ROOT, install_editable, make_venv, pip, run_checkout

EXAMPLE = ROOT / "examples" / "gym-env-example"
NAME, DISTRIBUTION = "example_strings", "gym-env-example"
TASKS = ["example/caesar-shift", "example/palindromes", "example/reverse-words", "example/run-length"]

pytestmark = pytest.mark.slow


def install(python: Path, cwd: Path) -> None:
    install_editable(python, EXAMPLE, cwd)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The python of a fresh venv with the example package installed editable."""
    base = tmp_path_factory.mktemp("env_package")
    python = make_venv(base / "venv")
    install(python, base)
    return python


run = run_checkout


def listed(python: Path, cwd: Path) -> dict[str, dict]:
    done = run(python, "envs", "list", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return {row["name"]: row for row in json.loads(done.stdout)}


def test_envs_list_shows_the_installed_environment_beside_the_shipped_ones(venv, tmp_path):
    rows = listed(venv, tmp_path)
    assert rows[NAME] == {
        "name": NAME,
        "distribution": DISTRIBUTION,
        "version": "0.1.0",
        "shipped": False,
        "source": "gym_env_example:environment",
        "description": "Four stdin/stdout string tasks (reverse words, run-length encoding, a Caesar shift, palindromes).",
        "problem": None,
    }
    assert rows["cp_smoke"]["distribution"] == "code-rl-gym" and rows["cp_smoke"]["shipped"]
    table = run(venv, "envs", "list", cwd=tmp_path)
    assert any(line.split()[:3] == [NAME, DISTRIBUTION, "0.1.0"] for line in table.stdout.splitlines())


def test_the_example_packages_own_tests_pass(venv):
    done = run(venv, "-q", cwd=EXAMPLE, module="pytest")  # its own pyproject.toml configures pytest
    assert done.returncode == 0 and " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-3000:]


@pytest.mark.docker
def test_a_rollout_by_name_runs_in_the_sandbox_and_scores_the_references_1_and_nothing_0(venv, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "reference"
    done = run(
        venv, "rollout", NAME, "--episodes", "4", "--policy", "scripted:reference", "--out", str(out), cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes"], summary["masked"], summary["mean_reward"], summary["reward_1"]) == (4, 0, 1.0, 4)
    resolved = json.loads((out / "environment.json").read_text())
    assert resolved["name"] == NAME
    assert resolved["task_pool"]["path"] == str(EXAMPLE / "src" / "gym_env_example" / "tasks.jsonl")
    tasks = [json.loads(line)["task_id"] for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(tasks) == TASKS
    replayed = run(venv, "replay", *map(str, sorted((out / "bundles").glob("*.json"))), cwd=elsewhere)
    assert replayed.returncode == 0 and "4/4 bundles replayed identically" in replayed.stdout, replayed.stderr[-3000:]

    empty = tmp_path / "empty"
    done = run(
        venv, "rollout", NAME, "--episodes", "4", "--policy", "scripted:empty", "--out", str(empty), cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((empty / "summary.json").read_text())
    assert (summary["masked"], summary["mean_reward"], summary["reward_1"]) == (0, 0.0, 0)


def test_uninstalling_the_package_removes_it_from_the_list_and_its_name(venv, tmp_path):
    pip(venv, "uninstall", "-y", DISTRIBUTION, cwd=tmp_path)
    try:
        rows = listed(venv, tmp_path)
        assert NAME not in rows and "cp_smoke" in rows
        done = run(venv, "rollout", NAME, "--episodes", "1", "--out", str(tmp_path / "out"), cwd=tmp_path)
        one_line(done, 2, f"'{NAME}'", "envs list")
        assert not (tmp_path / "out").exists()
    finally:  # the other tests of this module share the venv
        install(venv, tmp_path)
    assert NAME in listed(venv, tmp_path)
