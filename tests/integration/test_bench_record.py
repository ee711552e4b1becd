"""`bench TARGET --record DIR` on a real target: the record holds the figures the run printed, the command that
reruns it (without --record), the machine and the load, and `bench report` renders it."""

from __future__ import annotations

import json

from gym.bench import report as bench_report
from tests.cli_support import gym


def test_a_real_run_is_recorded_and_reported(tmp_path):
    done = gym("bench", "generate", "--batch", "2", "--new-tokens", "8", "--record", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = (tmp_path / "results").glob("*.json")
    data = json.loads(path.read_text())
    assert path.name == "generate.json" and data["command"] == "python -m gym bench generate --batch 2 --new-tokens 8"
    printed = dict(line.split(None, 1) for line in done.stdout.strip().splitlines())
    assert set(printed) == set(data["figures"]) and data["figures"]["new_tokens"] == int(printed["new_tokens"])
    assert data["machine"]["cores"] > 0 and data["load_average"]["before"] >= 0
    section = bench_report.render(bench_report.read_records(tmp_path / "results"))
    assert "### `python -m gym bench generate --batch 2 --new-tokens 8`" in section
