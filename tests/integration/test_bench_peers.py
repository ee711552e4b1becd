"""`python -m gym bench peers` end to end on a small setting (3 calls, one 50-turn session), and a peer that cannot
run reported with its exact error.

The run: the JSON has every workload, each of the five tools is either measured in it or has an error for it (or
for its set-up); the gym, docker exec and the host must be measured here (they need nothing but this machine);
SWE-ReX and llm-sandbox are installed in venvs of their own on first use (~20 s, cached in
~/.cache/code-rl-gym/bench-venvs), then measured or named with their error. No container the run labelled is left.
Measured on the 2-core VM beside other work (load average 2-6): 31-45 s for the module with warm venvs, 53 s with
the venvs built afresh (SWE-ReX's image cached).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from gym.bench import peers
from gym.bench.peer_workloads import WORKLOADS
from tests.cli_support import gym

pytestmark = [pytest.mark.slow, pytest.mark.docker]

MISSING_IMAGE = "gym-bench-peers-missing:none"


def _labelled() -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={peers.LABEL}"], capture_output=True, text=True, check=True
    )
    return listed.stdout.split()


def test_every_tool_is_measured_in_every_workload_or_named_with_its_error(tmp_path):
    out = tmp_path / "peers.json"
    argv = ["bench", "peers", "--iterations", "3", "--sessions", "1", "--warmup", "0", "--json", str(out)]
    done = gym(*argv, timeout=600)  # first use installs the two peers (~20 s) and builds SWE-ReX's image (~10 s)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["p50_ms"]) == set(WORKLOADS) == set(figures["p95_ms"])
    errors = figures["errors"]
    for workload, row in figures["p50_ms"].items():
        assert set(row) <= set(peers.TOOLS)
        for tool in peers.TOOLS:
            failed = {workload, "setup"} & set(errors.get(tool, {}))
            assert (tool in row) != bool(failed), (workload, tool, errors.get(tool))
            assert all(errors[tool][key].strip() for key in failed)  # an error names what went wrong
            if tool in row:
                assert row[tool] > 0 and figures["ratio_vs_gym"][workload][tool] == pytest.approx(
                    row[tool] / row["gym"], rel=1e-2
                )
        assert {"gym", "docker-exec", "host"} <= set(row), errors  # these need nothing but this machine
    assert figures["setup_ms"]["gym"] > 0 and figures["setup_ms"]["host"] == 0.0
    assert figures["iterations"] == 3 and figures["sessions"] == 1
    assert figures["leaked_containers"] == 0 and _labelled() == []
    assert "p50_ms\n" in done.stdout and "  session_50 " in done.stdout  # the tables are printed too


def test_a_peer_that_cannot_start_is_reported_with_its_exact_error():
    spec = {"iterations": 1, "sessions": 1, "warmup": 0, "image": MISSING_IMAGE, "label_key": peers.LABEL}
    spec |= {"label_value": "missing-image", "label": f"{peers.LABEL}=missing-image"}
    docker_exec = peers.measure_docker_exec(spec)
    swerex = peers._driven("swe-rex", "peer_swerex.py", spec, MISSING_IMAGE)
    assert "No such image: " + MISSING_IMAGE in docker_exec["errors"]["setup"]
    assert "No such image: " + MISSING_IMAGE in swerex["errors"]["setup"], swerex  # its container never started
    assert swerex["samples_ms"] == {} and swerex["version"] == "1.4.0"
    figures = peers.figures({"docker-exec": docker_exec, "swe-rex": swerex}, _Args(), 0)
    assert all(row == {} for row in figures["p50_ms"].values()) and set(figures["errors"]) == {"docker-exec", "swe-rex"}
    assert _labelled() == []


class _Args:
    iterations = 1
    sessions = 1
