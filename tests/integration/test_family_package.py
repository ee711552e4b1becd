"""A task family package installed with pip adds a kind of task with no edit inside this repository.

The example package (examples/gym-family-example: the ``letters`` family, registered under the entry-point group
``code_rl_gym.task_families``, and an environment ``example_letters`` over it) is installed editable into a fresh
venv that sees this interpreter's packages (tests/install_support.py); the venv's python runs the checkout's gym
(``PYTHONPATH``): its rows load by format and by detection, an episode of the reference earns 1.0 and of a wrong
answer 0.0 in real workspaces, and the bundles replay identically. Uninstalled, the format is unknown again.

The family's own settings (``families: {letters: {case, max_answer_chars}}``, checked by its `LettersSettings`):
an environment's reach its episodes and bundles, and a bad value is one line naming ``letters.case``; `gym grade`
and the sandbox service's ``/v1/grade`` grade its rows by its family, with its settings (``--family-settings``,
``grade.families``): an uppercase answer passes by default and fails under ``case: exact``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.install_support import ROOT, install_editable, make_venv, run_checkout
from tests.sandbox_serve_support import CONFIG, sandbox_service

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


SOLUTIONS = [
    {"task_id": "banana", "completion": "aaabnn"},
    {"task_id": "gym", "completion": "G M Y"},  # right letters, uppercase and spaced
    {"task_id": "sandbox", "completion": "sandbox"},  # not sorted
]


def graded(venv, tmp_path, *extra: str):
    (tmp_path / "solutions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in SOLUTIONS))
    done = gym(venv, "grade", "--tasks", str(TASKS), "--solutions", "solutions.jsonl", "--json", "out.json", *extra,
               cwd=tmp_path)  # fmt: skip
    report = json.loads((tmp_path / "out.json").read_text()) if done.returncode == 0 else None
    return done, report


def test_gym_grade_grades_the_plugins_rows_by_its_family_and_settings(venv, tmp_path):
    done, report = graded(venv, tmp_path)  # the format recognised from the rows
    assert done.returncode == 0, done.stderr[-2000:]
    assert {t["task_id"]: t["passed"] for t in report["tasks"]} == {"banana": True, "gym": True, "sandbox": False}
    assert "passed 2/3 graded" in done.stdout
    (tmp_path / "exact.yaml").write_text("letters: {case: exact}\n")
    done, report = graded(venv, tmp_path, "--format", "letters", "--family-settings", "exact.yaml")
    assert done.returncode == 0 and {t["task_id"]: t["passed"] for t in report["tasks"]}["gym"] is False
    for text, words in (
        ("letters: {case: loud}\n", "letters.case"),
        ("letters: {max_answer_chars: 0}\n", "letters.max_answer_chars"),
        ("letters: {colour: red}\n", "letters.colour"),
        ("shapes: {}\n", "'shapes' is no installed task family; task families with settings: letters"),
    ):
        (tmp_path / "bad.yaml").write_text(text)
        done, _ = graded(venv, tmp_path, "--family-settings", "bad.yaml")
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_an_environments_family_settings_are_checked_and_reach_its_bundles(venv, tmp_path):
    bad = gym(venv, "rollout", "example_letters", "--episodes", "1", "--policy", "scripted:reference", "--out", "bad",
              "--set", "families.letters.case=loud", cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "families" in bad.stderr and "letters.case" in bad.stderr, bad.stderr[-2000:]
    done = gym(venv, "rollout", "example_letters", "--episodes", "4", "--policy", "scripted:reference", "--out", "exact",
               "--set", "families.letters.case=exact", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "exact" / "summary.json").read_text())["mean_reward"] == 1.0
    bundle = json.loads(next((tmp_path / "exact" / "bundles").glob("*.json")).read_text())
    assert bundle["families"] == {"letters": {"case": "exact"}}
    replayed = gym(venv, "replay", "exact/bundles", cwd=tmp_path)
    assert replayed.returncode == 0 and "4/4 bundles replayed identically" in replayed.stdout + replayed.stderr
    (tmp_path / "tampered").mkdir()  # a bundle whose section its family's model refuses is not a bundle
    (tmp_path / "tampered" / "b.json").write_text(json.dumps(bundle | {"families": {"letters": {"case": "loud"}}}))
    refused = gym(venv, "replay", "tampered", cwd=tmp_path)
    assert refused.returncode == 5 and "not a replay bundle: families" in refused.stderr, refused.stderr[-2000:]
    assert "letters.case" in refused.stderr and "Traceback" not in refused.stderr


def test_v1_grade_grades_the_plugins_rows_with_its_settings(venv, tmp_path):
    config = CONFIG | {"grade": {**CONFIG["grade"], "families": {"letters": {"case": "exact"}}}}
    with sandbox_service(tmp_path, config, python=venv) as service:

        def grade(body) -> tuple[int, dict]:
            status, answer, _ = service.call("POST", "/v1/grade", body)
            return status, answer

        status, answer = grade({"row": {"id": "w", "word": "banana"}, "answer": "aaabnn"})
        assert status == 200 and answer["passed"] and answer["family"] == "letters" and answer["format"] == "letters"
        status, answer = grade({"row": {"id": "w", "word": "banana"}, "format": "letters", "answer": "AAABNN"})
        assert status == 200 and answer["reward"] == 0.0 and not answer["masked"]  # case: exact
        status, answer = grade({"row": {"id": "w", "word": "Banana"}, "format": "letters", "answer": "x"})
        assert status == 422 and "word" in answer["detail"][0]["msg"]
        status, answer = grade({"row": {"id": "w", "word": "banana"}, "format": "shapes", "answer": "x"})
        assert status == 422 and "letters" in answer["detail"][0]["msg"]  # the known formats, the plugin's among them
    bad = CONFIG | {"grade": {**CONFIG["grade"], "families": {"letters": {"case": "loud"}}}}
    with pytest.raises(RuntimeError, match="letters.case"), sandbox_service(tmp_path, bad, python=venv):
        pass
