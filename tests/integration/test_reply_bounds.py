"""Replies a candidate makes as large as it can, in the real sandbox: bounded where they are produced.

Issue 41, class 1: a listing of ~250,000 files whose names are control characters (1,530 bytes of JSON
each) made a reply past the host's 256 MiB frame bound; the host dropped the stream, the episode ended
``infra_error`` and was masked. Every operation now bounds its reply (sandbox/runner/, sandbox/wire.py: MAX_DATA bytes
of data, MAX_LIST_ENTRIES entries, a last guard on the frame), so the candidate's largest reply is its
own ``output_truncated`` (or ``tool_error``), the workspace lives on, and the episode is scored.

Two layers, both against a real Docker engine:

* every operation (exec, exec_batch, read_file, list_dir, get_archive, write_file, put_archive) asked for
  the most the protocol allows, on a workspace the candidate filled as far as its budgets let it;
* the real episode loop in CP, SWE and math workspaces: a policy that makes the largest reply of every
  tool it is offered and then works the task honestly earns the reference's reward; the same attack
  that then gives up is scored 0. Neither is masked.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import trio

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.format.message import Message
from gym.rollout import collect_async
from gym.scripted import ReferencePolicy
from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind
from sandbox.pool import WorkspacePool
from sandbox.protocol import MAX_DATA, MAX_LIST_ENTRIES, BatchExecRequest
from tasks.math.problem import MathTask
from tasks.swe.instance import SweInstance
from tests.sandbox_support import in_workspace, py, sh
from tests.swe_support import TOOLZ, images, shipped

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# The SWE workspace budgets (tasks/swe/family.py SWE_BUDGETS): 262,144 inodes, 1 GiB of disk.
FLOOD_FILES = 250_000
BUDGETS = {"memory_mb": 2048, "pids": 256, "workspace_mb": 1024, "workspace_inodes": 262144, "tmp_mb": 256}
# Names of 248 bytes, 240 of them \x01: 1,490 bytes each as JSON; 250,000 of them made a 296,600,066-byte
# reply on the code before the fix (the host's bound is 268,435,456).
FLOOD = (
    "import os\n"
    "os.makedirs({dir!r}, exist_ok=True)\n"
    "stem = chr(1) * 240\n"
    "for i in range({n}):\n"
    "    open(os.path.join({dir!r}, '%s%08d' % (stem, i)), 'w').close()\n"
    "with open('big.bin', 'wb') as f:\n"
    "    f.truncate(200 << 20)\n"  # sparse: no disk, but 200 MiB to read, view or archive
    "with open('lines.txt', 'w') as f:\n"
    "    f.write('a\\n' * (8 << 20))\n"  # 16 MiB of matching lines for search
    "print('made')\n"
)


def config() -> SandboxConfig:
    return SandboxConfig.model_validate({"pool": {"size": 0}, "budgets": BUDGETS, "episode": {"wall_s": 3600.0}})


def test_every_operation_bounds_its_largest_reply_and_the_workspace_lives_on():
    async def go(ws):
        made = await ws.exec(py(FLOOD.format(dir="flood", n=FLOOD_FILES), timeout_s=300))
        assert made.failure == FailureKind.OK and made.stdout_text == "made\n", made

        listing = await ws.list_dir("flood")
        assert listing.failure == FailureKind.OUTPUT_TRUNCATED and listing.truncated, listing.detail
        assert (len(listing.entries), listing.total) == (MAX_LIST_ENTRIES, FLOOD_FILES)
        assert [e.name[-8:] for e in listing.entries[:2]] == ["00000000", "00000001"]  # the first by name
        assert f"{FLOOD_FILES} entries" in listing.detail

        read = await ws.read_file("big.bin", max_bytes=MAX_DATA)
        assert read.failure == FailureKind.OUTPUT_TRUNCATED and len(read.data) == MAX_DATA

        flood = await ws.exec(sh("cat /dev/zero", output_limit_bytes=MAX_DATA, timeout_s=60))
        assert flood.failure == FailureKind.OUTPUT_TRUNCATED and len(flood.stdout) + len(flood.stderr) <= MAX_DATA

        items = [sh("cat /dev/zero", output_limit_bytes=MAX_DATA, timeout_s=60)] * 2
        batch = await ws.exec_batch(BatchExecRequest(items=items))
        assert [r.failure for r in batch.results] == [FailureKind.OUTPUT_TRUNCATED] * 2

        with pytest.raises(ValueError, match="archive larger than"):  # the refusal the SWE diff scores
            await ws.get_archive("/workspace", max_bytes=MAX_DATA)

        # a tar whose member names are the same control characters: refused in a bounded reply
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w", format=tarfile.PAX_FORMAT) as archive:
            member = tarfile.TarInfo("../" + "\x01" * 60_000)
            archive.addfile(member, io.BytesIO(b""))
        put = await ws.put_archive(".", tar.getvalue())
        assert put.failure == FailureKind.SANDBOX_DENIED and len(put.detail) < 400_000
        written = await ws.write_file("flood/" + "\x01" * 255, b"x")
        assert written.failure == FailureKind.OK

        # a request that asks for more than the protocol allows (not one the host's models let through):
        # the runner clamps it to its own bounds
        allow = ws.config.allowlist
        raw = await ws._roundtrip(
            "read_file", {"path": "/workspace/big.bin", "max_bytes": 1 << 40, "allow": allow}, [60]
        )
        assert raw["failure"] == "output_truncated" and len(raw["data"]) == MAX_DATA * 4 // 3
        raw = await ws._roundtrip(
            "list_dir", {"path": "/workspace/flood", "max_entries": 1 << 40, "allow": allow}, [60]
        )
        assert raw["failure"] == "output_truncated" and len(raw["entries"]) == MAX_LIST_ENTRIES

        alive = await ws.exec(sh("echo alive"))
        return alive.stdout_text, ws.broken

    assert in_workspace(go, config()) == ("alive\n", None)


# ---------------------------------------------------------------- episodes


def _call(name: str, **arguments) -> list[Message]:
    return [Message.tool_call(name, arguments)]


def attack_turns(tools: tuple[str, ...], flood_dir: str) -> list[list[Message]]:
    """The largest reply of every offered tool, one call a turn."""
    turns = [_call("python", code=FLOOD.format(dir=flood_dir, n=FLOOD_FILES), cwd="/workspace", timeout=300)]
    offered = {
        "list_dir": _call("list_dir", path=flood_dir),
        "read_file": _call("read_file", path="/workspace/big.bin"),
        "view": _call("view", path="/workspace/big.bin"),
        "search": _call("search", pattern="a", path="/workspace", glob="*.txt"),
        "apply_patch": _call(
            "apply_patch", patch="--- a/big.bin\n+++ b/big.bin\n" + "@@ -1 +1 @@\n-\x01\n+\x02\n" * 50
        ),
        "bash": _call("bash", command="cat /dev/zero; ls -la /workspace/flood", cwd="/workspace", timeout=30),
    }
    turns += [turn for name, turn in offered.items() if name in tools]
    turns.append(_call("python", code="print('\\x01' * (200 << 20))", cwd="/workspace", timeout=60))
    return turns


class Attacker(ReferencePolicy):
    """Makes the largest reply of every tool it is offered, then plays ``scripted:reference`` (or gives up)."""

    def __init__(self, env: Environment, honest: bool, flood_dir: str) -> None:
        from gym.environment import task_text

        programs = env.reference_programs() if honest else {}
        text = {task_id: task_text(task) for task_id, task in env.tasks.items()}
        tools = tuple(env.config.tools.enabled)
        super().__init__(env.harmony, env.tasks, programs, text, empty=not honest, tools=tools)
        self.flood_dir = flood_dir

    def script(self, task):
        tools = ("python", "bash") if isinstance(task, MathTask) else self.tools  # math: the calculators only
        return [*attack_turns(tools, self.flood_dir), *super().script(task)]


def environment(name: str, task_id: str | None = None) -> Environment:
    config = EnvironmentConfig.from_file(ROOT / f"configs/{name}.yaml")
    update = {
        "episode": config.episode.model_copy(update={"max_turns": 16, "max_total_tokens": 200_000}),
        "tools": config.tools.model_copy(update={"output_chars": 1024, "max_timeout_s": 300}),
        "replay": config.replay.model_copy(update={"rate": 0.0, "failures": False}),
        "sandbox": config.sandbox.model_copy(
            update={
                "budgets": config.sandbox.budgets.model_copy(update=BUDGETS),
                "pool": config.sandbox.pool.model_copy(update={"size": 1}),
            }
        ),
    }
    enabled = ("python", "bash", "read_file", "write_file", "apply_patch", "list_dir", "search", "view", "submit")
    update["tools"] = update["tools"].model_copy(update={"enabled": enabled})  # math tasks get python and bash
    env = Environment(config.model_copy(update=update))
    task = env.tasks[task_id] if task_id is not None else env.sources[0][0]
    env.sources, env.tasks = [[task]] * len(env.sources), {task_id or task.task_id: task}  # every source: this task
    return env


def play(env: Environment, honest: bool, flood_dir: str):
    async def go():
        async with WorkspacePool(env.config.sandbox) as pool:
            trajectories, workers = await collect_async(env, Attacker(env, honest, flood_dir), pool, 1, 1, seed=0)
            return trajectories[0], workers.results[0]

    return trio.run(go)


def check(env: Environment, honest: bool, flood_dir: str = "/workspace/flood") -> None:
    trajectory, result = play(env, honest, flood_dir)
    failures = [record.outcome.failure for record in result.tool_calls]
    assert "infra_error" not in failures and not trajectory.masked, (trajectory.end_reason, result.tool_calls[-1])
    assert "output_truncated" in failures, failures  # the attack ran and was bounded
    expected = 1.0 if honest else 0.0
    assert trajectory.reward_breakdown["correctness"] == expected, (trajectory.end_reason, result.grading)


@pytest.mark.parametrize("honest", [True, False], ids=["then-solves", "then-gives-up"])
def test_cp_episode_is_scored_whatever_its_replies(honest):
    check(environment("cp_smoke", "nemotron/nemotron-sum-pairs"), honest)


@pytest.mark.parametrize("honest", [True, False], ids=["then-answers", "then-answers-wrong"])
def test_math_episode_is_scored_whatever_its_replies(honest):
    check(environment("math_smoke"), honest)


@pytest.fixture(scope="module")
def built() -> dict[str, SweInstance]:
    instances = shipped()
    images()
    return instances


@pytest.mark.parametrize("honest", [True, False], ids=["then-fixes", "then-floods-the-repository"])
def test_swe_episode_is_scored_whatever_its_replies(built, honest):
    env = environment("swe_smoke", TOOLZ)
    # giving up, the flood is made inside the repository: its diff cannot be taken, scored as no answer
    check(env, honest, "/workspace/flood" if honest else "/workspace/repo/flood")
