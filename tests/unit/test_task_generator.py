"""The generated task family (`tasks/generator.py`): determinism, splits, rows the loader takes, and
reference programs that pass (and wrong programs that fail) their tests in a real interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tasks.generator import (
    HIDDEN_TESTS,
    LEVELS,
    TEMPLATES,
    GeneratorError,
    TaskSpec,
    catalogue,
    draw,
    render,
    write,
)
from tasks.loader import load_tasks
from tasks.submission import read_submissions
from tests.unit.generated_programs import outputs

REPO = Path(__file__).resolve().parents[2]
FILES = ("train.jsonl", "heldout.jsonl", "train.solutions.jsonl", "heldout.solutions.jsonl")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    write(out, seed=3, train=120, heldout=50)
    return out


def _key(spec: TaskSpec) -> tuple:
    return spec.template, spec.variant.name, spec.params


def _sample() -> list[TaskSpec]:
    """The middle task of every (template, level) bucket, then 8 drawn ones: 50 tasks."""
    picked = [specs[len(specs) // 2] for specs in _buckets().values()]
    picked += draw("train", 8, seed=11)
    return picked


def _buckets() -> dict[tuple[str, int], list[TaskSpec]]:
    buckets: dict[tuple[str, int], list[TaskSpec]] = {}
    for spec in catalogue():
        buckets.setdefault((spec.template, spec.level), []).append(spec)
    return buckets


def _tests(spec: TaskSpec, seed: int = 0) -> list[tuple[str, str]]:
    row = render(spec, seed).row
    groups = [row["public_tests"], row["private_tests"], row["generated_tests"]]
    return [(i, o) for group in groups for i, o in zip(group["input"], group["output"])]


def _outputs(source: str, inputs: list[str]) -> list[str]:
    """``source``'s stdout on each input, run by a host `python3 -I` subprocess."""
    return outputs([(source, inputs)])[0]


def _failures(source: str, tests: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(input, expected, got)`` of each test whose output tokens differ (the grader's whitespace rule)."""
    got = _outputs(source, [i for i, _ in tests])
    return [(i, o, g) for (i, o), g in zip(tests, got) if g.split() != o.split()]


def test_the_family_has_thousands_of_tasks_over_every_template_and_level():
    specs = catalogue()
    assert len(TEMPLATES) >= 12 and len(specs) == len({s.task_id for s in specs}) >= 3000
    per_level = Counter(s.level for s in specs)
    assert set(per_level) == set(LEVELS) and min(per_level.values()) >= 1000
    assert set(_buckets()) == {(t, level) for t in TEMPLATES for level in LEVELS}
    assert catalogue([1]) == [s for s in specs if s.level == 1]


def test_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path, written):
    write(tmp_path / "again", seed=3, train=120, heldout=50)
    write(tmp_path / "other", seed=4, train=120, heldout=50)
    for name in FILES:
        assert (tmp_path / "again" / name).read_bytes() == (written / name).read_bytes(), name
    assert (tmp_path / "other" / "train.jsonl").read_bytes() != (written / "train.jsonl").read_bytes()


def test_a_tasks_tests_depend_on_the_seed_and_the_task_only():
    small, large = draw("train", 30, seed=5), draw("train", 300, seed=5, levels=(3, 1, 2))
    assert small == large[:30]
    assert render(small[0], 5).row == render(small[0], 5).row
    assert render(small[0], 5).row["private_tests"] != render(small[0], 6).row["private_tests"]


def test_counts_and_balance(written):
    for split, count in (("train", 120), ("heldout", 50)):
        rows = [json.loads(line) for line in (written / f"{split}.jsonl").read_text().splitlines()]
        assert len(rows) == count and {r["generator"]["split"] for r in rows} == {split}
        buckets = Counter((r["generator"]["template"], r["generator"]["level"]) for r in rows)
        assert max(buckets.values()) - min(buckets.values()) <= 1  # round-robin over (template, level)
        assert len(buckets) == min(count, len(TEMPLATES) * len(LEVELS))
    only_one = draw("train", 40, seed=0, levels=[2])
    assert {s.level for s in only_one} == {2}


def test_asking_for_more_than_exists_or_an_unknown_level_is_refused():
    available = sum(s.split == "heldout" for s in catalogue([1]))
    assert len(draw("heldout", available, seed=0, levels=[1])) == available
    with pytest.raises(GeneratorError, match=f"{available + 1} heldout tasks asked .* {available} exist"):
        draw("heldout", available + 1, seed=0, levels=[1])
    with pytest.raises(GeneratorError, match=r"unknown level\(s\) \[4\]"):
        catalogue([1, 4])


def test_splits_share_no_task_and_every_heldout_operation_is_trained_with_other_parameters(written):
    specs = catalogue()
    train = {_key(s) for s in specs if s.split == "train"}
    heldout = {_key(s) for s in specs if s.split == "heldout"}
    assert train and heldout and not train & heldout
    assert 0.15 <= len(heldout) / (len(train) + len(heldout)) <= 0.25
    for (template, level), bucket in _buckets().items():  # both sides in every bucket
        assert {s.split for s in bucket} == {"train", "heldout"}, (template, level)
    by_params = {}  # levels 1 and 2 of the same parameters are one operation: same side
    for spec in specs:
        if spec.level < 3:
            by_params.setdefault((spec.template, spec.params), set()).add(spec.split)
    assert all(len(sides) == 1 for sides in by_params.values())
    ids = {
        name: {json.loads(line)["name"] for line in (written / name).read_text().splitlines()}
        for name in ("train.jsonl", "heldout.jsonl")
    }
    assert not ids["train.jsonl"] & ids["heldout.jsonl"]


def test_every_written_row_loads_with_its_reference_solution(written):
    for split in ("train", "heldout"):
        report = load_tasks(written / f"{split}.jsonl", "codecontests")
        assert report.errors == () and len(report.tasks) == (120 if split == "train" else 50)
        assert load_tasks(written / f"{split}.jsonl", "auto").format == "codecontests"
        submissions, errors = read_submissions(written / f"{split}.solutions.jsonl")
        assert not errors and all(s.expect == "passed" for s in submissions)
        references = {s.task_id: s.completion for s in submissions}
        assert set(references) == {t.task_id for t in report.tasks}
        for task in report.tasks:
            assert task.kind == "stdin" and task.solutions == (references[task.task_id],)
            assert 1 <= len(task.public_tests) <= 2 and len(task.tests) - len(task.public_tests) >= 5
            assert task.limits.time_s == 2.0


def test_the_statement_states_every_parameter_and_the_reference_copies_it():
    for spec in catalogue()[::9]:
        task = render(spec, 0)
        description = task.row["description"]
        assert spec.variant.sentence in description
        for name, value in spec.params:
            assert f"{name} = {value!r}" in description and f"{name} = {value!r}\n" in task.reference
        example_in, example_out = task.row["public_tests"]["input"][0], task.row["public_tests"]["output"][0]
        assert f"Example input:\n{example_in}Example output:\n{example_out}" in description
        assert ("for _ in range(int(input())):" in task.reference) == (spec.level > 1)
        assert len(task.row["private_tests"]["input"]) == HIDDEN_TESTS + task.added


def _cases(kind: str, level: int, text: str) -> list[object]:
    lines = text.splitlines()
    if level > 1:
        assert 1 <= int(lines[0]) <= 5 and int(lines[0]) == (len(lines) - 1) // (2 if kind == "ints" else 1)
        lines = lines[1:]
    if kind == "ints":
        return [(int(n), [int(x) for x in a.split()]) for n, a in zip(lines[::2], lines[1::2])]
    return lines


def test_inputs_keep_the_bounds_the_statement_states():
    bounds = {
        "int": lambda n: 1 <= int(n) <= 10000,
        "word": lambda s: 1 <= len(s) <= 12 and s.isalpha() and s.islower(),
        "line": lambda s: 2 <= len(s.split()) <= 6 and s == " ".join(s.split()) and s.replace(" ", "").islower(),
        "ints": lambda case: 1 <= case[0] <= 20 and len(case[1]) == case[0] and all(0 <= x <= 99 for x in case[1]),
    }
    for spec in catalogue()[::5]:
        kind = TEMPLATES[spec.template].kind
        for text, _ in _tests(spec, seed=1):
            assert all(bounds[kind](case) for case in _cases(kind, spec.level, text)), (spec.task_id, text)


def test_references_pass_every_test_in_a_host_interpreter():
    sample = _sample()
    assert len(sample) == 50 and {(s.template, s.level) for s in sample} == set(_buckets())
    with ThreadPoolExecutor(2) as pool:
        failures = list(pool.map(lambda spec: _failures(render(spec, 0).reference, _tests(spec)), sample))
    assert not any(failures), [(spec.task_id, f[0]) for spec, f in zip(sample, failures) if f]


def test_a_wrong_program_fails_at_least_one_test_of_every_template_and_level():
    sample = [specs[len(specs) // 2] for specs in _buckets().values()]
    with ThreadPoolExecutor(2) as pool:
        failures = list(pool.map(lambda spec: _failures(render(spec, 0).wrong, _tests(spec)), sample))
    assert all(failures), [spec.task_id for spec, f in zip(sample, failures) if not f]


def test_the_harness_sees_a_crash_and_a_wrong_line():
    tests = [("3\n", "3\n"), ("4\n", "4\n"), ("x\n", "x\n")]
    got = _failures("n = int(input())\nprint(n if n != 4 else 5)\n", tests)
    assert [(i, g) for i, _, g in got] == [
        ("4\n", "5\n"),
        ("x\n", "<ValueError: invalid literal for int() with base 10: 'x'>"),
    ]


def test_the_cli_writes_the_four_files_and_refuses_too_many(tmp_path):
    command = [
        sys.executable,
        "-m",
        "gym",
        "tasks",
        "generate",
        "--out",
        str(tmp_path),
        "--seed",
        "2",
        "--train",
        "20",
        "--heldout",
        "7",
        "--levels",
        "1,3",
    ]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)
    rows = [json.loads(line) for line in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert len(rows) == 7 and {r["generator"]["level"] for r in rows} <= {1, 3}
    assert "train" in proc.stdout and "20 tasks" in proc.stdout and "dropped 0 train, 0 heldout" in proc.stdout
    too_many = subprocess.run(
        command + ["--train", "100000"], cwd=REPO, capture_output=True, text=True, timeout=120
    )  # the last --train wins
    assert too_many.returncode == 1 and "100000 train tasks asked" in too_many.stderr


def test_templates_narrow_the_draw_and_unknown_ones_are_refused():
    specs = draw("train", 30, seed=0, levels=[1, 2], templates=["linear", "caesar"])
    assert {s.template for s in specs} == {"linear", "caesar"} and {s.level for s in specs} == {1, 2}
    assert len(catalogue([1], ["linear", "linear"])) == len(catalogue([1], ["linear"]))  # repeats count once
    with pytest.raises(GeneratorError, match=r"unknown template\(s\) \['nope'\]"):
        catalogue([1], ["linear", "nope"])
    available = sum(s.split == "train" for s in catalogue([1], ["rotate"]))
    with pytest.raises(GeneratorError, match=f"of templates rotate, {available} exist"):
        draw("train", available + 1, seed=0, levels=[1], templates=["rotate"])


def test_a_generated_task_pool_is_the_generators_rows_with_their_references():
    from gym.environment import Environment
    from gym.environment_config import EnvironmentConfig, EnvironmentConfigError

    pool = {"type": "generated", "split": "heldout", "count": 20, "seed": 4, "levels": [1, 3], "id_prefix": "gen/"}
    env = Environment(EnvironmentConfig.model_validate({"name": "g", "task_pool": pool}))
    specs = draw("heldout", 20, seed=4, levels=[1, 3])
    assert list(env.tasks) == [f"gen/{s.task_id}" for s in specs]
    references = env.reference_programs()
    for spec in specs:
        task, rendered = env.tasks[f"gen/{spec.task_id}"], render(spec, 4)
        assert task.prompt == rendered.row["description"] and references[task.task_id] == rendered.reference
        assert [t.output for t in task.tests] == rendered.row["public_tests"]["output"] + rendered.row["private_tests"][
            "output"
        ]
    mixed = {
        "type": "mixture",
        "sources": [
            {"weight": 1, "pool": {**pool, "id_prefix": "a/"}},
            {"weight": 1, "pool": {**pool, "split": "train", "id_prefix": "b/"}},
        ],
    }
    assert len(Environment(EnvironmentConfig.model_validate({"name": "m", "task_pool": mixed})).tasks) == 40
    with pytest.raises(EnvironmentConfigError, match=r"generated:train\(seed 0, levels 1\).* exist"):
        Environment(
            EnvironmentConfig.model_validate(
                {"name": "g", "task_pool": {"type": "generated", "count": 10**6, "levels": [1]}}
            )
        )
    with pytest.raises(EnvironmentConfigError, match="unknown template"):
        Environment(
            EnvironmentConfig.model_validate(
                {"name": "g", "task_pool": {"type": "generated", "count": 5, "templates": ["x"]}}
            )
        )


def _input_tests(spec: TaskSpec, seed: int = 0) -> list[tuple[str, str]]:
    row = render(spec, seed, "input").row
    groups = [row["public_tests"], row["private_tests"]]
    return [(i, o) for group in groups for i, o in zip(group["input"], group["output"])]


def test_parameters_in_the_input_head_every_test_and_one_program_solves_every_value():
    for specs in _buckets().values():
        first, other = specs[0], specs[-1]
        task = render(first, 0, "input")
        description, values = task.row["description"], " ".join(str(v) for _, v in first.params)
        assert "Parameters:" not in description and first.variant.sentence in description
        assert all(text.split("\n", 1)[0] == values for text, _ in _input_tests(first)), first.task_id
        # the program reads the parameters: the same text for every parameter value of this variant and level
        assert task.reference == render(other, 0, "input").reference and first.params != other.params
        assert not any(f"{k} = {v!r}" in task.reference for k, v in first.params)
        # same tests as the stated form, behind the parameter line
        stated = _tests(first)[: len(_input_tests(first))]
        assert [(i.split("\n", 1)[1], o) for i, o in _input_tests(first)] == stated
        assert task.spec.task_id == first.task_id and task.row["generator"]["params_in"] == "input"


def test_parameters_in_the_input_references_pass_and_wrong_programs_fail():
    sample = [specs[len(specs) // 2] for specs in _buckets().values()]
    with ThreadPoolExecutor(2) as pool:
        passing = list(pool.map(lambda s: _failures(render(s, 0, "input").reference, _input_tests(s)), sample))
        wrong = list(pool.map(lambda s: _failures(render(s, 0, "input").wrong, _input_tests(s)), sample))
    assert not any(passing), [(s.task_id, f[0]) for s, f in zip(sample, passing) if f]
    assert all(wrong), [s.task_id for s, f in zip(sample, wrong) if not f]
