"""`grade`'s unreadable inputs are one ``gym: error:`` line with exit 5, as in `rollout` and `train`
(docs/cli.md); missing flags are argparse's usage error and a bad ``--sandbox-config`` is exit 2 before
any task loads. Real runs of ``python -m gym grade`` in a subprocess; none reaches Docker.
"""

from __future__ import annotations

import gzip
import os

import pytest

from tests.cli_support import ROOT, one_line
from tests.cli_support import gym as run_gym

TASKS = str(ROOT / "tasks/samples/taco.jsonl")
SOLUTIONS = str(ROOT / "tasks/samples/taco.solutions.jsonl")


def unreadable(tmp_path, kind: str):
    path = tmp_path / kind
    if kind == "binary.jsonl":
        path.write_bytes(bytes(range(128, 256)) * 8)
    elif kind == "fake.jsonl.gz":
        path.write_text('{"question": "not compressed"}\n')
    elif kind == "truncated.jsonl.gz":
        whole = gzip.compress(b'{"question": "x"}\n' * 500)
        path.write_bytes(whole[: len(whole) // 2])
    elif kind == "random.parquet":
        path.write_bytes(os.urandom(4096))
    return path  # "missing.jsonl": not written


UNREADABLE = [
    ("binary.jsonl", "not UTF-8 text"),
    ("fake.jsonl.gz", "not a readable gzip file"),
    ("truncated.jsonl.gz", "not a readable gzip file"),
    ("missing.jsonl", "no such file or directory"),
]


@pytest.mark.parametrize(
    ("which", "kind", "named"),
    [("tasks", *case) for case in [*UNREADABLE, ("random.parquet", "not a readable parquet file")]]
    + [("solutions", *case) for case in UNREADABLE],  # solutions are JSON Lines only
)
def test_an_unreadable_tasks_or_solutions_file_is_exit_5_naming_it(tmp_path, which, kind, named):
    bad = str(unreadable(tmp_path, kind))
    files = ["--tasks", bad, "--solutions", SOLUTIONS] if which == "tasks" else ["--tasks", TASKS, "--solutions", bad]
    done = run_gym("--log-level", "WARNING", "grade", *files)
    one_line(done, 5, bad, named, "tasks/loader.py")


def test_tasks_and_solutions_are_required_by_the_parser():
    done = run_gym("grade")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    usage = done.stderr.split("error:")[0]
    assert "--tasks FILE" in usage and "[--tasks FILE]" not in usage and "[--solutions FILE]" not in usage
    assert "the following arguments are required: --tasks, --solutions" in done.stderr


def test_a_missing_sandbox_config_is_exit_2_before_the_tasks_load(tmp_path):
    missing = tmp_path / "nope.yaml"
    tasks = str(tmp_path / "no-tasks.jsonl")
    done = run_gym("grade", "--tasks", tasks, "--solutions", SOLUTIONS, "--sandbox-config", str(missing))
    one_line(done, 2, str(missing), "sandbox/config.py")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("shapes: {size: 3}\n", "'shapes' is no installed task family; task families with settings: none"),
        ("cp: {}\n", "'cp' takes no settings here"),
        ("- letters\n", "a mapping of task family names to their settings, not a list"),
    ],
)
def test_family_settings_naming_no_family_with_settings_are_exit_2_before_the_tasks_load(tmp_path, text, named):
    settings = tmp_path / "families.yaml"
    settings.write_text(text)
    tasks = str(tmp_path / "no-tasks.jsonl")  # missing: the settings are refused first
    done = run_gym("grade", "--tasks", tasks, "--solutions", SOLUTIONS, "--family-settings", str(settings))
    one_line(done, 2, str(settings), named)


def test_the_swe_mode_reports_the_same_way(tmp_path):
    bad = str(unreadable(tmp_path, "binary.jsonl"))
    one_line(run_gym("grade", "--swe", "--tasks", bad, "--solutions", "gold"), 5, bad, "not UTF-8 text")
    missing = str(tmp_path / "nope.yaml")
    done = run_gym("grade", "--swe", "--tasks", bad, "--solutions", "gold", "--sandbox-config", missing)
    one_line(done, 2, missing)
