"""Filesystem: writes outside the workspace fail, and the file tools never leave the allowlist.

Programs attack the filesystem directly; ``ToolStep``s attack the file tools
(``..``, absolute paths, symlinks, hardlinks, archives, a swap race). The
host also checks that the container's root filesystem layer is unchanged
(``docker diff``) and that the same paths on the host are untouched.
"""

from __future__ import annotations

from sandbox.failure import FailureKind
from sandbox.killtest.attack import Attack, Program, ToolStep

OK_OR_DENIED = (FailureKind.OK, FailureKind.SANDBOX_DENIED)
ROOTFS = frozenset({"rootfs"})

# Tries to create each path; "refused" when every write failed.
_WRITE_ALL = """
def write_all(paths, data="killtest\\n"):
    results = {}
    contents = paths if isinstance(paths, dict) else dict.fromkeys(paths, data)
    for path, text in contents.items():
        try:
            with open(path, "w") as handle:
                handle.write(text)
            results[path] = "ok"
        except OSError as exc:
            results[path] = errname(exc.errno)
    written = [p for p, outcome in results.items() if outcome == "ok"]
    report("written: " + ", ".join(written) if written else "refused", ", ".join("%s=%s" % kv for kv in results.items()))
"""

ROOT_TARGETS = (
    "/var/tmp/kt_root",
    "/run/lock/kt_root",
    "/etc/kt_root",
    "/usr/local/bin/kt_root",
    "/kt_root",
)


def _fs(name: str, goal: str, source: str, expected: tuple[str, ...] = ("refused",), **fields) -> Attack:
    program = Program(lang=fields.pop("lang", "python"), source=source, expected=expected)
    return Attack(name=name, group="filesystem", goal=goal, program=program, **fields)


def _steps(*specs: tuple) -> tuple[ToolStep, ...]:
    """``(op, path)`` or ``(op, path, member, member_type, linkname)`` -> denied-expecting steps."""
    keys = ("op", "path", "member", "member_type", "linkname")
    return tuple(ToolStep(**dict(zip(keys, spec))) for spec in specs)


ATTACKS = (
    _fs(
        "write_root",
        "write into the read-only root filesystem (world-writable /var/tmp, /run/lock, and root-owned dirs)",
        _WRITE_ALL + f"write_all({ROOT_TARGETS!r})\n",
        targets=ROOT_TARGETS,
        breaks_without=ROOTFS,
    ),
    _fs(
        "write_site_packages",
        "drop a module into every system import directory",
        _WRITE_ALL
        + """
import site
dirs = [d for d in sys.path + site.getsitepackages() + ["/usr/local/lib/python3/dist-packages"]
        if d.startswith("/usr") and os.path.isdir(d)]
write_all(sorted({os.path.join(d, "kt_injected.py") for d in dirs}))
""",
        targets=("/usr/lib/python3/dist-packages/kt_injected.py",),
    ),
    Attack(
        name="pth_injection",
        group="filesystem",
        goal="sitecustomize/usercustomize/.pth injection into system and user site dirs, seen by later interpreters",
        program=Program(
            lang="python",
            source=_WRITE_ALL
            + """
import site, sysconfig
payload = "import os; open('/workspace/.kt_pth_ran', 'w').close()\\n"
user_site = site.getusersitepackages()
os.makedirs(user_site, exist_ok=True)
with open(os.path.join(user_site, "kt.pth"), "w") as handle:  # inside the workspace: allowed, but dies with it
    handle.write(payload)
system = {sysconfig.get_paths()["stdlib"], "/usr/lib/python3/dist-packages", "/usr/local/lib/python3/dist-packages"}
system.update(d for d in sys.path if d.startswith("/usr") and os.path.isdir(d))
write_all(sorted(os.path.join(d, f) for d in system for f in ("sitecustomize.py", "usercustomize.py", "kt.pth")),
          data=payload)
""",
            expected=("refused",),
        ),
        fresh=Program(
            lang="python",
            source="""
import site, subprocess
subprocess.run(["python3", "-c", "pass"])
leftovers = [p for p in ("/workspace/.kt_pth_ran", os.path.join(site.getusersitepackages(), "kt.pth"))
             if os.path.exists(p)]
leftovers += [m for m in ("sitecustomize", "usercustomize") if m in sys.modules and "kt" in repr(sys.modules[m])]
report("present: " + ", ".join(leftovers) if leftovers else "absent", "a fresh workspace's interpreters load nothing planted")
""",
            expected=("absent",),
        ),
        targets=("/usr/lib/python3/dist-packages/sitecustomize.py",),
    ),
    Attack(
        name="path_dotdot",
        group="filesystem",
        goal="../ paths out of the workspace through every tool",
        steps=_steps(
            ("exec_cwd", "../etc"),
            ("exec_cwd", "../../../.."),
            ("read_file", "../etc/passwd"),
            ("read_file", "sub/../../etc/shadow"),
            ("write_file", "../tmp/kt_dotdot"),
            ("list_dir", ".."),
            ("put_archive", ".", "../kt_dotdot", "file"),
            ("put_archive", ".", "a/../../kt_dotdot", "file"),
            ("get_archive", "../etc"),
        ),
        targets=("/tmp/kt_dotdot", "/kt_dotdot"),
    ),
    Attack(
        name="path_absolute",
        group="filesystem",
        goal="absolute paths outside the allowlist through every tool",
        steps=_steps(
            ("exec_cwd", "/etc"),
            ("exec_cwd", "/"),
            ("read_file", "/etc/shadow"),
            ("read_file", "/proc/1/environ"),
            ("write_file", "/tmp/kt_absolute"),
            ("write_file", "/etc/kt_absolute"),
            ("list_dir", "/"),
            ("put_archive", "/tmp", "kt_absolute", "file"),
            ("put_archive", ".", "/tmp/kt_absolute", "file"),
            ("get_archive", "/opt/gym"),
        ),
        targets=("/tmp/kt_absolute", "/etc/kt_absolute"),
    ),
    Attack(
        name="symlink_out",
        group="filesystem",
        goal="symlinks inside the workspace that point out of it, followed by the tools",
        program=Program(
            lang="bash",
            source="""
ln -s /etc etc_link && ln -s /tmp tmp_link && ln -s ../../etc/passwd passwd_link && ln -s /tmp/kt_symlink leak \\
  && mkdir -p d && ln -s ../../.. d/up && report planted "links: etc_link tmp_link passwd_link leak d/up"
""",
            expected=("planted",),
        ),
        steps=_steps(
            ("exec_cwd", "etc_link"),
            ("exec_cwd", "d/up"),
            ("read_file", "passwd_link"),
            ("read_file", "etc_link/passwd"),
            ("write_file", "tmp_link/kt_symlink"),
            ("write_file", "leak"),
            ("list_dir", "d/up"),
            ("get_archive", "etc_link"),
            ("put_archive", "tmp_link", "kt_symlink", "file"),
            ("put_archive", ".", "kt_link", "symlink", "/etc"),
        ),
        after=Program(
            lang="bash",
            source="""
if [ -e /tmp/kt_symlink ]; then r=present; else r=absent; fi
report "$r" "/tmp/kt_symlink after the tools ran"
""",
            expected=("absent",),
        ),
        targets=("/tmp/kt_symlink",),
    ),
    Attack(
        name="hardlink_out",
        group="filesystem",
        goal="hardlink files from outside into the workspace (and via an archive member)",
        program=Program(
            lang="python",
            source="""
open("/tmp/kt_hard", "w").close()
results = {
    "link /etc/passwd": attempt(os.link, "/etc/passwd", "/workspace/passwd_hard"),
    "link the runner": attempt(os.link, "/opt/gym/sandbox/runner/__main__.py", "/workspace/runner_hard"),
    "link /tmp file": attempt(os.link, "/tmp/kt_hard", "/workspace/tmp_hard"),
}
denied(results)
""",
            expected=("denied",),
        ),
        steps=_steps(
            ("put_archive", ".", "kt_hard", "hardlink", "/etc/passwd"),
            ("put_archive", ".", "kt_hard2", "hardlink", "../etc/passwd"),
        )
        + (ToolStep(op="read_file", path="passwd_hard", expect=(FailureKind.TOOL_ERROR,)),),
        targets=("/workspace/passwd_hard",),
    ),
    Attack(
        name="symlink_swap_race",
        group="filesystem",
        goal="swap a file for a symlink out of the workspace while the file tools write it",
        program=Program(
            lang="python",
            source="""
import time
open("/workspace/race", "w").close()
if os.fork() == 0:
    os.setsid()
    while True:  # the racer: flip /workspace/race between a file and a link to /tmp/kt_race
        try:
            os.symlink("/tmp/kt_race", "/workspace/race.new")
            os.replace("/workspace/race.new", "/workspace/race")
            open("/workspace/race.new", "w").close()
            os.replace("/workspace/race.new", "/workspace/race")
        except OSError:
            pass
time.sleep(0.3)
report("planted", "racer started")
""",
            expected=("planted",),
        ),
        steps=tuple(
            ToolStep(op=op, path="race", expect=OK_OR_DENIED)
            for op in ("write_file", "write_file", "read_file", "write_file")
        ),
        after=Program(
            lang="bash",
            source="""
if [ -e /tmp/kt_race ]; then r=present; else r=absent; fi
report "$r" "/tmp/kt_race $r; race is $(stat -c %F /workspace/race)"
""",
            expected=("absent",),
        ),
        targets=("/tmp/kt_race",),
    ),
    Attack(
        name="archive_bomb",
        group="filesystem",
        goal="sparse files (no disk used) that make get_archive, the host's copy-out, build gigabytes in the runner",
        program=Program(
            lang="bash",
            source="""
mkdir -p /workspace/repo && for i in 1 2 3 4 5 6 7 8; do truncate -s 250M /workspace/repo/f$i || exit 1; done
report planted "8 sparse files of 250 MiB: $(du -sh /workspace/repo | cut -f1) on disk"
""",
            expected=("planted",),
        ),
        steps=(
            ToolStep(op="get_archive", path="repo", expect=(FailureKind.TOOL_ERROR, FailureKind.OUTPUT_TRUNCATED)),
            ToolStep(op="list_dir", path="repo", expect=(FailureKind.OK,)),  # the runner is still there
        ),
    ),
    Attack(
        name="archive_memory",
        group="filesystem",
        goal="fill every tmpfs (memory) and leave a 60 MiB tree, so the runner's copy-out runs out of memory",
        program=Program(
            lang="bash",
            source="""
mkdir -p /workspace/repo && head -c 60M /dev/urandom > /workspace/repo/data || exit 1
head -c 250M /dev/zero > /workspace/pad; head -c 64M /dev/zero > /tmp/pad; head -c 16M /dev/zero > /dev/shm/pad
report planted "$(df --output=target,used -h /workspace /tmp /dev/shm | tail -n +2 | tr -s ' \\n' ' ')"
""",
            expected=("planted",),
            timeout_s=30,
        ),
        steps=(
            ToolStep(op="get_archive", path="repo", expect=(FailureKind.OK, FailureKind.TOOL_ERROR)),
            ToolStep(op="list_dir", path="repo", expect=(FailureKind.OK,)),  # the runner is still there
        ),
    ),
    _fs(
        "proc_sys_write",
        "write kernel and cgroup knobs through /proc and /sys (pids.max, hostname, oom_score_adj)",
        _WRITE_ALL
        + """
write_all({"/sys/fs/cgroup/pids/pids.max": "max", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "-1",
           "/sys/fs/cgroup/pids.max": "max", "/proc/sys/kernel/hostname": "workspace",
           "/proc/sys/vm/overcommit_memory": "1", "/proc/self/oom_score_adj": "-1000", "/proc/1/oom_score_adj": "1000"})
""",
    ),
)
