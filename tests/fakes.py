"""Deterministic in-memory fakes of the sandbox, pool, grader and policy engine, for tests without Docker.

``MemoryWorkspace`` stands in for a sandbox workspace (files in a dict, commands answered from a
table); ``FakePool`` hands them out and counts; ``FakeGrader`` passes a program iff it is the task's
reference; ``TurnsEngine``, ``GarbageEngine`` and ``FailingEngine`` are scripted policy engines.
``make_env`` builds an environment on the shipped CodeContests samples for them. Tests import
these from here, never from another test module.
"""

from __future__ import annotations

import functools
import posixpath
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.format.message import Message, ToolCall
from gym.format.tokenizer import load_tokenizer
from gym.policy_client import EngineError
from gym.rollout import collect_async
from gym.tools import Toolbox
from policies.sampling import Completion, SamplingParams
from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import DirEntry, ExecRequest, ExecResult, FileResult, ListDirResult, ReadFileResult
from tasks.result import TaskResult, TestResult, summarise
from tasks.submission import program

SAMPLES = Path(__file__).resolve().parents[1] / "tasks" / "samples"


class MemoryWorkspace:
    """Files in a dict under /workspace; ``exec`` answers from ``replies`` (argv tuple -> result) or exits 0."""

    def __init__(self, replies: dict[tuple[str, ...], ExecResult] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.replies = replies or {}
        self.requests: list[ExecRequest] = []

    @staticmethod
    def _path(path: str) -> str | None:
        full = posixpath.normpath(posixpath.join("/workspace", path))
        return full if full == "/workspace" or full.startswith("/workspace/") else None

    async def exec(self, request: ExecRequest) -> ExecResult:
        self.requests.append(request)
        if self._path(request.cwd) is None:
            return ExecResult(failure=FailureKind.SANDBOX_DENIED, detail=f"{request.cwd} outside the allowlist")
        return self.replies.get(tuple(request.argv), ExecResult(exit_code=0))

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> ReadFileResult:
        full = self._path(path)
        if full is None:
            return ReadFileResult(failure=FailureKind.SANDBOX_DENIED, detail=f"{path} outside the allowlist")
        if full not in self.files:
            return ReadFileResult(failure=FailureKind.TOOL_ERROR, detail=f"{full}: No such file or directory")
        data = self.files[full]
        truncated = len(data) > max_bytes
        return ReadFileResult(
            data=data[:max_bytes],
            truncated=truncated,
            failure=FailureKind.OUTPUT_TRUNCATED if truncated else FailureKind.OK,
        )

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> FileResult:
        full = self._path(path)
        if full is None:
            return FileResult(failure=FailureKind.SANDBOX_DENIED, detail=f"{path} outside the allowlist")
        self.files[full] = data
        return FileResult()

    async def list_dir(self, path: str = ".") -> ListDirResult:
        full = self._path(path)
        if full is None:
            return ListDirResult(failure=FailureKind.SANDBOX_DENIED, detail=f"{path} outside the allowlist")
        names = sorted(p[len(full) + 1 :] for p in self.files if p.startswith(full + "/"))
        return ListDirResult(
            entries=[DirEntry(name=n, kind="file", size=len(self.files[f"{full}/{n}"])) for n in names]
        )


def call(name: str, namespace: str = "functions", **arguments) -> ToolCall:
    return ToolCall(namespace=namespace, name=name, arguments=arguments, raw="{}")


def run(box: Toolbox, ws: MemoryWorkspace, tool_call: ToolCall):
    return trio.run(box.call, ws, tool_call)


@functools.cache
def tokenizer():
    return load_tokenizer("bpe")


def make_env(**overrides) -> Environment:
    data = {
        "name": "unit",
        "task_pool": {
            "type": "jsonl",
            "path": str(SAMPLES / "codecontests.jsonl"),
            "format": "codecontests",
            "solutions": str(SAMPLES / "codecontests.solutions.jsonl"),
        },
        **overrides,
    }
    return Environment(EnvironmentConfig.from_dict(data), tokenizer())


class FakePool:
    """Hands out MemoryWorkspaces; counts acquisitions, releases and the most held at once."""

    def __init__(self, replies: dict | None = None) -> None:
        self.replies = replies
        self.acquired = self.released = self.held = self.max_held = 0

    @asynccontextmanager
    async def acquire(self, owner: str = "", keys: frozenset[str] | None = None):
        self.acquired += 1
        self.held += 1
        self.max_held = max(self.max_held, self.held)
        try:
            await trio.sleep(0)
            yield MemoryWorkspace(self.replies)
        finally:
            self.held -= 1
            self.released += 1


class FakeGrader:
    """Passes a program iff it is the task's reference; asserts the episode workspace is released first."""

    def __init__(self, env: Environment, pool: FakePool, infra: bool = False) -> None:
        self.references = env.reference_programs()
        self.pool, self.infra = pool, infra
        self.graded: list[str] = []

    async def grade(self, task, submission) -> TaskResult:
        assert self.pool.held == 0 or self.pool.max_held > 1, "grading must wait for the workspace's release"
        source = program(task, submission)
        self.graded.append(source)
        verdict = (
            Verdict.INFRA_ERROR
            if self.infra
            else (Verdict.PASSED if source == self.references[task.task_id] else Verdict.WRONG_ANSWER)
        )
        return summarise(task.task_id, [TestResult(index=i, verdict=verdict) for i in range(len(task.tests))])


class TurnsEngine:
    """Samples the given turns in order (the last one again when they run out); version += step each call."""

    def __init__(self, env: Environment, turns: list[list[Message]], version: int = 0, step: int = 0) -> None:
        self.env, self.turns, self.version, self.step, self.calls = env, turns, version, step, 0

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        turn = self.turns[min(self.calls, len(self.turns) - 1)]
        ids = self.env.harmony.render_completion(turn)[: params.max_tokens]
        version = self.version + self.step * self.calls
        self.calls += 1
        return [
            Completion(
                token_ids=ids,
                logprobs=[-0.5] * len(ids),
                raw_logprobs=[-0.5] * len(ids),
                finish_reason="stop",
                weights_version=version,
            )
        ]


class GarbageEngine:
    """Samples plain text with no Harmony structure."""

    def __init__(self, env: Environment) -> None:
        self.ids = env.tokenizer.encode("<|call|> I am not Harmony")

    async def generate(self, prompts, params):
        ids = self.ids[: params.max_tokens]
        return [
            Completion(
                token_ids=ids,
                logprobs=[-1.0] * len(ids),
                raw_logprobs=[-1.0] * len(ids),
                finish_reason="length",
                weights_version=0,
            )
        ]


class FailingEngine:
    async def generate(self, prompts, params):
        raise EngineError("http://policy: connection refused")


def codecontests_env() -> Environment:
    """The shipped CodeContests samples with their reference solutions, three episodes at a time."""
    pool = {
        "type": "jsonl",
        "path": str(SAMPLES / "codecontests.jsonl"),
        "format": "codecontests",
        "solutions": str(SAMPLES / "codecontests.solutions.jsonl"),
    }
    return make_env(task_pool={"type": "mixture", "seed": 3, "sources": [{"weight": 1, "pool": pool}]}, concurrency=3)


def run_workers(env, engine, groups, group_size, seed=0, **options):
    """Rollout workers on the fake pool and grader: (trajectories, workers, pool)."""
    pool = FakePool()
    grader = FakeGrader(env, pool)

    async def main():
        return await collect_async(env, engine, pool, groups, group_size, seed, grader=grader, **options)

    trajectories, workers = trio.run(main)
    return trajectories, workers, pool
