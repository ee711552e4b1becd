"""The verdict rule, observations, host-check helpers and the report, on hand-made results (no Docker)."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from sandbox.failure import FailureKind
from sandbox.killtest.attack import Attack, Program, ToolStep
from sandbox.killtest.cpu_account import CpuAccount, cpu_limit, usage_bound
from sandbox.killtest.hostcheck import (
    file_states,
    files_unchanged,
    layer_paths,
    rootfs_unchanged,
    zombies_of,
)
from sandbox.killtest.judge import Check, Observation, Verdict, bounds, canary, judge, observe, parse_report, summary
from sandbox.killtest.neighbour import NeighbourProbe
from sandbox.killtest.report import SuiteReport, table
from sandbox.protocol import ExecResult

REPORTING = Program(lang="python", source="pass", expected=("denied",))
ATTACK = Attack(name="probe", group="kernel", goal="g", program=REPORTING)


def line(observed: str, evidence: str = "e") -> bytes:
    return b"noise\nKILLTEST " + json.dumps({"observed": observed, "evidence": evidence}).encode() + b"\n"


def test_parse_report_takes_the_last_well_formed_line():
    assert parse_report(line("a") + line("b"))["observed"] == "b"
    assert parse_report(b"KILLTEST {not json}\n") is None
    assert parse_report(b'KILLTEST {"observed": 3}\n') is None
    assert parse_report(b"nothing here") is None


def test_observe_from_report_failure_processes_and_infra():
    ok = ExecResult(exit_code=0, stdout=line("denied", "all EPERM"))
    assert observe("program", REPORTING, ok, []).model_dump() == {
        "stage": "program",
        "observed": "denied",
        "expected": ("denied",),
        "evidence": "all EPERM",
    }
    killed = ExecResult(signal=9, failure=FailureKind.OOM)
    assert observe("program", REPORTING, killed, []).observed == "oom"  # no report: the classified failure
    crashed = ExecResult(exit_code=1, stderr=b"Traceback ...", failure=FailureKind.NONZERO_EXIT)
    assert observe("program", REPORTING, crashed, []).observed == "error"
    lost = ExecResult(failure=FailureKind.INFRA_ERROR, detail="runner lost")
    assert observe("program", REPORTING, lost, []).observed == "error"
    by_failure = Program(lang="bash", source="yes", expected=("output_truncated",), observe="failure")
    # The runner's classification wins even when the program claims otherwise.
    lying = ExecResult(exit_code=0, stdout=line("output_truncated"))
    assert observe("program", by_failure, lying, []).observed == "ok"
    swept = Program(lang="bash", source="x", expected=("swept",), observe="processes")
    assert observe("program", swept, ok, []).observed == "swept"
    assert observe("program", swept, ok, ["pid 9 sandbox S sleep"]).observed == "1 survived"


def test_judge_contained_escaped_and_error():
    held = Observation(stage="program", observed="denied", expected=("denied",), evidence="EPERM")
    got_through = Observation(stage="program", observed="succeeded: x", expected=("denied",), evidence="x=ok")
    broken = Observation(stage="program", observed="error", expected=("denied",), evidence="no report")
    passed, failed = Check(name="daemon", passed=True), Check(name="rootfs", passed=False, detail="/etc/x")
    assert judge(ATTACK, [held], [passed], 1.0).verdict == Verdict.CONTAINED
    escaped = judge(ATTACK, [got_through], [passed], 1.0)
    assert escaped.verdict == Verdict.ESCAPED and "x=ok" in escaped.evidence and escaped.observed == "succeeded: x"
    by_host = judge(ATTACK, [held], [failed], 1.0)
    assert by_host.verdict == Verdict.ESCAPED and "rootfs FAILED: /etc/x" in by_host.evidence
    assert judge(ATTACK, [broken, got_through], [failed], 1.0).verdict == Verdict.ERROR
    assert judge(ATTACK, [], [], 1.0, error="InfraError: engine down").verdict == Verdict.ERROR


def test_summary_folds_tool_steps():
    steps = [
        Observation(stage="tool read_file ../x", observed="sandbox_denied", expected=("sandbox_denied",)),
        Observation(stage="tool write_file ../y", observed="ok", expected=("sandbox_denied",)),
    ]
    first = Observation(stage="program", observed="planted", expected=("planted",))
    assert summary([first, *steps]) == "planted; tools 1/2 held [write_file ../y: ok]"


def test_bounds_and_canary_checks():
    program = Program(lang="bash", source="x", expected=("timeout",), timeout_s=2)
    inside = ExecResult(wall_s=2.1, stdout=b"x" * 10)
    assert bounds("p", program, inside, 100, 2.3, grace_s=2.0).passed
    assert not bounds("p", program, ExecResult(wall_s=5.0), 100, 5.0, grace_s=2.0).passed
    assert not bounds("p", program, ExecResult(wall_s=0.1, stdout=b"x" * 101), 100, 0.1, grace_s=2.0).passed
    assert canary([b"abc", b"def"], "secret").passed
    assert not canary([b"abc", b"HOME=/x secret-value"], "secret-value").passed


def test_host_file_and_layer_helpers(tmp_path):
    target = tmp_path / "t"
    before = file_states((str(target),))
    assert before == {str(target): "absent"} and files_unchanged(before, file_states((str(target),))).passed
    target.write_text("x")
    assert not files_unchanged(before, file_states((str(target),))).passed
    (tmp_path / "upper/usr/sbin").mkdir(parents=True)
    (tmp_path / "upper/usr/sbin/docker-init").write_text("")
    assert layer_paths(str(tmp_path / "upper")) == {"/usr", "/usr/sbin", "/usr/sbin/docker-init"}
    assert rootfs_unchanged({"/usr"}, {"/usr"}).passed
    changed = rootfs_unchanged({"/usr"}, {"/usr", "/var/tmp/x"})
    assert not changed.passed and "/var/tmp/x" in changed.detail


@pytest.mark.skipif(os.geteuid() != 0, reason="creating an overlay whiteout (a 0:0 character device) needs root")
def test_layer_whiteouts_are_deletions(tmp_path):
    os.mknod(tmp_path / "gone", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    assert layer_paths(str(tmp_path)) == {"/gone (deleted)"}


def test_neighbour_probe_compares_running_with_frozen_samples():
    probe = NeighbourProbe(ws=None)
    probe.frozen = [0.010, 0.012, 0.014]
    probe.running = [0.050, 0.105, 0.105]  # bound: 8 * 12 ms + 10 ms = 106 ms
    assert probe.check().passed
    probe.running = [0.107, 0.108, 0.200]
    result = probe.check()
    assert not result.passed and "bound 8x frozen + 10 ms = 106.0 ms" in result.detail
    probe.running = [0.001, 0.001]  # no verdict without samples on both sides
    result = probe.check()
    assert not result.passed and "too few samples" in result.detail


def test_cpu_limit_from_the_host_config():
    assert cpu_limit({"NanoCpus": 1_500_000_000}) == (1.5, 0.1)
    assert cpu_limit({"NanoCpus": 0, "CpuQuota": 50_000, "CpuPeriod": 200_000}) == (0.25, 0.2)
    assert cpu_limit({"NanoCpus": 0, "CpuQuota": -1, "CpuPeriod": 0}) == (None, 0.1)


def test_usage_bound_adds_the_margin_and_two_period_edges_per_stretch():
    # 1 core of 2: each edge may use half a period's quota (50 ms) faster than the average rate.
    assert usage_bound(1.0, 0.1, 2, running_s=4.0, stretches=3) == pytest.approx(4.0 * 1.05 + 6 * 0.05)
    assert usage_bound(2.0, 0.1, 2, running_s=4.0, stretches=3) == pytest.approx(8.0 * 1.05)  # all cores: no edge


def account(limit: float | None, used_s: float | None, wall_s: float) -> CpuAccount:
    acc = CpuAccount(engine=None, container_id="c")
    acc.limit, acc.cpus, acc.used_s, acc.wall_s = limit, 2, used_s, wall_s
    return acc


def test_cpu_usage_passes_within_the_limit_and_fails_beyond_it_or_without_one():
    assert account(1.0, 4.0, 4.0).check().passed
    over = account(1.0, 4.6, 4.0).check()  # bound 4.2 + 2 edges of 50 ms = 4.3
    assert not over.passed and "bound 4.30" in over.detail
    # Frozen time is not running time: 4 s running in 4 stretches is a bound of 4.2 + 8 edges = 4.6, 4.5 s is 5.13.
    assert not account(1.0, 4.7, 5.0).check(frozen_s=1.0, thaws=3).passed
    assert account(1.0, 4.7, 5.0).check(frozen_s=0.5, thaws=3).passed
    unlimited = account(None, 7.2, 4.0).check()
    assert not unlimited.passed and "no CPU limit" in unlimited.detail
    lost = account(1.0, None, 4.0)
    lost.ended = "no last reading (NotFound)"
    assert not lost.check().passed


def test_report_ok_table_and_json(tmp_path):
    contained = judge(ATTACK, [Observation(stage="program", observed="denied", expected=("denied",))], [], 1.0)
    escaped = judge(
        ATTACK.model_copy(update={"name": "other"}),
        [Observation(stage="program", observed="ok", expected=("denied",))],
        [],
        1.0,
    )
    good = SuiteReport(attacks=[contained], posture="ok", seconds=1.0)
    assert good.ok and good.counts() == {"contained": 1, "escaped": 0, "error": 0}
    drifted = SuiteReport(attacks=[contained], posture=[{"key": "seccomp", "expected": "2", "observed": "0"}])
    assert not drifted.ok and "posture: DRIFT in 1 keys" in table(drifted)
    bad = SuiteReport(attacks=[contained, escaped], posture="ok")
    assert not bad.ok and bad.escaped == ["other"]
    assert not SuiteReport(attacks=[contained], posture="ok", checks=[Check(name="image", passed=False)]).ok
    text = table(bad)
    assert text.splitlines()[0].split() == ["attack", "group", "expected", "observed", "verdict", "evidence"]
    assert "2 attacks: 1 contained, 1 escaped, 0 error" in text and text.endswith("FAIL")
    bad.write_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["posture"] == "ok" and data["summary"]["ok"] is False
    assert [(a["name"], a["verdict"]) for a in data["attacks"]] == [("probe", "contained"), ("other", "escaped")]
    assert {"name", "expected", "observed", "verdict", "evidence"} <= set(data["attacks"][0])


def test_tool_step_label():
    assert ToolStep(op="read_file", path="../x").label == "read_file ../x"
    assert ToolStep(op="put_archive", path=".", member="m", member_type="symlink").label == "put_archive . [symlink m]"


def test_zombies_are_seen_from_the_host_though_docker_top_misses_them():
    """A zombie has left its cgroup; the survivors check finds it as an unreaped child of a listed process."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        for _ in range(200):
            found = zombies_of([os.getpid()])
            if found:
                break
            time.sleep(0.01)
        assert any(f"pid {pid} zombie" in line and "never reaped" in line for line in found), found
        assert zombies_of([]) == []
    finally:
        os.waitpid(pid, 0)
    assert not any(f"pid {pid} " in line for line in zombies_of([os.getpid()]))
