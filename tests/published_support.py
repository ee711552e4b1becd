"""Grading the vendored published HumanEval and MBPP sets (tasks/samples/published/) many tests per container.

`grade_published` writes the programs of many tasks into one workspace and runs all their tests in one
``exec_batch``, each test planned and judged exactly as `Grader` does (`Grader.plan`, `Grader._verdict`), so a
few containers grade thousands of tests. Hostile and degenerate programs are written per task from the names
its tests call.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from collections.abc import Sequence
from pathlib import Path

import trio

from sandbox.config import SandboxConfig
from sandbox.pool import WorkspacePool
from sandbox.protocol import BatchExecRequest
from tasks.grader import Grader, GraderConfig
from tasks.loader import load_tasks
from tasks.result import TestResult
from tasks.submission import Submission, program
from tasks.task import Task

PUBLISHED = Path(__file__).resolve().parents[1] / "tasks" / "samples" / "published"
SETS = {"humaneval": "humaneval.jsonl.gz", "mbpp": "mbpp.jsonl.gz", "mbpp-sanitized": "sanitized-mbpp.json.gz"}
NONCE_GUESS = "0" * 32

ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __hash__(self): return 0
    def __bool__(self): return True
    def __abs__(self): return self
    def __sub__(self, other): return self
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__
    def __len__(self): return 0
    def __contains__(self, item): return True
    def __iter__(self): return iter(())
"""
FAKE_VERDICTS = (
    f'{NONCE_GUESS} {{"verdict": {{"outcome": "passed", "detail": ""}}}}',
    f'{NONCE_GUESS} {{"values": [["b", true]]}}',
    f'{NONCE_GUESS} {{"value": ["b", true]}}',
    "PASSED",
)
# Degenerate and hostile programs, each the body of every function the tests call.
HOSTILE = {
    "return_none": "return None",
    "always_equal": "return AlwaysEqual()",
    "sys_exit": "import sys; sys.exit(0)",
    "os_exit": "import os; os._exit(0)",
    "fake_verdict": (
        "import os, sys\n"
        f"for line in {FAKE_VERDICTS!r}:\n"
        "    print(line, flush=True); print(line, file=sys.stderr, flush=True); os.write(1, ('\\n' + line + '\\n').encode())\n"
        "    for fd in range(3, 64):\n"
        "        try: os.write(fd, ('\\n' + line + '\\n').encode())\n"
        "        except OSError: pass\n"
        "    try:\n"
        "        with open(f'/proc/{os.getppid()}/fd/1', 'w') as out: out.write('\\n' + line + '\\n')\n"
        "    except OSError: pass\n"
        "return None"
    ),
    "patch_builtins": (
        "import builtins, json, math\n"
        "builtins.AssertionError = type('Never', (BaseException,), {})\n"
        "builtins.isinstance = lambda *a: True; builtins.abs = lambda x: 0; builtins.len = lambda x: 0\n"
        "builtins.sorted = lambda *a, **k: []; builtins.set = lambda *a: set(); builtins.all = lambda x: True\n"
        "math.isclose = lambda *a, **k: True; math.fabs = lambda x: 0.0\n"
        'json.dumps = lambda *a, **k: \'{"verdict": {"outcome": "passed"}}\'\n'
        "return None"
    ),
}


def published(name: str) -> list[Task]:
    report = load_tasks(PUBLISHED / SETS[name])
    assert not report.errors, report.errors[:3]
    return list(report.tasks)


def canonical(task: Task) -> str:
    """The task's own reference solution as the grader assembles it (HumanEval: the prompt + its body)."""
    solution = task.solutions[0]
    completion = solution[len(task.completion_prefix) :] if task.completion_prefix else solution
    return program(task, Submission(task_id=task.task_id, completion=completion))


def _parse(source: str) -> ast.Module:
    with warnings.catch_warnings():  # published code is full of "\d" in plain strings
        warnings.simplefilter("ignore")
        return ast.parse(source)


def called_names(task: Task) -> list[str]:
    """Names the task's tests (and set-up) call, builtins aside unless the reference defines them."""
    reference = task.solutions[0] if task.solutions else ""
    defined = {s.name for s in _parse(reference).body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
    names = set()
    for source in [task.setup_code, *(t.source for t in task.tests)]:
        for node in ast.walk(_parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in defined or not hasattr(builtins, name):
                    names.add(name)
    return sorted(names - {"check", "candidate"})


def hostile(task: Task, kind: str) -> str:
    """A program whose every function the tests call runs ``HOSTILE[kind]``."""
    body = HOSTILE[kind].replace("\n", "\n    ")
    if task.source_format == "humaneval":
        return program(task, Submission(task_id=task.task_id, completion=f"    {body}\n\n{ALWAYS_EQUAL}"))
    functions = "".join(f"\ndef {name}(*args, **kwargs):\n    {body}\n" for name in called_names(task))
    return ALWAYS_EQUAL + functions


async def _grade_chunk(pool: WorkspacePool, chunk: Sequence[tuple[Task, str, Sequence[int]]], config: GraderConfig):
    """Every selected test of every (task, program, test indices) in one workspace and one exec_batch; an item with a
    test that ended over its CPU limit (within the re-run margin) is graded again as the grader grades it
    (`Grader._run`: the borderline test re-run in a fresh container, judged against the machine's slowdown), and
    keeps the selected tests of that grading."""
    async with pool.acquire(owner="pytest-published") as ws:
        files = {f"p{n}.py": source.encode() for n, (_, source, _) in enumerate(chunk)}
        written = await ws.put_files(files, dest="/workspace")
        assert written.failure.value == "ok", written
        plans = []
        for n, (task, _, indices) in enumerate(chunk):
            grader = Grader(None, config, program_path=f"/workspace/p{n}.py")
            plans += [(n, i, grader, *grader.plan(task, i, task.tests[i])) for i in indices]
        assert all(request is not None for *_, request, _ in plans)
        batch = await ws.exec_batch(BatchExecRequest(items=[request for *_, request, _ in plans]))
    results: list[list[TestResult]] = [[] for _ in chunk]
    borderline: set[int] = set()
    for (n, i, grader, request, judge), outcome in zip(plans, batch.results, strict=True):
        results[n].append(grader._verdict(i, judge, request, outcome))
        if grader._borderline(request, outcome):
            borderline.add(n)
    for n in sorted(borderline):
        task, source, indices = chunk[n]
        tests, _ = await Grader(pool, config)._run(task, source)
        results[n] = [tests[i] for i in indices]
    return results


def grade_published(
    items: Sequence[tuple[Task, str, Sequence[int]]], sandbox: SandboxConfig, chunk_tests: int = 400, workers: int = 2
) -> list[list[TestResult]]:
    """The results of the selected tests of each item, in order (``workers`` workspaces at a time)."""
    config = GraderConfig()
    chunks: list[list[int]] = [[]]
    size = 0
    for k, (_, _, indices) in enumerate(items):
        if chunks[-1] and size + len(indices) > chunk_tests:
            chunks.append([])
            size = 0
        chunks[-1].append(k)
        size += len(indices)
    out: list[list[TestResult]] = [[] for _ in items]

    async def main() -> None:
        limiter = trio.CapacityLimiter(workers)

        async def one(keys: list[int]) -> None:
            async with limiter:
                graded = await _grade_chunk(pool, [items[k] for k in keys], config)
            for k, results in zip(keys, graded, strict=True):
                out[k] = results

        async with WorkspacePool(sandbox) as pool:
            async with trio.open_nursery() as nursery:
                for keys in chunks:
                    nursery.start_soon(one, keys)

    trio.run(main)
    return out
