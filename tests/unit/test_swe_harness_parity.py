"""SWE-bench harness parity, pure logic: predictions in every form the harness and sb-cli read (and the inputs
that must be row errors, never a traceback), the harness's report fields beside ours, ids cut short by the
harness's parser (issue 44 item 5; tests/integration/test_swe_harness_agreement.py runs swebench itself)."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest

from tasks.errors import SourceError
from tasks.swe import evaluation
from tasks.swe.evaluation import MAX_PREDICTIONS_BYTES, Prediction, read_predictions, run_swe
from tasks.swe.resolution import HarnessReport, InstanceResult, SweReport, TestGroup, group, status_of
from tasks.swe.testlog import TestStatus

PATCH_A = "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
PATCH_B = PATCH_A.replace("x = 2", "x = 3")
ROWS = [
    {"instance_id": "o__r-1", "model_patch": PATCH_A, "model_name_or_path": "org/model"},
    {"instance_id": "o__r-2", "model_patch": None, "model_name_or_path": "org/model"},
    {"instance_id": "o__r-3", "model_name_or_path": "org/model"},  # no model_patch: an empty patch
]
EXPECTED = [
    Prediction(instance_id="o__r-1", model_patch=PATCH_A, model_name_or_path="org/model"),
    Prediction(instance_id="o__r-2", model_patch="", model_name_or_path="org/model"),
    Prediction(instance_id="o__r-3", model_patch="", model_name_or_path="org/model"),
]
SB_CLI = {row["instance_id"]: {k: v for k, v in row.items() if k != "instance_id"} for row in ROWS}

# Each form under names that would mislead a reader going by the extension: the content decides.
FORMS = {
    "jsonl": "".join(json.dumps(row) + "\n" for row in ROWS),
    "json list": json.dumps(ROWS),
    "json list, indented": json.dumps(ROWS, indent=2),
    "sb-cli object": json.dumps(SB_CLI),
    "sb-cli object, indented": json.dumps(SB_CLI, indent=4),
    "sb-cli with inner ids": json.dumps({row["instance_id"]: row for row in ROWS}),
    "jsonl, blank lines and a BOM": "\ufeff\n" + "\n\n".join(json.dumps(row) for row in ROWS) + "\n\n",
}


def written(tmp_path: Path, text: str | bytes, name: str = "preds.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("name", ["preds.jsonl", "preds.json", "predictions"])
def test_every_form_reads_the_same_whatever_the_name(tmp_path, form, name):
    assert read_predictions(written(tmp_path, FORMS[form], name)) == (EXPECTED, [])


def test_one_row_gzip_and_an_empty_file(tmp_path):
    one = json.dumps(ROWS[0])  # one JSON Lines row is also one JSON value: a row, not an object keyed by id
    assert read_predictions(written(tmp_path, one)) == (EXPECTED[:1], [])
    assert read_predictions(written(tmp_path, gzip.compress(FORMS["sb-cli object"].encode()))) == (EXPECTED, [])
    assert read_predictions(written(tmp_path, " \n\t")) == ([], [])
    assert read_predictions(written(tmp_path, "{}")) == ([], [])
    assert read_predictions(written(tmp_path, "[]")) == ([], [])


def test_a_path_that_is_no_file_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="cannot be read"):
        read_predictions(tmp_path / "missing.jsonl")
    with pytest.raises(SourceError, match="cannot be read"):
        read_predictions(tmp_path)


def reasons(path: Path) -> tuple[list[str], list[str]]:
    """(instance ids read, error reasons) of ``path``; read_predictions must not raise."""
    predictions, errors = read_predictions(path)
    return [p.instance_id for p in predictions], [e.reason for e in errors]


GOOD = json.dumps(ROWS[0])
# (file content, instance ids still read, a phrase of each error's reason in order)
ATTACKS = {
    "broken list": ('[{"instance_id": "a", "model_patch": ""},', [], ["not a JSON list: invalid JSON"]),
    "broken sb-cli object": (FORMS["sb-cli object, indented"][:-3], [], ["not one JSON value or JSON Lines"]),
    "jsonl with a broken line": (f'{GOOD}\n{{"instance_id": "b", \n{GOOD}\n', ["o__r-1"], ["invalid JSON"]),
    "not json at all": ("instance_id,model_patch\na,\n", [], ["opens with '[' or '{'"]),
    "binary": (b"\x00\xff\xfe" * 100, [], ["opens with '[' or '{'"]),
    "binary after a brace": (b"{\xff\xfe\x00" * 100, [], ["not one JSON value or JSON Lines"]),
    "a top-level string": ('"o__r-1"', [], ["opens with '[' or '{'"]),
    "deep list": ("[" * 100_000 + "]" * 100_000, [], ["nested deeper than the JSON reader goes"]),
    "deep object": ('{"a":' * 100_000 + "1" + "}" * 100_000, [], ["nested deeper"]),
    "deep row in jsonl": (f"{GOOD}\n{'[' * 100_000}\n", ["o__r-1"], ["nested deeper"]),
    "deep patch": ('[{"instance_id": "a", "model_patch": ' + "[" * 50_000 + "]" * 50_000 + "}]", [], ["nested"]),
    "inner id mismatch": (json.dumps({"a": {"instance_id": "b", "model_patch": PATCH_A}}), [], ["not its key"]),
    "keyed value not an object": (json.dumps({"a": PATCH_A, "b": {"model_patch": ""}}), ["b"], ["is a string"]),
    "keyed value a list": (json.dumps({"a": [PATCH_A]}), [], ["entry 'a' is a list, not an object"]),
    "id a number": (json.dumps([{"instance_id": 7, "model_patch": ""}]), [], ["instance_id must be a non-empty"]),
    "id empty": (json.dumps([{"instance_id": " ", "model_patch": ""}]), [], ["instance_id must be a non-empty"]),
    "id missing": (json.dumps([{"model_patch": PATCH_A}]), [], ["instance_id must be a non-empty string, not a null"]),
    "patch an object": (json.dumps([{"instance_id": "a", "model_patch": {"diff": "x"}}]), [], ["not a object"]),
    "patch a number": ('{"instance_id": "a", "model_patch": 1}', [], ["model_patch of 'a' must be a string or null"]),
    "patch true": ('[{"instance_id": "a", "model_patch": true}]', [], ["not a boolean"]),
    "model a list": ('[{"instance_id": "a", "model_name_or_path": ["m"]}]', [], ["model_name_or_path of 'a'"]),
    "row a list": ('[["a", "diff"], {"instance_id": "b"}]', ["b"], ["row is a list, not a JSON object"]),
    "row a number in jsonl": (f"{GOOD}\n42\n", ["o__r-1"], ["row is a number"]),
    "lone surrogate": ('[{"instance_id": "a", "model_patch": "\\ud800"}]', [], ["lone surrogate"]),
    "repeated key in a row": ('[{"instance_id": "a", "model_patch": "", "model_patch": "x"}]', [], ["'model_patch'"]),
    "repeated key in an entry": ('{"a": {"model_patch": "", "model_patch": "x"}}', [], ["twice"]),
    "repeated id, another patch": (
        json.dumps([ROWS[0], {**ROWS[0], "model_patch": PATCH_B}, ROWS[1]]),
        ["o__r-2"],
        ["2 different patches: none is graded"] * 2,
    ),
    # json.loads keeps the last of two equal keys: the keyed form's first prediction would vanish unseen
    "repeated key in the sb-cli object": (
        '{"a": {"model_patch": "x"}, "a": {"model_patch": "y"}}',
        [],
        ["'a' has 2 different patches"] * 2,
    ),
    "repeated id, the same patch": (
        json.dumps([ROWS[0], ROWS[0], {**ROWS[0], "model_name_or_path": "m"}]),
        ["o__r-1"],
        [],
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_bad_input_is_a_row_error_never_a_traceback(tmp_path, attack):
    content, ids, phrases = ATTACKS[attack]
    read, errors = reasons(written(tmp_path, content))
    assert read == ids, errors
    assert len(errors) == len(phrases) and all(p in e for p, e in zip(phrases, errors)), errors


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path):
    sparse = tmp_path / "huge.jsonl"
    with sparse.open("wb") as handle:  # a sparse file: nothing of it is allocated here, nor read by the reader
        handle.write(GOOD.encode())
        handle.truncate(MAX_PREDICTIONS_BYTES + 1)
    assert reasons(sparse) == ([], [f"the file is {MAX_PREDICTIONS_BYTES + 1} bytes, over the 268435456 read"])


def test_a_gzip_bomb_stops_at_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluation, "MAX_PREDICTIONS_BYTES", 1 << 20)
    bomb = gzip.compress(b"[" + b" " * (4 << 20) + b"]")  # 4 MiB of spaces in ~4 KiB
    assert reasons(written(tmp_path, bomb)) == ([], ["the file holds over the 1048576 bytes read"])
    assert "not a readable gzip file" in reasons(written(tmp_path, bomb[:100]))[1][0]
    fits = gzip.compress(FORMS["json list"].encode())
    assert reasons(written(tmp_path, fits))[0] == ["o__r-1", "o__r-2", "o__r-3"]  # the control


def result(instance_id: str, status: str, detail: str = "") -> InstanceResult:
    return InstanceResult(instance_id=instance_id, resolved=status == "resolved", status=status, detail=detail)


STATUSES = ("resolved", "unresolved", "patch_apply_failed", "invalid", "tampered", "infra_error", "empty")
# swebench 5.0.2, harness/reporting.py make_run_report (schema_version 2), without a docker client
HARNESS_FIELDS = {
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "infra_failure_instances",
    "ambiguous_failure_instances",
    "empty_patch_instances",
    "error_instances",
    "completed_ids",
    "incomplete_ids",
    "empty_patch_ids",
    "submitted_ids",
    "resolved_ids",
    "unresolved_ids",
    "infra_failure_ids",
    "ambiguous_failure_ids",
    "failure_reasons",
    "error_ids",
    "schema_version",
}


def test_the_harness_report_maps_each_status():
    results = [result(f"i-{status}", status, "docker died\nmore" * (status == "infra_error")) for status in STATUSES]
    tasks = [r.instance_id for r in results] + ["i-none"]
    report = HarnessReport.of(results, tasks).model_dump(mode="json")
    assert set(report) == HARNESS_FIELDS
    assert report == {
        "total_instances": 8,
        "submitted_instances": 7,
        "completed_instances": 3,
        "resolved_instances": 1,
        "unresolved_instances": 2,
        "infra_failure_instances": 1,
        "ambiguous_failure_instances": 0,
        "empty_patch_instances": 1,
        "error_instances": 3,
        "completed_ids": ["i-resolved", "i-tampered", "i-unresolved"],
        "incomplete_ids": ["i-none"],
        "empty_patch_ids": ["i-empty"],
        "submitted_ids": sorted(f"i-{s}" for s in STATUSES),
        "resolved_ids": ["i-resolved"],
        "unresolved_ids": ["i-tampered", "i-unresolved"],
        "infra_failure_ids": ["i-infra_error"],
        "ambiguous_failure_ids": [],
        "failure_reasons": {"i-infra_error": "docker died"},
        "error_ids": ["i-infra_error", "i-invalid", "i-patch_apply_failed"],
        "schema_version": 2,
    }
    # as the harness: every submitted prediction is exactly one of completed, empty patch or error
    assert report["completed_instances"] + report["empty_patch_instances"] + report["error_instances"] == 7
    ours = SweReport.of(results)
    assert (ours.total, ours.resolved, ours.empty, ours.tampered, ours.infra_errors) == (7, 1, 1, 1, 1)
    assert results[-1].reward == 0.0  # an empty patch is scored, never masked


def test_harness_report_can_fail():
    """The check is not vacuous: a run with nothing resolved says so."""
    report = HarnessReport.of([result("a", "unresolved")], ["a", "b"])
    assert (report.resolved_instances, report.unresolved_ids, report.incomplete_ids) == (0, ("a",), ("b",))


def test_a_cut_id_stands_for_the_tests_it_was_cut_from():
    """SWE-bench's parser splits a line at whitespace, so ``t.py::f[a b]`` is listed as ``t.py::f[a``."""
    statuses = {"t.py::f[a b]": TestStatus.PASSED, "t.py::f[a c]": TestStatus.PASSED, "t.py::f[ab]": TestStatus.FAILED}
    assert status_of("t.py::f[a", statuses) == TestStatus.PASSED  # f[ab] does not go on after whitespace
    assert status_of("t.py::f[a b]", statuses) == TestStatus.PASSED
    assert status_of("t.py::f[x", statuses) is None
    assert status_of("t.py::g", statuses) is None  # a whole id is never matched by prefix
    statuses["t.py::f[a d]"] = TestStatus.SKIPPED  # the worst of them
    assert status_of("t.py::f[a", statuses) == TestStatus.SKIPPED
    assert group(["t.py::f[a", "t.py::f[ab]"], statuses, frozenset({TestStatus.PASSED})) == TestGroup(
        failure=("t.py::f[a", "t.py::f[ab]")
    )


def instances_file(tmp_path: Path, ids: list[str]) -> Path:
    row = {
        "repo": "o/r",
        "base_commit": "a" * 40,
        "patch": PATCH_A,
        "test_patch": "diff --git a/t.py b/t.py\n",
        "problem_statement": "x",
    }
    rows = [{**row, "instance_id": i, "FAIL_TO_PASS": ["t.py::f"], "PASS_TO_PASS": []} for i in ids]
    return written(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), "instances.jsonl")


def test_grade_writes_both_reports_and_never_runs_an_empty_patch(tmp_path, monkeypatch):
    graded: list[str] = []

    def fake_evaluate(pairs, repos_dir, config, sandbox, deadline_s=None):
        graded.extend(instance.instance_id for instance, _ in pairs)
        return SweReport.of([result(i.instance_id, "resolved") for i, _ in pairs])

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    tasks = instances_file(tmp_path, ["o__r-1", "o__r-2", "o__r-3", "o__r-4"])
    out = tmp_path / "report.json"
    preds = written(tmp_path, FORMS["sb-cli object"] + "\n", "preds.json")
    args = argparse.Namespace(
        sandbox_config=None, tasks=tasks, solutions=preds, swe_log_dir=None, concurrency=None, test_timeout=None,
        repos_dir=None, json=out,
    )  # fmt: skip
    assert run_swe(args) == 0
    assert graded == ["o__r-1"]
    document = json.loads(out.read_text())
    assert set(document) >= HARNESS_FIELDS | {"total", "resolved", "empty", "tampered", "instances"}
    assert (document["total"], document["resolved"], document["empty"]) == (3, 1, 2)
    assert [i["status"] for i in document["instances"]] == ["resolved", "empty", "empty"]
    assert document["empty_patch_ids"] == ["o__r-2", "o__r-3"] and document["incomplete_ids"] == ["o__r-4"]
    assert (document["total_instances"], document["submitted_instances"], document["completed_instances"]) == (4, 3, 1)
    # the builtin `empty` is the control run: graded in a container, never counted as an empty patch
    graded.clear()
    assert run_swe(argparse.Namespace(**{**vars(args), "solutions": Path("empty")})) == 0
    assert graded == ["o__r-1", "o__r-2", "o__r-3", "o__r-4"] and json.loads(out.read_text())["empty"] == 0


def test_predictions_of_unknown_instances_name_a_few_known_ones_and_the_prefix(tmp_path, monkeypatch, capsys):
    """One task id everywhere: --id-prefix names the instances as a pool's id_prefix would, and predictions that
    match none are an error listing instances the file does hold, and the prefix that would match them."""
    graded: list[str] = []

    def fake_evaluate(pairs, repos_dir, config, sandbox, deadline_s=None):
        graded.extend(instance.instance_id for instance, _ in pairs)
        return SweReport.of([result(i.instance_id, "resolved") for i, _ in pairs])

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    tasks = instances_file(tmp_path, ["o__r-1", "o__r-2"])
    preds = written(tmp_path, json.dumps({"swe/o__r-1": {"model_patch": PATCH_A}}) + "\n", "preds.json")
    args = argparse.Namespace(
        sandbox_config=None, tasks=tasks, solutions=preds, swe_log_dir=None, concurrency=None, test_timeout=None,
        repos_dir=None, json=None, id_prefix="",
    )  # fmt: skip
    assert run_swe(args) == 5 and graded == []
    err = capsys.readouterr().err
    assert "nothing graded: no prediction of" in err and "'o__r-1', 'o__r-2'" in err and "--id-prefix swe/" in err
    assert run_swe(argparse.Namespace(**{**vars(args), "id_prefix": "swe/"})) == 0 and graded == ["o__r-1"]
