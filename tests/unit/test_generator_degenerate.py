"""Every generated task rejects the degenerate programs (`tasks/degenerate.py`): constants, echo, each example's
output, the reference with an integer parameter off by one; judged on the rows as the grader reads them, with
the grader's comparison. Tasks whose drawn tests did not are strengthened (hidden tests added from the same
stream) or dropped from the draw; the fast paths the generator judges with are checked against the programs'
sources in a host interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tasks import degenerate
from tasks.formats import codecontests
from tasks.generator import (
    HIDDEN_TESTS,
    PUBLIC_TESTS,
    GeneratorError,
    TaskSpec,
    catalogue,
    degenerates,
    draw,
    drawn_tests,
    render,
)
from tasks.grader import GraderConfig
from tests.unit.generated_programs import crashed, outputs

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = ("statement", "input")
# Off-by-one programs equal to the reference on every input the statement allows (a_i in 0..99): no test can
# tell them apart, so these tasks are dropped. K = 99: "greater than 100" is as never as "greater than 99".
# L = 0: "-1 <= x" holds for every x as "0 <= x" does.
DROPPED = {"count_greater/L1/K=99", "count_greater/L2/K=99"} | {f"count_greater/L3/L=0,R={r}" for r in range(5, 45, 5)}
# The outside round's finds (issue 41): constant YES passed them at seed 0 in the default `tasks generate` files.
FOUND_OUTSIDE = ("divisible/L1/D=64", "divisible/L1/D=70", "divisible/L1/D=78")
MAIN_JOB = ["sum_plus", "linear", "scale", "divisible", "replace_char", "count_greater", "remove_char", "count_char"]


def _graded(spec: TaskSpec, params_in: str, seed: int = 0) -> list[tuple[str, str]]:
    """The task's tests as the grader reads them: the row parsed by the loader's CodeContests reader."""
    task = codecontests.parse(0, render(spec, seed, params_in).row)
    return [(t.input, t.output) for t in task.tests]


def _survivors(spec: TaskSpec, tests: list[tuple[str, str]], params_in: str) -> list[str]:
    programs = degenerates(spec, tests, params_in)
    names = {p.name for p in programs}
    required = {f"constant {v!r}" for v in {o for _, o in tests} | {"YES\n", "NO\n", "0\n", "1\n", "-1\n", ""}}
    required |= {"echo"} | {f"{k}{d:+d}" for k, v in spec.params if isinstance(v, int) for d in (-1, 1)}
    assert names == required, (spec.task_id, names ^ required)
    return degenerate.survivors(programs, tests)


def test_the_check_judges_with_the_graders_comparison():
    assert degenerate.TOLERANCE == GraderConfig().tolerance
    yes = degenerate.constant("YES\n")
    assert degenerate.passes(yes, ("12\n", "YES")) and degenerate.passes(yes, ("", " YES \n\n"))
    assert not degenerate.passes(yes, ("12\n", "yes\n")) and not degenerate.passes(yes, ("", "YES\nYES\n"))
    assert degenerate.passes(degenerate.constant("7\n"), ("", "007\n"))  # integer tokens compare as digits
    crash = degenerate.Degenerate("crash", "raise SystemExit(1)\n", lambda _: None)
    assert degenerate.survivors([crash, yes], [("1\n", "YES\n")]) == ["constant 'YES\\n'"]


def test_every_task_of_the_catalogue_rejects_every_degenerate_program_or_is_dropped():
    weak_as_drawn, strengthened, dropped = set(), Counter(), set()
    for spec in catalogue():
        task = render(spec, 0)
        if drawn_tests(spec, 0, tries=0).survivors:
            weak_as_drawn.add(spec.task_id)
        for params_in in LAYOUTS:
            tests = _graded(spec, params_in)
            assert len(tests) == PUBLIC_TESTS + HIDDEN_TESTS + task.added
            alive = _survivors(spec, tests, params_in)
            assert alive == [s for s in alive if s in task.survivors], (spec.task_id, params_in, alive)
        if task.survivors:
            dropped.add(spec.task_id)
        elif task.added:
            strengthened[spec.template] += 1
    assert dropped == DROPPED
    # before this check (the tests as first drawn) these were weak; each one is now strengthened or dropped
    assert len(weak_as_drawn) == sum(strengthened.values()) + len(dropped) == 205
    assert set(FOUND_OUTSIDE) <= weak_as_drawn
    assert set(strengthened) == {"count_greater", "divisible"}, strengthened


def test_the_outside_rounds_constant_yes_passed_the_tests_as_first_drawn_and_fails_now():
    by_id = {spec.task_id: spec for spec in catalogue([1], ["divisible"])}
    for task_id in FOUND_OUTSIDE:
        spec = by_id[task_id]
        first = drawn_tests(spec, 0, tries=0)
        assert first.added == 0 and "constant 'YES\\n'" in first.survivors
        tests = _graded(spec, "statement")
        as_drawn = tests[: PUBLIC_TESTS + HIDDEN_TESTS]
        assert all(o.split() == ["YES"] for _, o in as_drawn)  # every test a multiple of D: YES passed them all
        assert not _survivors(spec, tests, "statement") and render(spec, 0).added == 1
        assert tests[-1][1] == "NO\n"  # the added test


def test_the_draw_passes_over_dropped_tasks_and_keeps_every_other_in_place():
    specs = [s for s in catalogue([1, 2, 3], ["count_greater"]) if s.split == "train"]
    usable = [s for s in specs if s.task_id not in DROPPED]
    drawn = draw("train", len(usable), seed=0, templates=["count_greater"])
    assert sorted(s.task_id for s in drawn) == sorted(s.task_id for s in usable)
    with pytest.raises(GeneratorError, match=rf"{len(usable)} exist \({len(specs) - len(usable)} more dropped as weak"):
        draw("train", len(usable) + 1, seed=0, templates=["count_greater"])


def test_the_main_jobs_tasks_are_unchanged_but_ten_strengthened_ones():
    """configs/cp_grpo_tiny.yaml and its held-out evaluation: level 2, parameters in the input, seed 0."""
    strengthened = {}
    for split, count in (("train", 168), ("heldout", 32)):
        specs = draw(split, count, seed=0, levels=[2], templates=MAIN_JOB)
        assert [s.template for s in specs[:8]] == MAIN_JOB  # round-robin, one task of each template a step
        for spec in specs:
            task = render(spec, 0, "input")
            as_drawn = drawn_tests(spec, 0, tries=0)  # the tests this task had before the check: kept, in order
            assert drawn_tests(spec, 0).hidden[:HIDDEN_TESTS] == as_drawn.hidden and as_drawn.added == 0
            assert not task.survivors and len(task.row["private_tests"]["input"]) == HIDDEN_TESTS + task.added
            if task.added:
                strengthened[spec.task_id] = (split, task.added)
    # each passed "K+1" (x > K + 1) as first drawn: no planted value landed on K + 1
    assert strengthened == {f"count_greater/L2/K={k}": ("train", 1) for k in (98, 79, 69, 86, 39, 81, 64, 60, 96, 83)}


def test_the_fast_paths_print_what_the_programs_print_in_a_host_interpreter():
    """The generator judges degenerate programs by their fast paths; their sources, run, print the same (or both
    fail), on a seeded sample: the middle task of every (template, level) bucket, and every dropped task and
    outside find, in both layouts; the references pass their added tests too."""
    buckets: dict[tuple[str, int], list[TaskSpec]] = {}
    for spec in catalogue():
        buckets.setdefault((spec.template, spec.level), []).append(spec)
    picked = [specs[len(specs) // 2] for specs in buckets.values()]
    picked += [s for s in catalogue() if s.task_id in DROPPED | set(FOUND_OUTSIDE)]
    picked += [s for s in draw("train", 168, seed=0, levels=[2], templates=MAIN_JOB) if render(s, 0).added][:4]
    jobs, expected = [], []
    for spec in picked:
        for params_in in LAYOUTS:
            tests = _graded(spec, params_in)
            inputs = [i for i, _ in tests]
            for program in degenerates(spec, tests, params_in):
                jobs.append((program.source, inputs))
                expected.append((spec.task_id, params_in, program.name, [program.run(i) for i in inputs]))
            jobs.append((render(spec, 0, params_in).reference, inputs))
            expected.append((spec.task_id, params_in, "reference", [o for _, o in tests]))
    got = [[None if crashed(out) else out for out in outs] for outs in outputs(jobs)]
    assert len(got) == len(expected) > 1000
    differ = [(task_id, layout, name) for (task_id, layout, name, want), out in zip(expected, got) if out != want]
    assert not differ, differ[:10]
    assert any(None in want for *_, want in expected)  # some off-by-one program crashes (kth_largest, K+1)


def test_a_template_with_letter_parameters_has_no_off_by_one_programs():
    spec = catalogue([2], ["replace_char"])[0]
    names = {p.name for p in degenerates(spec, _graded(spec, "input"), "input")}
    assert "echo" in names and all(n == "echo" or n.startswith("constant ") for n in names)


def test_tasks_generate_reports_strengthened_and_dropped_tasks(tmp_path):
    command = [sys.executable, "-m", "gym", "tasks", "generate", "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "strengthened 61 train, 14 heldout (hidden tests added), dropped 3 train, 0 heldout" in proc.stdout
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 1000 and not {r["name"] for r in rows} & DROPPED
    assert sum(len(r["private_tests"]["input"]) > HIDDEN_TESTS for r in rows) == 61
