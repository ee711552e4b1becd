"""The main job learns: configs/cp_grpo_tiny.yaml in real Docker workspaces, its full 32 steps, through
``python -m gym train`` (the generated task family, real sandbox, real grader, real engine and learner).

The held-out evaluation (the job's 32 tasks, EVAL_SAMPLES samples each at the training temperature) runs before the
first step and after the last, with the same sampling seeds in both passes, so the two passes differ only by the
weights: the before pass is the control (the warm-started policy RL starts from, on exactly the episodes the after
pass samples). That an evaluation of unchanged weights repeats itself task for task is checked by
tests/integration/test_trainer_resume.py (a baseline run, ``loop.updates_per_batch: 0``, evaluated at every step).

The check, paired within this one run (no figure recorded on another machine enters it: torch picks its kernels by
CPU, and a run's numbers differ from one CPU to another): the pass rate after - before, paired by task, averaged
over the tasks, must reach HELDOUT_RISE; nothing is masked.

The training pass rate over a baseline run on the same stream (`loop.updates_per_batch: 0`: the same tasks and
sampling seeds, no update) is a figure of docs/benchmarks.md with its commands, not a check of this test: it costs
a second run of the job, and the held-out rise is the claim.

Measured (2026-11-28, the project's 2-core VM, AMD EPYC with AVX-512, the learning run and an lr-0 control side by
side beside other work, load average 9-22; `se` is the standard error of the paired mean, from the spread of the task or step
differences), seed 0 under three of torch's kernel levels (ATEN_CPU_CAPABILITY: a stand-in for another CPU) and
seeds 1 and 2 (other warm starts, tasks and sampling seeds: a trajectory as different as one CPU can make it):

| run | held-out pass@1 before -> after | held-out rise paired by task (se) | training, learning - control, steps 17-32 (se) |
| --- | --- | --- | --- |
| seed 0, avx512 (native) | 0.109 -> 0.365 | +0.256 (0.034) | +0.207 (0.023) |
| seed 0, avx2 | 0.068 -> 0.338 | +0.270 (0.037) | +0.279 (0.021) |
| seed 0, default (no SIMD) | 0.115 -> 0.385 | +0.270 (0.036) | +0.242 (0.023) |
| seed 1 | 0.182 -> 0.391 | +0.209 (0.042) | +0.143 (0.027) |
| seed 2 | 0.182 -> 0.303 | +0.121 (0.037) | +0.162 (0.019) |

Margin: HELDOUT_RISE 0.06 sits 5.7-5.8 standard errors under seed 0's rise on every kernel level (3.5 under seed
1's, 1.6 under seed 2's, the weakest seen).
The 16-step version of this test (held-out 32 x 4 samples, unpaired) failed a fresh machine at +0.047 against 0.05:
at 16 steps the rise had hardly begun on that CPU (the same seed reaches +0.256 by step 32 here), and a 128-episode
evaluation has a standard error near 0.03. A run takes 430-610 s beside other work (seed 0 native: 523 s, load
average 9-20), 950-1110 s with the default kernels.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "cp_grpo_tiny.yaml"
STEPS = 32  # the shipped job's own length
EVAL_SAMPLES = 16  # per held-out task (the shipped job: 4): 512 held-out episodes a pass
HELDOUT_RISE = 0.06
TIMEOUT_S = 2700


def start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    sets = [
        f"loop.steps={STEPS}",
        f"eval.every={STEPS}",
        f"eval.samples={EVAL_SAMPLES}",
        f"checkpoint.every={STEPS}",
        "metrics.progress=false",
        "metrics.tensorboard=false",
        *overrides,
    ]
    command = [sys.executable, "-m", "gym", "train", str(CONFIG), "--run-dir", str(run_dir)]
    for text in sets:
        command += ["--set", text]
    with (run_dir.parent / f"{run_dir.name}.log").open("w") as log:  # the child keeps its own copy of the handle
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


class Run:
    """What one finished run wrote: summary, per-step training pass rates, per-task evaluations."""

    def __init__(self, process: subprocess.Popen, run_dir: Path) -> None:
        rc = process.wait(timeout=TIMEOUT_S)
        log = (run_dir.parent / f"{run_dir.name}.log").read_text()
        assert rc == 0, f"{run_dir.name} exited {rc}:\n{log[-4000:]}"
        self.summary = json.loads((run_dir / "summary.json").read_text())
        assert self.summary["steps"] == STEPS and self.summary["masked"] == 0, self.summary
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        self.rates = [row["reward/pass_rate"] for row in rows if row["kind"] == "train"]
        evals = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines()]
        self.evals = {row["step"]: row["per_task"] for row in evals}


def paired(differences: list[float]) -> tuple[float, float]:
    """Mean of paired differences and its standard error (sample standard deviation / sqrt(n))."""
    return statistics.mean(differences), statistics.stdev(differences) / math.sqrt(len(differences))


def task_rises(before: dict[str, list[int]], after: dict[str, list[int]]) -> list[float]:
    """Per held-out task: pass rate after - before (the same tasks and sampling seeds in both passes)."""
    assert before.keys() == after.keys(), (sorted(before), sorted(after))
    return [after[task][0] / after[task][1] - before[task][0] / before[task][1] for task in sorted(before)]


@pytest.mark.timeout(TIMEOUT_S + 120)
def test_the_main_job_raises_heldout_pass1_over_the_policy_it_starts_from(tmp_path):
    run_dir = tmp_path / "learn"
    process = start(run_dir)
    try:
        learned = Run(process, run_dir)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert learned.evals.keys() == {0, STEPS} and learned.summary["weights_version"] == STEPS
    start_eval, end_eval = learned.evals[0], learned.evals[STEPS]
    heldout, heldout_se = paired(task_rises(start_eval, end_eval))
    half = STEPS // 2
    report = (
        f"held-out pass@1 ({len(start_eval)} tasks x {EVAL_SAMPLES}): "
        f"{learned.summary['heldout_pass1_before']} -> {learned.summary['heldout_pass1_after']}, paired by task "
        f"{heldout:+.3f} (se {heldout_se:.3f}); training pass rate steps 1-{half} "
        f"{statistics.mean(learned.rates[:half]):.3f}, steps {half + 1}-{STEPS} "
        f"{statistics.mean(learned.rates[half:]):.3f}; {learned.summary['wall_s']} s"
    )
    print(report)
    assert heldout >= HELDOUT_RISE, report
