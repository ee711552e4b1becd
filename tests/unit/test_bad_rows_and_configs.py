"""Bad input: dataset rows in the variants real exports carry, and hostile config files.

Each case pairs an input that must be refused (a skipped row with its reason, or one ``gym: error:``
line, exit 2) with the valid variant beside it that must load, so every check can fail.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gym.overrides import OverrideError, parse_override
from sandbox.config_file import MAX_CONFIG_BYTES, read_config
from tasks.errors import UnknownFormat
from tasks.loader import MAX_UNRECOGNISED_ROWS, load_tasks
from tests.cli_support import gym, one_line

SAMPLES = Path(__file__).resolve().parents[2] / "tasks" / "samples"


def _first(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text().splitlines()[0])


def _jsonl(*rows: dict) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _load(tmp_path: Path, name: str, data: bytes, format: str = "auto"):
    path = tmp_path / name
    path.write_bytes(data)
    return load_tasks(path, format)  # type: ignore[arg-type]


# --- encodings and layouts of the file itself ---


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json", "rows.jsonl.gz"])
def test_a_byte_order_mark_is_not_a_bad_first_row(tmp_path, name):
    taco = _first("taco.jsonl")
    body = json.dumps([taco]).encode() if name == "rows.json" else _jsonl(taco)
    data = b"\xef\xbb\xbf" + body
    report = _load(tmp_path, name, gzip.compress(data) if name.endswith(".gz") else data)
    assert (len(report.tasks), report.errors, report.format) == (1, (), "taco")
    assert _load(tmp_path, "plain-" + name, gzip.compress(body) if name.endswith(".gz") else body).tasks == report.tasks


def test_an_indented_json_array_with_a_bom_and_crlf_loads_every_row(tmp_path):
    rows = [_first("taco.jsonl"), {**_first("taco.jsonl"), "id": "second"}]
    data = b"\xef\xbb\xbf" + json.dumps(rows, indent=2).encode().replace(b"\n", b"\r\n")
    report = _load(tmp_path, "rows.json", data)
    assert [t.task_id for t in report.tasks] == ["0", "second"] and report.errors == ()


def test_one_non_utf8_line_skips_that_row_only(tmp_path):
    good = _first("codecontests.jsonl")
    bad = json.dumps({**good, "name": "bad"}).encode().replace(b"Given", b"Giv\xff\xfen")
    data = _jsonl(good) + bad + b"\n" + _jsonl({**good, "name": "third"})
    report = _load(tmp_path, "rows.jsonl", data)
    assert [t.task_id for t in report.tasks] == [good["name"], "third"]
    assert [(e.index, e.reason.split(":")[0]) for e in report.errors] == [(1, "not UTF-8 text")]


def test_a_lone_surrogate_escape_is_a_skipped_row_not_a_later_crash(tmp_path):
    taco = _first("taco.jsonl")
    report = _load(tmp_path, "rows.jsonl", _jsonl({**taco, "question": "bad \ud800 text"}, {**taco, "id": "ok"}))
    assert [t.task_id for t in report.tasks] == ["ok"]
    assert report.errors[0].index == 0 and "not valid Unicode text" in report.errors[0].reason
    for task in report.tasks:
        task.model_dump_json()  # what a bundle or a trajectory does with it


def test_a_first_row_of_no_format_does_not_decide_the_file(tmp_path):
    taco = _first("taco.jsonl")
    headless = {key: value for key, value in taco.items() if key != "question"}
    report = _load(tmp_path, "rows.jsonl", _jsonl(headless, {**taco, "id": "ok"}))
    assert (report.format, [t.task_id for t in report.tasks]) == ("taco", ["ok"])
    assert report.errors[0].index == 0 and "matches no known format" in report.errors[0].reason
    with pytest.raises(UnknownFormat, match="row 0 matches no known format"):
        _load(tmp_path, "odd.jsonl", _jsonl({"hello": 1}, {"hello": 2}))
    with pytest.raises(UnknownFormat, match=f"nor do the {MAX_UNRECOGNISED_ROWS - 1} rows after it"):
        _load(tmp_path, "many.jsonl", _jsonl(*[{"hello": n} for n in range(MAX_UNRECOGNISED_ROWS + 5)], taco))


# --- fields of the wrong type or encoding ---


def test_json_encoded_twice_fields_load_like_once_encoded(tmp_path):
    taco, lcb, mbpp = _first("taco.jsonl"), _first("lcb.jsonl"), _first("mbpp.jsonl")
    cases = [
        ("taco", taco, {"input_output": json.dumps(taco["input_output"])}),
        ("lcb", lcb, {"public_test_cases": json.dumps(lcb["public_test_cases"])}),
        ("mbpp", mbpp, {"test_list": json.dumps(mbpp["test_list"])}),
    ]
    for name, row, change in cases:
        once = _load(tmp_path, f"{name}-once.jsonl", _jsonl(row), name)
        twice = _load(tmp_path, f"{name}-twice.jsonl", _jsonl({**row, **change}), name)
        assert twice.errors == () and twice.tasks == once.tasks and once.tasks, name
    broken = _load(tmp_path, "broken.jsonl", _jsonl({**taco, "input_output": json.dumps("{not json")}), "taco")
    assert broken.tasks == () and "input_output" in broken.errors[0].reason


def test_codecontests_numbers_as_strings_and_null_groups(tmp_path):
    cc = _first("codecontests.jsonl")
    expected = _load(tmp_path, "cc.jsonl", _jsonl(cc)).tasks[0]
    variants = [
        {"memory_limit_bytes": str(cc["memory_limit_bytes"])},  # bytes, not megabytes
        {"memory_limit_bytes": float(cc["memory_limit_bytes"])},  # a float column
        {"time_limit": {k: str(v) for k, v in cc["time_limit"].items()}},
        {"public_tests": json.dumps(cc["public_tests"])},
    ]
    for n, change in enumerate(variants):
        report = _load(tmp_path, f"cc{n}.jsonl", _jsonl({**cc, **change}))
        assert report.errors == () and report.tasks[0].limits == expected.limits, change
        assert report.tasks[0].tests == expected.tests, change
    empty = _load(tmp_path, "empty.jsonl", _jsonl({**cc, "generated_tests": {"input": None, "output": None}}))
    assert empty.errors == () and len(empty.tasks[0].tests) == len(expected.tests) - len(cc["generated_tests"]["input"])
    bad = _load(tmp_path, "bad.jsonl", _jsonl({**cc, "time_limit": {"seconds": "two"}}))
    assert bad.tasks == () and "time_limit.seconds" in bad.errors[0].reason


def test_numeric_ids_read_back_as_floats_keep_their_id(tmp_path):
    mbpp = _first("mbpp.jsonl")
    report = _load(tmp_path, "m.jsonl", _jsonl({**mbpp, "task_id": float(mbpp["task_id"])}))
    assert report.tasks[0].task_id == str(mbpp["task_id"])
    bad = _load(tmp_path, "b.jsonl", _jsonl({**mbpp, "task_id": 1.5}, {**mbpp, "task_id": True}))
    assert bad.tasks == () and [e.reason.split(" ")[0:2] for e in bad.errors] == [["field", "'task_id'"]] * 2


def test_math_answers_as_json_numbers(tmp_path):
    gsm, plain = _first("math_gsm8k.jsonl"), _first("math_plain.jsonl")
    for answer, gold in ((72, "72"), (72.0, "72"), (0.5, "0.5")):
        assert _load(tmp_path, "g.jsonl", _jsonl({**gsm, "answer": answer}), "math").tasks[0].gold == gold
        assert _load(tmp_path, "p.jsonl", _jsonl({**plain, "answer": answer}), "math").tasks[0].gold == gold
    bad = _load(tmp_path, "b.jsonl", b'{"problem": "p", "answer": NaN}\n{"question": "q", "answer": true}\n', "math")
    assert bad.tasks == () and "not a finite number" in bad.errors[0].reason and "boolean" in bad.errors[1].reason


def test_a_huge_row_loads_and_a_deep_one_is_skipped(tmp_path):
    cc = _first("codecontests.jsonl")
    huge = {**cc, "name": "huge", "generated_tests": {"input": ["1\n" * 1000] * 2000, "output": ["1\n"] * 2000}}
    data = _jsonl(huge) + b'{"name": "deep", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    report = _load(tmp_path, "rows.jsonl", data)
    assert [t.task_id for t in report.tasks] == ["huge"] and len(report.tasks[0].tests) == 2002
    assert report.errors[0].index == 1 and "invalid JSON" in report.errors[0].reason


# --- config files and --set ---

BOMB = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
)


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("dup.yaml", "seed: 1\nseed: 2\n", "line 2: the key 'seed' is given a second time (first on line 1)"),
        ("nested-dup.yaml", "a:\n  b: 1\n  c: 2\n  b: 3\n", "line 4: the key 'b' is given a second time"),
        ("bomb.yaml", BOMB, "expands to more than"),
        ("deep.yaml", "[" * 50_000 + "]" * 50_000, "nested more than"),
        ("huge.yaml", "seed: 1\n" + "#" * MAX_CONFIG_BYTES + "\n", "larger than"),
    ],
    ids=["dup", "nested-dup", "bomb", "deep", "huge"],
)
def test_hostile_config_files_are_one_clear_error(tmp_path, name, text, reason):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match="^" + str(path).replace(".", r"\.")) as caught:
        read_config(path)
    assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_valid_yaml_features_still_read(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_bytes(b"\xef\xbb\xbfbase: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nshared: [*b, *b]\n")
    assert read_config(path) == {
        "base": {"x": 1, "y": 2},
        "use": {"x": 1, "y": 3},
        "shared": [{"x": 1, "y": 2}, {"x": 1, "y": 2}],
    }


def test_set_values_refuse_what_config_files_refuse():
    assert parse_override("a={b: 1, c: 2}") == (("a",), {"b": 1, "c": 2})
    with pytest.raises(OverrideError, match="given a second time"):
        parse_override("a={b: 1, b: 2}")
    with pytest.raises(OverrideError, match="nested more than"):
        parse_override("a=" + "[" * 20_000 + "]" * 20_000)  # safe_load: RecursionError, a traceback


@pytest.mark.parametrize(
    "name, text, named",
    [
        ("dup.yaml", "seed: 1\nseed: 2\n", "the key 'seed' is given a second time"),
        ("bomb.yaml", BOMB, "expands to more than"),
        ("deep.yaml", "[" * 50_000 + "]" * 50_000, "nested more than"),
    ],
    ids=["dup", "bomb", "deep"],
)
def test_hostile_configs_on_the_command_line(tmp_path, name, text, named):
    path = tmp_path / name
    path.write_text(text)
    one_line(gym("serve", str(path)), 2, str(path), named)
    valid = tmp_path / "valid.yaml"
    valid.write_text("seed: 1\n")  # reads, then fails validation: still one line naming the file
    one_line(gym("serve", str(valid)), 2, str(valid), "policy: Field required")


def test_apps_rows_without_solutions_and_short_memory_units(tmp_path):
    apps, taco = _first("apps.jsonl"), _first("taco.jsonl")
    report = _load(tmp_path, "apps.jsonl", _jsonl({**apps, "solutions": ""}), "apps")
    assert report.errors == () and report.tasks[0].solutions == ()
    for limit, expected in (("256M", 256 << 20), ("64 MiB", 64 << 20), ("1 GiB", 1 << 30), ("512k", 512 << 10)):
        loaded = _load(tmp_path, "taco.jsonl", _jsonl({**taco, "memory_limit": limit}), "taco")
        assert loaded.errors == () and loaded.tasks[0].limits.memory_bytes == expected, limit
    bad = _load(tmp_path, "bad.jsonl", _jsonl({**taco, "memory_limit": "256 parsecs"}), "taco")
    assert bad.tasks == () and "is not a memory limit" in bad.errors[0].reason


def test_endless_or_unreadable_config_paths_are_one_error(tmp_path):
    with pytest.raises(ValueError, match="^/dev/zero: larger than"):  # read_text never returned here
        read_config("/dev/zero")
    with pytest.raises(ValueError, match="cannot read the config: Is a directory"):
        read_config(tmp_path)
    (tmp_path / "ok.toml").write_text("seed = 1\n[optimizer]\nlr = 0.5\n")
    assert read_config(tmp_path / "ok.toml") == {"seed": 1, "optimizer": {"lr": 0.5}}


def test_a_solution_with_a_lone_surrogate_is_an_unparseable_row(tmp_path):
    from tasks.submission import read_submissions

    path = tmp_path / "solutions.jsonl"
    rows = [{"task_id": "a", "completion": "print(1)  # \udc80"}, {"task_id": "b", "completion": "print('é')"}]
    path.write_bytes(b"\xef\xbb\xbf" + _jsonl(*rows))
    submissions, errors = read_submissions(path)
    assert [s.task_id for s in submissions] == ["b"] and submissions[0].completion == "print('é')"
    assert [(e.index, e.reason) for e in errors] == [(0, "completion is not valid Unicode text (a lone surrogate)")]


def test_a_tab_or_a_second_document_is_named_with_its_line(tmp_path):
    tabs, multi = tmp_path / "tabs.yaml", tmp_path / "multi.yaml"
    tabs.write_text("optimizer:\n\tlr: 1\n")
    multi.write_text("seed: 1\n---\nseed: 2\n")
    for path, words in ((tabs, ["'\\t'", "line 2"]), (multi, ["single document", "line 2"])):
        with pytest.raises(ValueError) as caught:
            read_config(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: not valid YAML") and "<unicode string>" not in message, message
        assert all(word in message for word in words), message
    spaces = tmp_path / "spaces.yaml"
    spaces.write_text("optimizer:\n  lr: 1\n")
    assert read_config(spaces) == {"optimizer": {"lr": 1}}


def test_nemotron_prompts_given_as_a_string_or_after_a_system_message(tmp_path):
    row = _first("nemotron.jsonl")
    statement = row["responses_create_params"]["input"][0]["content"]
    expected = _load(tmp_path, "n.jsonl", _jsonl(row)).tasks[0]
    as_string = {**row, "responses_create_params": {"input": statement}}
    assert _load(tmp_path, "s.jsonl", _jsonl(as_string)).tasks[0].prompt == expected.prompt == statement
    system = {"role": "system", "content": "Answer in Python 3."}
    with_system = {**row, "responses_create_params": {"input": [system, {"role": "user", "content": statement}]}}
    prompt = _load(tmp_path, "y.jsonl", _jsonl(with_system)).tasks[0].prompt
    assert prompt == "Answer in Python 3.\n\n" + statement  # the problem is not lost behind the system text
    empty = {**row, "responses_create_params": {"input": [{"role": "assistant", "content": "hi"}]}}
    bad = _load(tmp_path, "b.jsonl", _jsonl(empty), "nemotron")
    assert bad.tasks == () and "no system or user message" in bad.errors[0].reason


def test_an_apps_problem_without_tests_says_so(tmp_path):
    apps = _first("apps.jsonl")
    report = _load(tmp_path, "a.jsonl", _jsonl({**apps, "input_output": ""}, {**apps, "problem_id": 7}), "apps")
    assert [t.task_id for t in report.tasks] == ["7"]
    assert report.errors[0].reason == "input_output is empty: the problem has no tests"
