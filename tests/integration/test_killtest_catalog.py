"""The whole kill-test catalog against the real engine and the hardened defaults: everything contained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.killtest.catalog import CATALOG

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_whole_catalog_is_contained_and_the_posture_matches(tmp_path):
    out = tmp_path / "killtest.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gym", "killtest", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    data = json.loads(out.read_text())
    not_contained = {
        a["name"]: (a["verdict"], a["observed"], a["evidence"]) for a in data["attacks"] if a["verdict"] != "contained"
    }
    assert not_contained == {}
    assert data["posture"] == "ok", data["posture"]
    assert all(check["passed"] for check in data["checks"]), data["checks"]
    assert [a["name"] for a in data["attacks"]] == [a.name for a in CATALOG]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for attack in CATALOG:
        assert attack.name in proc.stdout
    assert f"{len(CATALOG)} attacks: {len(CATALOG)} contained, 0 escaped, 0 error" in proc.stdout
    # Every attack was checked from the host, not only judged by its own report.
    for row in data["attacks"]:
        names = {c["name"] for c in row["checks"]}
        assert {"removed", "daemon", "host_files", "host_secret"} <= names, row["name"]
        if row["name"] in ("fork_bomb_shell", "fork_bomb_python", "cpu_hog"):
            assert "neighbour_latency" in names
        if row["name"] == "cpu_hog":
            assert "cpu_usage" in names
