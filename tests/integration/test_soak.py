"""The soak on real workspaces: a short clean run through the CLI, and proof that it sees deaths and leaks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.labels import Labels
from sandbox.soak import SoakOptions, soak

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 20 s with other suites on the two cores
def test_short_soak_is_clean(tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym",
            "soak",
            "--workspaces",
            "2",
            "--calls",
            "320",
            "--minutes",
            "4",
            "--seed",
            "3",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    trouble = {key: report[key] for key in ("infra_examples", "death_examples", "unexpected_examples", "leaked")}
    assert report["calls"] >= 320, report
    assert (report["infra_errors"], report["runner_deaths"], report["leaked_containers"], report["unexpected"]) == (
        0,
        0,
        0,
        0,
    ), trouble
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["workspaces_used"] >= 4  # workspaces were turned over
    assert report["calls_per_s"] > 0 and report["seconds"] > 0
    assert {"cat_small", "unread_python", "syntax_error", "timeout", "output_over", "write_file"} <= set(
        report["by_kind"]
    )
    assert report["by_kind"]["timeout"] == {"timeout": report["by_kind"]["timeout"]["timeout"]}
    assert "calls_per_s" in proc.stdout and "soak" in proc.stderr


def test_soak_counts_a_runner_death_and_a_leaked_container():
    """The test itself force-removes the second workspace's container mid-soak and leaves one labelled
    container of this process behind: both must show, and the soak must fail."""
    config = SandboxConfig()
    client = docker.APIClient(version="auto")
    sabotaged: list[str] = []
    stray: list[str] = []

    async def sabotage(ws, ordinal: int) -> None:
        if ordinal == 2:
            sabotaged.append(ws.id)
            await trio.to_thread.run_sync(lambda: client.remove_container(ws.id, force=True))
            labels = Labels.for_this_process(60, role="soak-test")
            created = await trio.to_thread.run_sync(
                lambda: client.create_container(config.image, command=["true"], labels=labels.as_dict())
            )
            stray.append(created["Id"])

    try:
        report = trio.run(soak, config, SoakOptions(workspaces=2, seconds=120, calls=60, seed=5), sabotage)
    finally:
        for container_id in stray:
            client.remove_container(container_id, force=True)
        client.close()
    assert report.runner_deaths == 1, report.death_examples
    assert report.death_examples[0]["workspace"] == sabotaged[0][:12]
    assert report.infra_errors >= 1 and report.infra_examples[0]["workspace"] == sabotaged[0][:12]
    assert report.leaked == stray and report.leaked_containers == 1
    assert report.exit_code == 1
    assert report.unexpected == 0, report.unexpected_examples
