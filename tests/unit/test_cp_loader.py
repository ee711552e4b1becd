"""Loaders: every shipped sample set, auto-detection, every reader, malformed rows reported and skipped."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import zlib
from pathlib import Path

import pytest

from tasks.catalog import SAMPLE_SETS, load_sample_set, reference_completions
from tasks.errors import MalformedRow, SourceError, UnknownFormat
from tasks.formats import field, humaneval, livecodebench
from tasks.loader import detect_format, load_tasks
from tasks.task import AssertTest, CallTest, StdinTest

EXPECTED_KINDS = {
    "nemotron": {"nemotron-sum-pairs": "stdin", "nemotron-reverse-words": "stdin"},
    "taco": {"0": "stdin", "1": "call"},
    "apps": {"9001": "stdin", "9002": "call"},
    "codecontests": {"9100_A. Average": "stdin", "9100_B. Palindromes": "stdin"},
    "lcb": {"gym_lcb_1": "stdin", "gym_lcb_2": "call"},
    "humaneval": {"GymEval/0": "assert", "GymEval/1": "assert", "GymEval/2": "assert"},
    "mbpp": {"9501": "assert", "9502": "assert", "9503": "assert"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_shipped_set_loads_with_auto_detection(name):
    sample = SAMPLE_SETS[name]
    report = load_tasks(sample.tasks_path)  # format auto
    assert report.format == name
    assert report.errors == ()
    assert {t.task_id: t.kind for t in report.tasks} == EXPECTED_KINDS[name]
    assert all(t.source_format == name for t in report.tasks)


@pytest.mark.parametrize("name", sorted(SAMPLE_SETS))
def test_every_shipped_task_has_exactly_one_reference(name):
    report, submissions = load_sample_set(name)
    references = reference_completions(name)
    assert set(references) == {t.task_id for t in report.tasks}
    assert sum(s.expect == "passed" for s in submissions) == len(report.tasks)


def test_shipped_sets_exercise_every_failing_verdict():
    expects = {s.expect for name in SAMPLE_SETS for s in load_sample_set(name)[1]}
    assert {"passed", "wrong_answer", "runtime_error", "time_limit", "memory_limit", "compile_error"} <= expects


def test_shipped_assert_tests_all_split():
    """Every shipped assert test splits with leaves rooted in the candidate (none is refused for reward)."""
    from tasks.assertion import split

    for name in ("humaneval", "mbpp"):
        for task in load_sample_set(name)[0].tasks:
            candidates = frozenset({"candidate", "Solution", task.fn_name})
            for test in task.tests:
                assert split(test.source, candidates) is not None, (task.task_id, test.source)


def test_taco_fields_limits_and_wrapped_outputs():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE_SETS["taco"].tasks_path).tasks}
    assert tasks["0"].limits.time_s == 1.0 and tasks["0"].limits.memory_bytes == 256 << 20
    rotate = tasks["1"]
    assert rotate.fn_name == "rotate" and rotate.starter_code.startswith("def rotate")
    first = rotate.tests[0]
    assert isinstance(first, CallTest) and first.args == [[1, 2, 3, 4, 5], 2] and first.wrapped
    assert rotate.solutions and "def rotate" in rotate.solutions[0]


def test_apps_list_inputs_are_joined_lines():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE_SETS["apps"].tasks_path).tasks}
    test = tasks["9001"].tests[2]
    assert isinstance(test, StdinTest) and test.input == "4\n2 2 2 2\n" and test.output == "2 2\n"
    assert tasks["9002"].fn_name == "numIdenticalPairs"
    assert not tasks["9002"].tests[0].wrapped  # a plain int output is not a wrapped list


def test_codecontests_groups_limits_and_python3_solutions():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE_SETS["codecontests"].tasks_path).tasks}
    average = tasks["9100_A. Average"]
    assert len(average.public_tests) == 1 and len(average.tests) == 5  # public + private + generated
    assert average.limits.time_s == 1.0 and average.limits.memory_bytes == 268435456
    assert len(average.solutions) == 1 and "#include" not in average.solutions[0]  # C++ solution filtered out
    assert tasks["9100_B. Palindromes"].limits.time_s == 2.5


def test_lcb_compressed_private_tests_and_functional_arguments():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE_SETS["lcb"].tasks_path).tasks}
    functional = tasks["gym_lcb_2"]
    assert functional.fn_name == "countPairs" and len(functional.tests) == 3 and len(functional.public_tests) == 1
    assert functional.tests[1] == CallTest(args=[[-6, 2, 5, -2, -7, -1, 3], -2], expected=10)


def test_lcb_pickle_with_a_global_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    blob = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    row = {"question_content": "q", "public_test_cases": "[]", "private_test_cases": blob, "question_id": "x"}
    with pytest.raises(MalformedRow, match="refusing global"):
        livecodebench.parse(0, row)


def test_humaneval_split_renames_drops_constant_and_collects_imports():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE_SETS["humaneval"].tasks_path).tasks}
    balanced = tasks["GymEval/2"]
    assert len(balanced.tests) == 5  # `assert True, ...` dropped
    assert all(isinstance(t, AssertTest) and "candidate" in t.source for t in balanced.tests)
    assert tasks["GymEval/1"].setup_code == "import math"
    assert balanced.completion_prefix == balanced.prompt
    assert balanced.solutions[0].startswith(balanced.prompt)


def test_humaneval_falls_back_to_whole_check_for_loops_and_helpers():
    loop = "def check(f):\n    for x in range(3):\n        assert f(x) == x\n"
    setup, tests = humaneval.split_check(loop, "ident")
    assert len(tests) == 1 and "check(ident)" in tests[0].source
    helper = "def helper(v):\n    return v * 2\n\ndef check(candidate):\n    assert candidate(1) == helper(1)\n"
    assert len(humaneval.split_check(helper, "double")[1]) == 1  # uses a test-defined name: whole
    renamed = humaneval.split_check("def check(f):\n    assert f(1) == 2\n", "g")[1]
    assert renamed[0].source == "assert candidate(1) == 2"


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_lcb_decompression_bomb_is_a_skipped_row_not_gigabytes():
    """0.5 MiB of zlib once inflated to 1.2 GiB in memory: inflation stops at the bound."""
    bomb = base64.b64encode(zlib.compress(b"\0" * (200 << 20), 9)).decode()
    assert len(bomb) < 1 << 20
    row = {"question_content": "q", "public_test_cases": "[]", "private_test_cases": bomb, "question_id": "x"}
    with pytest.raises(MalformedRow, match="decompresses to more than 64 MiB"):
        livecodebench.parse(0, row)


def test_deeply_nested_rows_are_skipped_and_the_good_rows_kept(tmp_path):
    good = json.loads(SAMPLE_SETS["nemotron"].tasks_path.read_text().splitlines()[0])
    deep = "[" * 200000 + "]" * 200000
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n" + deep + "\n" + '{"a": ' * 100000 + "1" + "}" * 100000 + "\n")
    report = load_tasks(path)
    assert [t.task_id for t in report.tasks] == ["nemotron-sum-pairs"]
    assert {e.index for e in report.errors} == {1, 2} and all("RecursionError" in e.reason for e in report.errors)


def test_malformed_rows_are_reported_with_index_and_skipped(tmp_path):
    good = json.loads(SAMPLE_SETS["nemotron"].tasks_path.read_text().splitlines()[0])
    mismatched = json.loads(json.dumps(good))
    mismatched["verifier_metadata"]["unit_tests"]["outputs"] = []
    mismatched["hash_id"] = "other"
    no_tests = {"responses_create_params": {"input": [{"content": "q"}]}, "verifier_metadata": {}}
    path = _write_jsonl(tmp_path / "rows.jsonl", [good, "{not json", "[1, 2]", mismatched, no_tests, good])
    report = load_tasks(path)
    assert [t.task_id for t in report.tasks] == ["nemotron-sum-pairs"]
    reasons = {e.index: e.reason for e in report.errors}
    assert set(reasons) == {1, 2, 3, 4, 5}
    assert "invalid JSON" in reasons[1] and "not a JSON object" in reasons[2]
    assert "3 inputs but 0 outputs" in reasons[3] and "unit_tests" in reasons[4]
    assert "duplicate task_id" in reasons[5]


def test_malformed_rows_of_every_format_do_not_crash(tmp_path):
    rows = {
        "taco": {"question": "q", "input_output": "{broken"},
        "apps": {"question": "q", "problem_id": 1, "input_output": json.dumps({"inputs": [1], "outputs": ["1"]})},
        "codecontests": {"description": "d", "public_tests": {"input": ["1"], "output": []}},
        "lcb": {
            "question_content": "q",
            "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "x"}]),
        },
        "humaneval": {"task_id": "h", "prompt": "p", "entry_point": "f", "test": "def nope(:"},
        "mbpp": {"task_id": 1, "text": "t", "test_list": []},
    }
    for name, row in rows.items():
        report = load_tasks(_write_jsonl(tmp_path / f"{name}.jsonl", [row]), name)
        assert report.tasks == () and len(report.errors) == 1 and report.errors[0].index == 0, name


def test_readers_parquet_json_array_and_gzip_agree(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the datasets reader needs the datasets package")
    source = SAMPLE_SETS["mbpp"].tasks_path
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    expected = load_tasks(source).tasks
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "mbpp.parquet"))
    (tmp_path / "mbpp.json").write_text(json.dumps(rows))
    with gzip.open(tmp_path / "mbpp.jsonl.gz", "wt") as handle:
        handle.write(source.read_text())
    for path, reader in (
        (tmp_path / "mbpp.parquet", "auto"),
        (tmp_path / "mbpp.json", "auto"),
        (tmp_path / "mbpp.jsonl.gz", "auto"),
        (source, "datasets"),
    ):
        assert load_tasks(path, "mbpp", reader).tasks == expected, path


def test_source_and_format_errors(tmp_path):
    with pytest.raises(SourceError):
        load_tasks(tmp_path / "missing.jsonl")
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(SourceError):
        load_tasks(tmp_path / "rows.csv")
    with pytest.raises(UnknownFormat):
        load_tasks(_write_jsonl(tmp_path / "odd.jsonl", [{"hello": 1}]))
    with pytest.raises(UnknownFormat):
        load_tasks(_write_jsonl(tmp_path / "x.jsonl", [{"hello": 1}]), "kaggle")  # type: ignore[arg-type]
    assert detect_format({"question": "q", "input_output": "{}", "time_limit": "1 second"}) == "taco"


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("2 seconds", 2.0),
        ("1 second", 1.0),
        ("1.5 seconds", 1.5),
        ("500 ms", 0.5),
        (3, 3.0),
        (None, None),
        ("None", None),
    ],
)
def test_time_limit_phrases(value, seconds):
    assert field.seconds(value, "time_limit") == seconds


def test_memory_limit_phrases():
    assert field.memory_bytes("256 megabytes", "m") == 256 << 20
    assert field.memory_bytes(1 << 30, "m") == 1 << 30
    with pytest.raises(MalformedRow):
        field.memory_bytes("lots", "m")
