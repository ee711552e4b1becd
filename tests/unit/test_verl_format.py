"""verl's RL parquet rows load as tasks (format ``verl``): code and math rows beside each other, recognised
automatically, in JSON Lines and in parquet as verl's preprocessing writes it; a malformed row is a skipped row with
its reason, never a crash, and an oversized ground truth is refused before it is decoded."""

from __future__ import annotations

import json

import pytest

from tasks.errors import MalformedRow
from tasks.formats import verl
from tasks.loader import detect_format, load_tasks
from tasks.math.problem import MathTask
from tasks.task import CallTest, StdinTest, Task

STDIN_TRUTH = json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})
CALL_TRUTH = json.dumps({"inputs": [[1, 2], [5, 7]], "outputs": [[3], [12]], "fn_name": "add"})


def row(data_source: str, ground_truth, index: int = 0, ability: str | None = None, **extra) -> dict:
    """A row as verl's examples/data_preprocess scripts write it."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"question {index}"}],
        "ability": ability or ("math" if verl.kind_of(data_source) == "math" else "code"),
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": "train", "index": index},
        **extra,
    }


HONEST = [
    row("openai/gsm8k", "72", 0),
    row("DigitalLearningGmbH/MATH-lighteval", "\\frac{1}{2}", 1),
    row("aime_2024", 204, 2),
    row("codecontests", STDIN_TRUTH, 3),
    row("apps", CALL_TRUTH, 4),
    row("taco", json.loads(STDIN_TRUTH), 5),  # a struct column: the decoded object
    row("my_code_set", STDIN_TRUTH, 6, ability="code"),  # an unknown source routed by its ability
]


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_honest_row_loads_with_auto_detection(tmp_path):
    path = tmp_path / "train.jsonl"
    write_jsonl(path, HONEST)
    report = load_tasks(path)
    assert report.format == "verl" and report.errors == ()
    tasks = {t.task_id: t for t in report.tasks}
    assert sorted(tasks) == ["0", "1", "2", "3", "4", "5", "6"]
    assert [tasks[i].gold for i in "012"] == ["72", "\\frac{1}{2}", "204"]
    assert all(isinstance(tasks[i], MathTask) and tasks[i].problem == f"question {i}" for i in "012")
    code = [tasks[i] for i in "3456"]
    assert all(isinstance(t, Task) and t.source_format == "verl" for t in code)
    assert [t.kind for t in code] == ["stdin", "call", "stdin", "stdin"]
    assert tasks["3"].tests[1] == StdinTest(input="5 7\n", output="12\n")
    assert tasks["4"].fn_name == "add" and tasks["4"].tests[0] == CallTest(args=[1, 2], expected=[3], wrapped=True)


def test_parquet_as_verl_writes_it(tmp_path):
    """verl's preprocessing saves with datasets' to_parquet: nested prompt and reward_model columns."""
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list([row("openai/gsm8k", "72", 0), row("codecontests", STDIN_TRUTH, 1)]).to_parquet(path)
    report = load_tasks(path)
    assert report.format == "verl" and report.errors == ()
    assert [type(t).__name__ for t in report.tasks] == ["MathTask", "Task"]


def test_system_and_user_messages_make_the_prompt():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "not part of it"},
    ]
    task = verl.parse(0, {**row("openai/gsm8k", "4"), "prompt": messages})
    assert task.problem == "Be brief.\n\n2+2?"


def test_routing_follows_verl_then_ability_then_the_callers_table():
    assert verl.kind_of("openai/gsm8k") == "math" and verl.kind_of("aime25") == "math"
    assert verl.kind_of("taco") == "code" and verl.kind_of("codeforces") == "code"
    assert verl.kind_of("mine", "code") == "code" and verl.kind_of("mine", "math") == "math"
    assert verl.kind_of("mine") is None and verl.kind_of("mine", "chat") is None
    assert verl.kind_of("mine", None, {"mine": "code"}) == "code"
    assert verl.kind_of("taco", None, {"taco": "math"}) == "math"


def test_a_verl_row_is_told_from_the_other_formats():
    assert detect_format(row("openai/gsm8k", "72")) == "verl"
    assert detect_format({"question": "q", "answer": "#### 4"}) == "math"


MALFORMED = {
    "ground truth not JSON": (row("taco", "{'inputs': [1]}"), "not valid JSON"),
    "ground truth a JSON list": (row("taco", "[1, 2]"), "expected an object"),
    "no outputs": (row("taco", json.dumps({"inputs": ["1"]})), "no inputs/outputs"),
    "lengths differ": (row("taco", json.dumps({"inputs": ["1"], "outputs": []})), "1 inputs but 0 outputs"),
    "no tests": (row("taco", json.dumps({"inputs": [], "outputs": []})), "no tests"),
    "fn_name not an identifier": (
        row("apps", json.dumps({"inputs": [[1]], "outputs": [1], "fn_name": "os.system"})),
        "not an identifier",
    ),
    "call input not a list": (row("apps", json.dumps({"inputs": [1], "outputs": [1], "fn_name": "f"})), "argument"),
    "nested past the recursion limit": (row("taco", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    "unknown data source": (row("searchR1_nq", "paris", ability="qa"), "neither a code nor a math source"),
    "math gold empty": (row("openai/gsm8k", "   "), "empty"),
    "math gold a boolean": (row("openai/gsm8k", True), "a boolean is not"),
    "math gold an object": (row("openai/gsm8k", {"answer": 4}), "expected the gold answer"),
    "no reward_model.ground_truth": ({**row("taco", "x"), "reward_model": {"style": "rule"}}, "ground_truth"),
    "prompt not chat messages": ({**row("openai/gsm8k", "4"), "prompt": {"role": "user"}}, "list of chat messages"),
    "prompt without text": ({**row("openai/gsm8k", "4"), "prompt": [{"role": "user", "content": None}]}, "text"),
    "data_source not a string": ({**row("taco", STDIN_TRUTH), "data_source": 7}, "data_source"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_row_is_refused_with_its_reason(name):
    bad, reason = MALFORMED[name]
    with pytest.raises(MalformedRow, match=reason):
        verl.parse(0, bad)


def test_malformed_rows_are_skipped_and_the_honest_ones_kept(tmp_path):
    path = tmp_path / "mixed.jsonl"
    bad = [MALFORMED[name][0] for name in sorted(MALFORMED)]
    write_jsonl(path, [HONEST[0], *bad, HONEST[3]])
    report = load_tasks(path, "verl")
    assert [t.task_id for t in report.tasks] == ["0", "3"]
    assert len(report.errors) == len(bad)
    assert all(error.reason for error in report.errors)


def test_an_oversized_ground_truth_is_refused_before_it_is_decoded(monkeypatch):
    decoded = []
    monkeypatch.setattr(verl.json, "loads", lambda text: decoded.append(text))
    huge = "[" + "0," * 50 + "0]"
    with pytest.raises(MalformedRow, match="of 103 characters"):
        verl.code_task("0", "p", huge, limit=100)
    with pytest.raises(MalformedRow, match="of 103 characters"):
        verl.math_task("0", "p", huge, limit=100)
    assert decoded == []
    monkeypatch.undo()
    assert verl.code_task("0", "p", STDIN_TRUTH, limit=len(STDIN_TRUTH)).kind == "stdin"  # the control: at the bound
