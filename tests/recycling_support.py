"""What the recycling tests share: a one-container pool that recycles, and what a candidate sees of a container."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from sandbox.config import SandboxConfig
from sandbox.pool import WorkspacePool
from tasks.grader import Grader, GraderConfig
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Limits, StdinTest, Task

FINGERPRINT = r"""
import json, os
def tree(root):
    rows = []
    for directory, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            rows.append([path, oct(st.st_mode), st.st_uid])
    return rows
def xattrs(path):
    try:
        return sorted(os.listxattr(path))
    except OSError as exc:
        return exc.errno
seen = {}
for root in ["/workspace", "/tmp", "/dev/shm", "/dev/mqueue"]:
    st = os.stat(root)
    seen[root] = [oct(st.st_mode), st.st_uid, xattrs(root), tree(root)]
seen["sysv"] = {kind: open("/proc/sysvipc/" + kind).read().splitlines()[1:] for kind in ("shm", "msg", "sem")}
procs, servers = [], 0
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            argv = [b"gone"]
        if len(argv) > 3 and argv[3].startswith(b"# gym-fork-server"):
            servers += 1  # the server, and at a container's start its one probe of a fresh interpreter
        else:
            procs.append(repr(argv[:3]))
seen["processes"] = sorted(procs)
seen["a fork server"] = servers > 0
print(json.dumps(seen))
"""

# How many zombies a candidate sees in /proc.
ZOMBIE_COUNT = """
import os
zombies = 0
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            zombies += open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            pass
print(zombies)
"""


class RecordingPool(WorkspacePool):
    """A pool that records, on the host, which container each acquire got and the keys it named."""

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.handed: list[tuple[str, frozenset[str] | None]] = []

    @asynccontextmanager
    async def acquire(self, owner="", artifacts_dir=None, keys=None):
        async with super().acquire(owner, artifacts_dir, keys) as ws:
            self.handed.append((ws.id, keys))
            yield ws


def one_container(**pool) -> SandboxConfig:
    return SandboxConfig.model_validate({"pool": {"size": 1, "recycle_uses": 32, **pool}, "episode": {"wall_s": 600.0}})


TASK = Task(
    task_id="times-seven",
    source_format="codecontests",
    kind="stdin",
    prompt="print n * 7",
    tests=tuple(StdinTest(input=f"{n}\n", output=f"{n * 7}\n") for n in range(1, 7)),
    limits=Limits(time_s=2.0),
)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def grade_in_one_container(*completions: str) -> tuple[list[TaskResult], dict]:
    """TASK graded for each completion in turn, in a one-container pool that recycles: the results and its stats."""

    async def main():
        async with WorkspacePool(one_container()) as pool:
            await pool.wait_ready(60)
            grader = Grader(pool, GraderConfig(concurrency=1))
            results = []
            for completion in completions:
                submission = Submission(task_id=TASK.task_id, completion=fenced(completion))
                results.append(await grader.grade(TASK, submission))
            return results, pool.stats()

    return trio.run(main)


def grade_in_turn(config: SandboxConfig, pairs: list[tuple[Task, str]], unkeyed: int = 0):
    """Each ``(task, program)`` graded in turn, then ``unkeyed`` acquires without keys (what an episode's tools
    take): the verdicts, what each acquire got, the pool's stats."""

    async def main():
        async with RecordingPool(config) as pool:
            await pool.wait_ready(60)
            grader = Grader(pool, GraderConfig(concurrency=1))
            verdicts = []
            for t, code in pairs:
                result = await grader.grade(t, Submission(task_id=t.task_id, completion=fenced(code)))
                verdicts.append([r.verdict for r in result.tests])
            for n in range(unkeyed):
                async with pool.acquire(f"episode-{n}"):
                    pass
            return verdicts, pool.handed, pool.stats()

    return trio.run(main)
