"""Issue 41 class 4, weak generated tests: the outside round's programs (2026-11-28, report section B) and one
program of each kind of the degenerate family (`tasks/degenerate.py`), as real programs run in a host interpreter
(`python3 -I`) on the tests of the rows the generator writes, compared token by token as the grader compares;
beside the honest controls: every reference passes every test of its task, and a program that answers as the
reference on every input the statement allows passes. The same programs in the real grader:
tests/integration/test_task_generator_grading.py."""

from __future__ import annotations

import re

from tasks import degenerate
from tasks.generator import (
    HIDDEN_TESTS,
    PUBLIC_TESTS,
    TaskSpec,
    catalogue,
    degenerates,
    draw,
    drawn_tests,
    render,
)
from tests.unit.generated_programs import outputs

LOOP = "for _ in range(int(input())):\n"
MAIN_JOB = ["sum_plus", "linear", "scale", "divisible", "replace_char", "count_greater", "remove_char", "count_char"]
# The outside round's programs (gen/weak_solutions.jsonl), verbatim: each passed every test of its task, in the
# real grader, as the generator wrote it before this fix.
CONSTANT_TASKS = {
    "linear/L3/A=7,B=1,M=7": LOOP + "    input()\n    print(1)\n",  # 7n + 1 mod 7 is 1 for every n
    "linear/L3/A=9,B=8,M=9": LOOP + "    input()\n    print(8)\n",
}
OUTSIDE = {
    "divisible/L3/D=19,E=15": LOOP + "    input()\n    print('NO')\n",  # no test drew a YES
    "divisible/L1/D=6": "D = 4\nn = int(input())\nprint('YES' if n % D == 0 else 'NO')\n",  # D off by 2
    "divisible/L1/D=9": "D = 6\nn = int(input())\nprint('YES' if n % D == 0 else 'NO')\n",  # D off by 3
    "divisible/L3/D=5,E=14": "D = 2\nE = 14\n"
    + LOOP
    + "    n = int(input())\n    print('YES' if n % D == 0 and n % E != 0 else 'NO')\n",
}
# The outside round counted this one too, but it is a solution: D | n and 6 does not divide n is D | n and 3 does not
# divide n when D = 2, for every n.
SAME_ANSWERS = (
    "divisible/L3/D=2,E=3",
    "D = 2\nE = 6\n" + LOOP + "    n = int(input())\n    print('YES' if n % D == 0 and n % E != 0 else 'NO')\n",
)
# One program of each kind of the family, with the first task (catalogue order, seed 0) whose tests as first drawn
# it passed: found by the test below, named here so that a change shows.
FIRST_PASSED = {
    "grid count_two": ("count_char/L1/C=a", "count_two(C=a,D=c)"),
    "grid divisible_not": ("divisible/L1/D=2", "divisible_not(D=2,E=11)"),
    "move *2": ("divisible/L1/D=6", "D*2"),
    "move -2": ("divisible/L1/D=6", "D-2"),
    "move /2": ("divisible/L1/D=8", "D/2"),
    "move -3": ("divisible/L1/D=9", "D-3"),
    "grid divisible": ("divisible/L1/D=10", "divisible(D=2)"),
    "constant": ("divisible/L1/D=64", "constant 'YES\\n'"),
    "per line": ("divisible/L1/D=64", "per line after 0 'YES'"),
    "move -1": ("divisible/L3/D=10,E=12", "E-1"),
    "move +2": ("divisible/L3/D=13,E=2", "E+2"),
    "move +1": ("count_greater/L1/K=0", "K+1"),
    "move +3": ("count_greater/L1/K=0", "K+3"),
    "grid greater": ("count_greater/L1/K=0", "greater(K=10)"),
    "grid between": ("count_greater/L1/K=57", "between(L=60,R=95)"),
    "first answer": ("count_greater/L2/K=98", "first answer for every case"),
    "per case": ("count_greater/L2/K=98", "per case '0'"),
    "grid remove_two": ("remove_char/L1/C=a", "remove_two(C=a,D=e)"),
}


def _spec(task_id: str) -> TaskSpec:
    template, level, params = task_id.split("/")
    values = [item.split("=") for item in params.split(",")]
    return TaskSpec(template, int(level[1:]), tuple((k, int(v) if v.isdigit() else v) for k, v in values))


def _tests(spec: TaskSpec, params_in: str = "statement", seed: int = 0) -> list[tuple[str, str]]:
    row = render(spec, seed, params_in).row
    groups = (row["public_tests"], row["private_tests"])
    return [(i, o) for group in groups for i, o in zip(group["input"], group["output"])]


def _as_drawn(tests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The tests before any was added: the public ones and the first HIDDEN_TESTS hidden ones."""
    return tests[: PUBLIC_TESTS + HIDDEN_TESTS]


def _passing(jobs: list[tuple[str, list[tuple[str, str]]]]) -> list[bool]:
    """For each (source, tests): whether the program, run, passes every test (its stdout's tokens equal)."""
    runs = outputs([(source, [i for i, _ in tests]) for source, tests in jobs])
    return [all(got.split() == o.split() for got, (_, o) in zip(out, tests)) for out, (_, tests) in zip(runs, jobs)]


def test_the_outside_rounds_constant_answer_tasks_are_never_generated_and_the_family_drops_them():
    """linear/L3 with M dividing A answers B mod M on every n. Such a task is no longer in the catalogue (so never
    drawn); were it made by hand, a constant printed once per case would pass it, and the check would drop it."""
    ids = {s.task_id for s in catalogue()}  # what `draw` draws from
    jobs = []
    for task_id, source in CONSTANT_TASKS.items():
        spec = _spec(task_id)
        assert task_id not in ids
        value = source.split("print(")[1].split(")")[0]
        assert f"per case '{value}'" in drawn_tests(spec, 0).survivors
        jobs.append((source, _tests(spec)))
    assert _passing(jobs) == [True, True]  # a program the family names passes such a task: it is rightly dropped


def test_the_outside_rounds_programs_fail_the_tasks_as_generated_now():
    """Each outside program, run on its task's tests as the generator writes them now, fails one; the reference
    passes them all. The two divisible/L1 programs passed the same tests as first drawn (the stream's first ones,
    unchanged): the hidden tests added for them reject them."""
    jobs = []
    for task_id, source in OUTSIDE.items():
        spec = _spec(task_id)
        tests = _tests(spec)
        assert task_id in {s.task_id for s in catalogue([spec.level], [spec.template])}
        jobs += [(source, tests), (render(spec, 0).reference, tests)]
    for task_id in ("divisible/L1/D=6", "divisible/L1/D=9"):
        jobs.append((OUTSIDE[task_id], _as_drawn(_tests(_spec(task_id)))))
    passed = _passing(jobs)
    assert passed[: 2 * len(OUTSIDE) : 2] == [False] * len(OUTSIDE)  # every outside program fails
    assert passed[1 : 2 * len(OUTSIDE) : 2] == [True] * len(OUTSIDE)  # every reference passes
    assert passed[2 * len(OUTSIDE) :] == [True, True]  # the tests as first drawn let them through


def test_a_program_with_the_references_answers_on_every_input_passes():
    """Honest control: the outside round's divisible/L3/D=2,E=3 program (E = 6) answers as the reference on every
    n the statement allows (1..10000, run), so it is a solution, passes every test, and the family holds no program
    of its meaning (it is not counted degenerate)."""
    task_id, source = SAME_ANSWERS
    spec = _spec(task_id)
    reference = render(spec, 0).reference
    inputs = [f"5\n{n}\n{n + 1}\n{n + 2}\n{n + 3}\n{n + 4}\n" for n in range(1, 10001, 5)]
    ours, theirs = outputs([(reference, inputs), (source, inputs)])
    assert ours == theirs and len(inputs) == 2000
    assert _passing([(source, _tests(spec))]) == [True]
    names = {p.name for p in degenerates(spec, _tests(spec), "statement")}
    assert "E+3" not in names and "E*2" not in names and "divisible_not(D=2,E=6)" not in names


def _kind(name: str) -> str:
    """``constant``, ``per case``, ``per line``, ``first answer``, ``echo``, ``move +2``, ``swap``, ``letter`` or
    ``grid VARIANT`` (a parameter value of the generator's ranges)."""
    if name.startswith(("per ", "first ")):
        return " ".join(name.split()[:2])
    if name.startswith(("constant", "echo", "swap")):
        return name.split()[0]
    if match := re.fullmatch(r"[A-Z]([+-]\d|\*2|/2)", name):
        return f"move {match[1]}"
    return f"grid {name.split('(')[0]}" if "(" in name else "letter"


def test_each_kind_of_degenerate_program_passed_a_task_as_first_drawn_and_fails_it_now():
    """For each kind of the family, the first task (catalogue order, seed 0) whose tests as first drawn let a
    program of that kind through (FIRST_PASSED): the check finds it on those tests, and the program's own source,
    run, passes them and fails the task's tests as written (in both layouts, but the layout a per-line program
    passed in), while the reference passes them."""
    jobs, labels = [], []
    for kind, (task_id, name) in FIRST_PASSED.items():
        spec = _spec(task_id)
        assert _kind(name) == kind and name in drawn_tests(spec, 0, tries=0).survivors
        textual = name.startswith(("per line", "echo"))  # what these print depends on the layout: the drawn one
        for params_in in ("statement",) if textual else ("statement", "input"):
            tests = _tests(spec, params_in)
            program = next(p for p in degenerates(spec, tests, params_in) if p.name == name)
            jobs += [
                (program.source, _as_drawn(tests)),
                (program.source, tests),
                (render(spec, 0, params_in).reference, tests),
            ]
            labels.append((kind, params_in))
    passed = _passing(jobs)
    results = {label: tuple(passed[3 * i : 3 * i + 3]) for i, label in enumerate(labels)}
    assert results == {label: (True, False, True) for label in labels}


def test_the_kinds_no_drawn_task_let_through_are_caught_on_weak_tests_made_by_hand():
    """A swap of two parameters, a letter parameter set to another letter and echo never passed a task's tests
    as drawn at seed 0; on tests made weak by hand the family names them, and their sources, run, pass those tests."""
    cases = [
        ("linear/L1/A=2,B=3", "swap A,B", [("1\n", "5\n")]),  # 2 * 1 + 3 = 3 * 1 + 2
        ("replace_char/L1/A=e,B=z", "A=x", [("zz\n", "zz\n")]),  # no e to replace
        ("replace_char/L1/A=e,B=z", "echo", [("zz\n", "zz\n")]),
        ("count_char/L2/C=a", "per case '1'", [("2\nab\nca\n", "1\n1\n")]),
    ]
    jobs = []
    for task_id, name, tests in cases:
        spec = _spec(task_id)
        programs = degenerates(spec, tests, "statement")
        assert name in degenerate.survivors(programs, tests)
        jobs.append((next(p.source for p in programs if p.name == name), tests))
    assert _passing(jobs) == [True] * len(cases)


def test_every_reference_passes_every_test_of_every_task_handed_out():
    """Honest control: the reference of every task `draw` can hand out (4,997 at seed 0) passes every test of its row
    (the strengthened ones included), run; and the main job's pools in their own layout (parameters in the input):
    configs/cp_grpo_tiny.yaml's 168, its held-out 32, configs/cp_generated_heldout.yaml's 32 (seed 1)."""
    jobs = []
    for spec in catalogue():
        task = render(spec, 0)
        if not task.survivors:
            jobs.append((task.reference, _tests(spec)))
    for split, count, seed, levels, templates in (
        ("train", 168, 0, [2], MAIN_JOB),
        ("heldout", 32, 0, [2], MAIN_JOB),
        ("heldout", 32, 1, [1, 2], None),
    ):
        for spec in draw(split, count, seed, levels, templates):
            jobs.append((render(spec, seed, "input").reference, _tests(spec, "input", seed)))
    passed = _passing(jobs)
    assert len(passed) == 4997 + 232 and all(passed)
