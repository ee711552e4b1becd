"""Every generated task rejects the degenerate programs of `tasks/degenerate.py` (issue 41 class 4): constants
(whole output, per case, per line; every value the tests use), echo, the reference answering every case as the
first, the reference with every parameter moved (by 1, 2, 3, doubled, halved), swapped or set to another letter,
and every parameter value of the template's two operations (and the other operation with the task's own values).
Judged on the host as the grader judges; a task whose tests as drawn let one through is strengthened (hidden tests
added) or never handed out. The outside round's finds and one program of each kind are in
tests/integration/test_attacks_generated_tasks.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tasks import degenerate
from tasks.formats import codecontests
from tasks.generator import (
    HIDDEN_TESTS,
    LETTERS,
    PUBLIC_TESTS,
    STRENGTHEN_TRIES,
    TEMPLATES,
    GeneratorError,
    TaskSpec,
    _draw,
    catalogue,
    degenerates,
    draw,
    drawn_tests,
    render,
    tasks_of,
)
from tasks.grader import GraderConfig
from tests.unit.generated_programs import crashed, outputs

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = ("statement", "input")
# Every answer of these is 0 (a_i <= 99 is never greater than 99): a constant passes whatever the tests.
DROPPED = {
    "count_greater/L1/K=99": ("constant '0\\n'", "per line after 1 '0'"),
    "count_greater/L2/K=99": ("first answer for every case", "per case '0'"),
}
# At seed 0, per (template, level): the tasks whose tests as first drawn let a program of the family through. Each
# is strengthened (hidden tests added) unless DROPPED; every other task keeps the tests it was drawn with.
WEAK_AS_DRAWN = {
    ("count_char", 1): 26,
    ("count_char", 2): 26,
    ("count_greater", 1): 75,
    ("count_greater", 2): 42,
    ("count_greater", 3): 72,
    ("divisible", 1): 99,
    ("divisible", 2): 96,
    ("divisible", 3): 108,
    ("remove_char", 1): 26,
    ("remove_char", 2): 25,
}
MAIN_JOB = ["sum_plus", "linear", "scale", "divisible", "replace_char", "count_greater", "remove_char", "count_char"]
# An output token of a generated task: a canonical integer or a word of letters. Two such tokens match under
# tasks.comparison.outputs_match exactly when they are equal, which is how the check compares the reference's
# other programs (on the drawn cases, `tasks.generator._passes`).
CANONICAL = re.compile(r"(0|-?[1-9][0-9]*|[A-Za-z]+)\Z")


def _graded(spec: TaskSpec, params_in: str, seed: int = 0) -> list[tuple[str, str]]:
    """The task's tests as the grader reads them: the row parsed by the loader's CodeContests reader."""
    task = codecontests.parse(0, render(spec, seed, params_in).row)
    return [(t.input, t.output) for t in task.tests]


def _laid(spec: TaskSpec, params_in: str, tries: int) -> list[tuple[str, str]]:
    """The task's tests as ``drawn_tests(tries=tries)`` makes them, laid out as the row lays them out."""
    from tasks.generator import _layout

    drawn = drawn_tests(spec, 0, tries)
    return [_layout(spec, cases, params_in) for cases in drawn.public + drawn.hidden]


def _survivors(spec: TaskSpec, tries: int) -> set[str]:
    """The family's survivors by the grader's comparison (`degenerate.survivors`: each program's stdout from its fast
    path, `outputs_match`) on the rows in both layouts, named as `drawn_tests` names them."""
    alive: set[str] = set()
    for params_in in LAYOUTS:
        tests = _laid(spec, params_in, tries)
        for name in degenerate.survivors(degenerates(spec, tests, params_in), tests):
            textual = params_in == "input" and name.startswith(("echo", "per line"))
            alive.add(f"{name} (parameters in the input)" if textual else name)
    return alive


def _sample() -> list[TaskSpec]:
    """The middle task of every (template, level) bucket, the dropped tasks, and the tasks of the attack tests."""
    buckets: dict[tuple[str, int], list[TaskSpec]] = {}
    for spec in catalogue():
        buckets.setdefault((spec.template, spec.level), []).append(spec)
    named = set(DROPPED) | {"divisible/L1/D=6", "divisible/L1/D=64", "count_char/L2/C=a", "count_greater/L2/K=98"}
    return [specs[len(specs) // 2] for specs in buckets.values()] + [s for s in catalogue() if s.task_id in named]


def test_the_check_judges_with_the_graders_comparison():
    assert degenerate.TOLERANCE == GraderConfig().tolerance
    yes = degenerate.constant("YES\n")
    assert degenerate.passes(yes, ("12\n", "YES")) and degenerate.passes(yes, ("", " YES \n\n"))
    assert not degenerate.passes(yes, ("12\n", "yes\n")) and not degenerate.passes(yes, ("", "YES\nYES\n"))
    assert degenerate.passes(degenerate.constant("007\n"), ("", "7\n"))  # integer tokens compare as digits
    assert not degenerate.passes(degenerate.constant("7\n"), ("", "007\n"))  # an expected 007 is text
    crash = degenerate.Degenerate("crash", lambda: "raise SystemExit(1)\n", lambda _: None)
    assert degenerate.survivors([crash, yes], [("1\n", "YES\n")]) == ["constant 'YES\\n'"]


def test_the_values_are_every_line_and_token_of_the_tests_then_the_usual_ones():
    tests = [("", "3 4\n7\n"), ("", "7\n\n")]
    assert degenerate.values(tests) == ["3 4", "7", "", "3", "4", "YES", "NO", "0", "1", "-1"]


def _meaning(spec: TaskSpec, name: str) -> object:
    """The meaning of the alternative program ``name`` of ``spec`` (the other programs: None)."""
    params, variant = dict(spec.params), spec.variant
    template = TEMPLATES[spec.template]
    if match := re.fullmatch(r"(\w+)\((.*)\)", name):
        variant = next(v for v in (template.base, template.hard) if v.name == match[1])
        values = dict(item.split("=") for item in match[2].split(","))
        return variant.meaning({k: int(v) if v.lstrip("-").isdigit() else v for k, v in values.items()})
    if match := re.fullmatch(r"([A-Z])([+-]\d|\*2|/2)", name):
        k, op = match[1], match[2]
        value = params[k] * 2 if op == "*2" else params[k] // 2 if op == "/2" else params[k] + int(op)
        return variant.meaning({**params, k: value})
    if match := re.fullmatch(r"([A-Z])=([a-z])", name):
        return variant.meaning({**params, match[1]: match[2]})
    if match := re.fullmatch(r"swap ([A-Z]),([A-Z])", name):
        a, b = match[1], match[2]
        return variant.meaning({**params, a: params[b], b: params[a]})
    return None


def test_the_family_holds_every_program_the_rule_names():
    """On a sample (the middle task of every bucket, and named tasks), in both layouts: the constants of every value,
    per case and per line, echo, the first answer for every case, and every meaning of the reference moved, set to
    another letter, swapped, of both operations' grids (the generator's ranges, before one-per-meaning) and of the
    other operation with the task's own values, each once and never the task's own."""
    for spec in _sample():
        params, template = dict(spec.params), TEMPLATES[spec.template]
        other = template.hard if spec.level < 3 else template.base
        wanted = {spec.variant.meaning(p) for p in _moved(spec)}
        for k, v in params.items():
            wanted |= {spec.variant.meaning({**params, k: c}) for c in LETTERS if isinstance(v, str)}
        for a, b in ((a, b) for a in params for b in params if a != b and type(params[a]) is type(params[b])):
            wanted.add(spec.variant.meaning({**params, a: params[b], b: params[a]}))
        for variant in (spec.variant, other):
            wanted |= {variant.meaning(p) for p in variant.params()}
        shared = {k: v for k, v in params.items() if k in other.params()[0]}
        wanted |= {other.meaning({**p, **shared}) for p in other.params()} if shared else set()
        wanted.discard(spec.variant.meaning(params))
        for params_in in LAYOUTS:
            tests = _graded(spec, params_in)
            names = [p.name for p in degenerates(spec, tests, params_in)]
            assert len(names) == len(set(names)), spec.task_id
            values = degenerate.values(tests)
            required = {f"constant {o!r}" for o in [o for _, o in tests] + [v + "\n" for v in values] + [""]}
            required |= {f"per line after {k} {v!r}" for v in values for k in (0, 1)} | {"echo"}
            if spec.level > 1:
                required |= {f"per case {v!r}" for v in values} | {"first answer for every case"}
            assert required <= set(names), (spec.task_id, required - set(names))
            meanings = [_meaning(spec, name) for name in names if name not in required]
            assert None not in meanings and len(meanings) == len(set(meanings)) == len(wanted), spec.task_id
            assert set(meanings) == wanted, spec.task_id


def test_every_task_the_generator_can_hand_out_rejects_the_whole_family():
    """Every task of the catalogue at seed 0: its rows (both layouts, read by the grader's reader) hold exactly the
    tests the check judged, their outputs are canonical tokens, and no program of the family passes them all (the
    check, `drawn_tests`), but DROPPED, which `draw` never hands out. Counted per template and level: the tasks whose
    tests as first drawn let a program through, each strengthened with hidden tests drawn on from its own stream
    (a task is strengthened or dropped exactly when its tests as drawn were weak: `drawn_tests` adds none else)."""
    strengthened, added, dropped = Counter(), Counter(), {}
    for spec in catalogue():
        drawn = drawn_tests(spec, 0)
        assert len(drawn.public) == PUBLIC_TESTS and len(drawn.hidden) == HIDDEN_TESTS + drawn.added
        rows = {params_in: _graded(spec, params_in) for params_in in LAYOUTS}
        assert all(rows[params_in] == _laid(spec, params_in, STRENGTHEN_TRIES) for params_in in LAYOUTS)
        assert all(CANONICAL.match(t) for _, output in rows["statement"] for t in output.split()), spec.task_id
        if drawn.survivors:
            dropped[spec.task_id] = drawn.survivors
        elif drawn.added:
            strengthened[(spec.template, spec.level)] += 1
            added[spec.template] += drawn.added
    assert dropped == DROPPED
    assert len(catalogue()) - len(dropped) == 4997 and sum(strengthened.values()) == 593
    weak = strengthened + Counter((spec.template, spec.level) for spec in catalogue() if spec.task_id in DROPPED)
    assert dict(weak) == WEAK_AS_DRAWN and sum(weak.values()) == 595
    assert dict(added) == {"count_char": 394, "count_greater": 287, "divisible": 1161, "remove_char": 355}


def test_the_check_agrees_with_the_graders_comparison_on_the_rows():
    """Every 40th task of the catalogue, the sample and DROPPED, on its tests as first drawn and as strengthened:
    the family judged program by program on the rows in both layouts with `degenerate.passes` (each program's
    stdout from its own run, compared by `outputs_match`) leaves the same survivors as the check (which judges the
    reference's other programs on the drawn cases); some of them non-empty."""
    specs = catalogue()[::40] + _sample()
    seen = 0
    for spec in specs:
        for tries in (0, STRENGTHEN_TRIES):
            alive = _survivors(spec, tries)
            assert alive == set(drawn_tests(spec, 0, tries).survivors), (spec.task_id, tries)
            seen += bool(alive)
    assert seen >= 20


def test_the_fast_paths_print_what_the_programs_print_in_a_host_interpreter():
    """The check judges each program by its fast path; the program's source, run, prints the same (or both fail):
    on the sample, in both layouts, every program that is not of a grid, and 12 of the grids' (seeded), on the
    task's tests; the references pass their tests too."""
    import random

    rng = random.Random(0)
    jobs, expected = [], []
    for spec in _sample():
        for params_in in LAYOUTS:
            tests = _graded(spec, params_in)
            inputs = [i for i, _ in tests]
            programs = degenerates(spec, tests, params_in)
            near = [p for p in programs if "(" not in p.name]
            grids = [p for p in programs if "(" in p.name]
            for program in near + rng.sample(grids, min(12, len(grids))):
                jobs.append((program.source, inputs))
                expected.append((spec.task_id, params_in, program.name, [program.run(i) for i in inputs]))
            jobs.append((render(spec, 0, params_in).reference, inputs))
            expected.append((spec.task_id, params_in, "reference", [o for _, o in tests]))
    got = [[None if crashed(out) else out for out in outs] for outs in outputs(jobs)]
    assert len(got) == len(expected) > 5000
    differ = [(task_id, layout, name) for (task_id, layout, name, want), out in zip(expected, got) if out != want]
    assert not differ, differ[:10]
    assert any(None in want for *_, want in expected)  # some moved program crashes (kth_largest, K+3)


def test_equal_meanings_answer_alike_on_every_input_the_statement_allows():
    """`Variant.meaning` is what keeps a program equal to the reference out of the family (else no test could
    reject it and the task would be dropped). For the one-integer templates, every program of the family that has
    the task's meaning (a moved, swapped or grid value: 185 of them, all at level 3) answers as the task does on
    every n the statement allows (1..10000); for the others, on the inputs that decide it."""
    pairs = 0
    for spec in catalogue(templates=["linear", "divisible"]):
        params, variant = dict(spec.params), spec.variant
        own = [variant.answer(n, params) for n in range(1, 10001)]
        candidates = _moved(spec) + variant.params()
        candidates += [{**params, a: params[b], b: params[a]} for a in params for b in params if a != b]
        for p in candidates:
            if p != params and variant.meaning(p) == variant.meaning(params):
                assert [variant.answer(n, p) for n in range(1, 10001)] == own, (spec.task_id, p)
                pairs += 1
    assert pairs == 185
    greater, between = TEMPLATES["count_greater"].base, TEMPLATES["count_greater"].hard
    for k in range(-3, 103):  # a count over the numbers: alike on every array when alike on every single number
        assert [greater.answer([x], {"K": k}) for x in range(100)] == [
            greater.answer([x], {"K": min(max(k, -1), 99)}) for x in range(100)
        ]
    for lo, hi in [(-3, 5), (0, 5), (50, 102), (-1, 99), (7, 3)]:
        assert between.meaning({"L": lo, "R": hi}) == between.meaning({"L": max(lo, 0), "R": min(hi, 99)})
        canonical = {"L": max(lo, 0), "R": min(hi, 99)}
        assert [between.answer([x], {"L": lo, "R": hi}) for x in range(100)] == [
            between.answer([x], canonical) for x in range(100)
        ]
    words = ["abcab", "zzz", "a", "baab", "qwerty"]
    remove_one, remove_two = TEMPLATES["remove_char"].base, TEMPLATES["remove_char"].hard
    assert remove_one.meaning({"C": "b"}) == remove_two.meaning({"C": "b", "D": "b"})
    assert [remove_one.answer(w, {"C": "b"}) for w in words] == [
        remove_two.answer(w, {"C": "b", "D": "b"}) for w in words
    ]
    kth, total = TEMPLATES["kth_largest"].base, TEMPLATES["kth_largest"].hard
    assert kth.meaning({"K": 1}) == total.meaning({"K": 1}) != total.meaning({"K": 2})
    arrays = [[3], [5, 1, 5], [0, 99, 98, 7]]
    assert [kth.answer(a, {"K": 1}) for a in arrays] == [total.answer(a, {"K": 1}) for a in arrays]
    for name in ("count_char", "replace_char", "remove_char"):  # symmetric in their two letters
        hard = TEMPLATES[name].hard
        a, b = hard.params()[0]
        assert hard.meaning({a: "a", b: "b"}) == hard.meaning({a: "b", b: "a"})
        assert [hard.answer(w, {a: "a", b: "b"}) for w in words] == [hard.answer(w, {a: "b", b: "a"}) for w in words]


def _moved(spec: TaskSpec) -> list[dict]:
    """Every integer parameter of the task moved as the family moves it."""
    params, out = dict(spec.params), []
    for k, v in params.items():
        if isinstance(v, int):
            out += [
                {**params, k: m}
                for m in [v + d for d in (-1, 1, -2, 2, -3, 3)] + [v * 2] + ([v // 2] if v % 2 == 0 else [])
            ]
    return out


def test_one_task_per_meaning_and_no_task_with_one_answer():
    """The catalogue holds each meaning once (linear_mod with A or B past M, divisible_not with E and lcm(D, E)
    both dividing, were two tasks with one meaning), and no parameter value that makes every answer one constant:
    linear_mod with M dividing A (always B mod M), divisible_not with E dividing D (always NO), the sum of the 1
    largest (the base operation)."""
    for template in TEMPLATES.values():
        for variant in (template.base, template.hard):
            meanings = [variant.meaning(p) for p in tasks_of(variant)]
            assert len(meanings) == len(set(meanings)), variant.name
    linear_mod = tasks_of(TEMPLATES["linear"].hard)
    assert all(p["A"] % p["M"] for p in linear_mod) and len(linear_mod) == 393
    assert {"A": 7, "B": 1, "M": 7} not in linear_mod and {"A": 9, "B": 8, "M": 9} not in linear_mod
    divisible_not = tasks_of(TEMPLATES["divisible"].hard)
    assert all(p["D"] % p["E"] for p in divisible_not) and len(divisible_not) == 251
    assert {"D": 4, "E": 3} in divisible_not and {"D": 4, "E": 6} not in divisible_not  # lcm(4, E) = 12 both
    assert min(p["K"] for p in tasks_of(TEMPLATES["kth_largest"].hard)) == 2
    assert len(catalogue()) == 4999


def test_the_draw_passes_over_dropped_tasks_and_keeps_every_other_in_place():
    specs = [s for s in catalogue([1, 2, 3], ["count_greater"]) if s.split == "train"]
    usable = [s for s in specs if s.task_id not in DROPPED]
    assert len(specs) - len(usable) == 2
    drawn = draw("train", len(usable), seed=0, templates=["count_greater"])
    assert sorted(s.task_id for s in drawn) == sorted(s.task_id for s in usable)
    with pytest.raises(GeneratorError, match=rf"{len(usable)} exist \(2 more dropped as weak"):
        draw("train", len(usable) + 1, seed=0, templates=["count_greater"])


def test_the_main_jobs_tasks_are_the_same_tasks_with_the_same_first_tests():
    """configs/cp_grpo_tiny.yaml (train, 168), its held-out evaluation (32; both level 2, parameters in the input,
    seed 0, MAIN_JOB) and configs/cp_generated_heldout.yaml (32, levels 1-2, seed 1, all templates): no task is
    dropped (each draw is the round robin as it was), every task keeps its public and first HIDDEN_TESTS hidden tests
    in order, and those the family found weak gained hidden tests (counted per template)."""
    pools = {
        "train": ("train", 168, 0, [2], MAIN_JOB),
        "heldout": ("heldout", 32, 0, [2], MAIN_JOB),
        "generated_heldout": ("heldout", 32, 1, [1, 2], None),
    }
    strengthened = {}
    for pool, (split, count, seed, levels, templates) in pools.items():
        specs, dropped = _draw(split, count, seed, levels, templates)
        assert not dropped, pool
        if templates:
            assert [s.template for s in specs[:8]] == MAIN_JOB  # round-robin, one task of each template a step
        counts = Counter()
        for spec in specs:
            task, first = render(spec, seed, "input"), drawn_tests(spec, seed, tries=0)
            assert drawn_tests(spec, seed).hidden[:HIDDEN_TESTS] == first.hidden and first.added == 0
            assert not task.survivors and len(task.row["private_tests"]["input"]) == HIDDEN_TESTS + task.added
            counts[spec.template] += task.added > 0
        strengthened[pool] = {k: v for k, v in counts.items() if v}
    assert strengthened == {
        "train": {"count_char": 21, "count_greater": 10, "divisible": 20, "remove_char": 20},
        "heldout": {"count_char": 4, "divisible": 3, "remove_char": 4},
        "generated_heldout": {"count_char": 4, "count_greater": 1, "divisible": 2, "remove_char": 2},
    }


def test_tasks_generate_reports_strengthened_and_dropped_tasks(tmp_path):
    command = [sys.executable, "-m", "gym", "tasks", "generate", "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "strengthened 220 train, 46 heldout (hidden tests added), dropped 0 train, 0 heldout" in proc.stdout
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 1000 and not {r["name"] for r in rows} & set(DROPPED)
    assert sum(len(r["private_tests"]["input"]) > HIDDEN_TESTS for r in rows) == 220
    assert all(len(r["public_tests"]["input"]) == PUBLIC_TESTS for r in rows)
