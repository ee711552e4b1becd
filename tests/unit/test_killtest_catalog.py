"""The kill-test catalog as data: shape, programs that parse, selection, tool-step archives, the CLI listing."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sandbox.killtest.attack import GROUPS, Attack, Program, ToolStep
from sandbox.killtest.catalog import CATALOG, UnknownAttack, select
from sandbox.killtest.judge import parse_report
from sandbox.killtest.suite import BASH_PRELUDE, PRELUDE, argv_of

ROOT = Path(__file__).resolve().parents[2]
FACTS = {"attack": "a", "gateway_host": "172.17.0.1", "gateway_port": "9", "canary_name": "kt_x"}
PROGRAMS = [
    (a.name, stage, p)
    for a in CATALOG
    for stage, p in (("program", a.program), ("after", a.after), ("fresh", a.fresh))
    if p
]


def test_catalog_has_every_group_and_at_least_forty_unique_attacks():
    names = [a.name for a in CATALOG]
    assert len(names) >= 40 and len(set(names)) == len(names)
    by_group = {g: [a for a in CATALOG if a.group == g] for g in GROUPS}
    assert all(len(attacks) >= 2 for attacks in by_group.values()), {g: len(a) for g, a in by_group.items()}


@pytest.mark.parametrize("name,stage,program", PROGRAMS, ids=[f"{n}-{s}" for n, s, _ in PROGRAMS])
def test_every_program_parses_and_its_env_templates_resolve(name, stage, program):
    argv = argv_of(program)
    if program.lang == "python":
        compile(argv[2], f"<{name}:{stage}>", "exec")
        assert argv[2].startswith(PRELUDE)
    else:
        assert argv[2].startswith(BASH_PRELUDE)
        checked = subprocess.run(["bash", "-n", "-c", argv[2]], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
    for value in program.env.values():
        value.format(**FACTS)  # KeyError names an unknown fact


def test_weakenings_name_the_attacks_that_depend_on_them():
    weak = {
        k: {a.name for a in CATALOG if k in a.breaks_without} for k in ("cpu", "network", "pids", "rootfs", "seccomp")
    }
    assert weak["cpu"] == {"cpu_hog"}
    assert weak["network"] == {"tcp_outside", "tcp_gateway", "udp_dns", "metadata_address", "bash_dev_tcp"}
    assert weak["pids"] == {"fork_bomb_shell", "fork_bomb_python", "thread_bomb"}
    assert weak["rootfs"] == {"write_root", "planted_file"}
    assert {"ptrace_sibling", "process_vm_sibling", "unshare", "io_uring"} <= weak["seccomp"]
    # Defended by capabilities or uid as well: must hold even without seccomp.
    assert not weak["seccomp"] & {"mount", "mknod_char", "clock_settime", "ptrace_runner", "process_vm_runner"}


def test_bombs_and_hogs_carry_a_neighbour_probe():
    probed = {a.name for a in CATALOG if a.neighbour == "probe"}
    assert {"fork_bomb_shell", "fork_bomb_python", "cpu_hog"} <= probed


def test_bash_report_line_is_json_the_host_parses():
    out = subprocess.run(["bash", "-c", BASH_PRELUDE + 'report denied "a \\"quoted\\" \\\\ path"'], capture_output=True)
    assert parse_report(out.stdout) == {"observed": "denied", "evidence": 'a "quoted" \\ path'}


def test_select_by_name_group_and_unknown():
    assert [a.name for a in select(["mount", "tcp_outside"])] == ["tcp_outside", "mount"]  # catalog order
    assert {a.group for a in select(["network"])} == {"network"}
    assert select(None) == CATALOG and select([]) == CATALOG
    with pytest.raises(UnknownAttack, match="nope"):
        select(["mount", "nope"])


def test_an_attack_must_do_something():
    with pytest.raises(ValueError, match="neither a program nor tool steps"):
        Attack(name="empty", group="kernel", goal="nothing")
    with pytest.raises(ValueError):
        Attack(name="Bad-Name", group="kernel", goal="x", steps=(ToolStep(op="list_dir", path="/"),))
    program = Program(lang="bash", source="true", expected=("ok",))
    assert Attack(name="one", group="kernel", goal="x", program=program).expected == "ok"


@pytest.mark.parametrize(
    "kind,tar_type", [("file", tarfile.REGTYPE), ("symlink", tarfile.SYMTYPE), ("hardlink", tarfile.LNKTYPE)]
)
def test_tool_step_archive_holds_the_described_member(kind, tar_type):
    step = ToolStep(op="put_archive", path=".", member="m", member_type=kind, linkname="/etc/passwd")
    with tarfile.open(fileobj=io.BytesIO(step.archive())) as tar:
        (member,) = tar.getmembers()
    assert member.name == "m" and member.type == tar_type
    assert member.linkname == ("" if kind == "file" else "/etc/passwd")


def test_cli_lists_the_catalog_and_refuses_unknown_names():
    listing = subprocess.run(
        [sys.executable, "-m", "gym", "killtest", "--list"], cwd=ROOT, capture_output=True, text=True
    )
    assert listing.returncode == 0 and f"{len(CATALOG)} attacks" in listing.stdout
    unknown = subprocess.run(
        [sys.executable, "-m", "gym", "killtest", "--only", "nope"], cwd=ROOT, capture_output=True, text=True
    )
    assert (
        unknown.returncode == 2
        and unknown.stderr == "gym: error: unknown attack or group: nope — see `python -m gym killtest --list`\n"
    )
