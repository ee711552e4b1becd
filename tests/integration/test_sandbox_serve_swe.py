"""SWE predictions on `gym sandbox-serve`'s ``POST /v1/grade`` (issue 44 item 1), against a real server process over
the real Docker engine and the shipped instances (their images built once, cached by input hash).

Honest controls: a gold patch resolves and an empty one is counted apart (``empty_patch_ids``), in the list form
and in sb-cli's object keyed by id. Attacks, each graded in a real container and scored: a patch that edits the
tests (stripped, unresolved), a fix that also writes outside the repository (that section cut and reported: the
fix alone is graded), a patch past ``swe.max_patch_bytes`` (not run: an error id). Requests refused whole, before any
container: ids that name no instance (the error lists valid ones), malformed predictions, two patches for one id,
too many predictions. The server keeps answering after each, and leaves no container behind
(tests/sandbox_serve_support.sandbox_service).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.sandbox_serve_support import CONFIG, sandbox_service
from tests.swe_support import TOOLZ, images, new_file, shipped

pytestmark = [pytest.mark.slow, pytest.mark.docker]

INFLECTION = "jpvanhal__inflection-gym-1"
ITERTOOLS = "more-itertools__more-itertools-gym-1"
MAX_PATCH = 65536
SWE_CONFIG = CONFIG | {
    "swe": {
        "max_predictions": 3,
        "max_patch_bytes": MAX_PATCH,
        "max_request_s": 600,
        "grader": {"test_timeout_s": 120, "setup_timeout_s": 60, "concurrency": 2},
    }
}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    shipped()
    images()  # built before the server starts, so no request waits on a first build
    with sandbox_service(tmp_path_factory.mktemp("sandbox-serve-swe"), SWE_CONFIG) as running:
        yield running


def graded(service, predictions) -> dict:
    status, answer, _ = service.call("POST", "/v1/grade", {"predictions": predictions}, timeout=900)
    assert status == 200, answer
    return answer


def refused(service, body, status: int) -> list:
    code, answer, _ = service.call("POST", "/v1/grade", body)
    assert code == status, answer
    return answer["detail"]


def by_id(report: dict) -> dict[str, dict]:
    return {r["instance_id"]: r for r in report["instances"]}


def test_a_gold_patch_resolves_and_an_empty_one_is_counted_apart(service):
    gold = shipped()[TOOLZ].patch
    report = graded(
        service,
        [{"instance_id": TOOLZ, "model_patch": gold, "model_name_or_path": "gold"}, {"instance_id": INFLECTION}],
    )
    assert report["format"] == "swe" and report["resolved_ids"] == [TOOLZ]
    assert report["empty_patch_ids"] == [INFLECTION] and report["error_ids"] == [] and report["unresolved_ids"] == []
    assert report["submitted_instances"] == report["total_instances"] == 2 and report["incomplete_ids"] == []
    result = by_id(report)[TOOLZ]
    assert result["status"] == "resolved" and sorted(result["f2p"]["success"]) == sorted(shipped()[TOOLZ].fail_to_pass)
    assert by_id(report)[INFLECTION]["status"] == "empty" and report["empty"] == 1 and report["resolved"] == 1


def test_gaming_patches_are_graded_and_scored(service):
    instances = shipped()
    edits_tests = instances[TOOLZ].test_patch.replace("assert list(accumulate", "assert True or list(accumulate")
    assert edits_tests != instances[TOOLZ].test_patch
    outside = instances[INFLECTION].patch + new_file("../escape.py", "print('out')")  # the fix, and a file outside
    huge = instances[ITERTOOLS].patch + new_file("big.txt", "x" * 100 + "\n") * (MAX_PATCH // 150)
    assert len(huge) > MAX_PATCH
    report = graded(  # sb-cli's form: an object keyed by instance id
        service,
        {
            TOOLZ: {"model_patch": edits_tests, "model_name_or_path": "m"},
            INFLECTION: {"model_patch": outside},
            ITERTOOLS: {"model_patch": huge},
        },
    )
    results = by_id(report)
    assert report["unresolved_ids"] == [TOOLZ] and report["error_ids"] == [ITERTOOLS]
    assert report["infra_failure_ids"] == [] and report["empty_patch_ids"] == []
    toolz = results[TOOLZ]
    assert toolz["f2p"]["failure"] and {s["path"] for s in toolz["stripped"]} >= {"toolz/tests/test_itertoolz.py"}
    # the section outside the repository is cut before the diff reaches the container; the fix beside it counts
    assert report["resolved_ids"] == [INFLECTION]
    assert results[INFLECTION]["stripped"] == [{"path": "../escape.py", "reason": "path outside the repository"}]
    assert results[ITERTOOLS]["status"] == "patch_apply_failed" and "max_patch_bytes" in results[ITERTOOLS]["detail"]
    assert results[ITERTOOLS]["wall_s"] == 0.0  # not run


def test_unknown_ids_are_refused_listing_valid_ones(service):
    detail = refused(service, {"predictions": [{"instance_id": "django__django-1", "model_patch": "x"}]}, 422)
    assert detail[0]["loc"] == ["body", "predictions"] and detail[0]["type"] == "unknown_instance"
    assert "django__django-1" in detail[0]["msg"] and repr(TOOLZ) in detail[0]["msg"]


@pytest.mark.parametrize(
    ("predictions", "where", "words"),
    [
        ([{"instance_id": TOOLZ, "model_patch": 5}], 0, "model_patch"),
        (["a patch"], 0, "not a JSON object"),
        ([{"instance_id": ""}], 0, "instance_id"),
        ([{"instance_id": TOOLZ, "model_patch": "a"}, {"instance_id": TOOLZ, "model_patch": "b"}], 0, "2 different"),
        ({TOOLZ: "a patch"}, 0, "not an object"),
        ({TOOLZ: {"instance_id": INFLECTION, "model_patch": "a"}}, 0, "not its key"),
        (7, 0, "a list or an object"),
    ],
)
def test_malformed_predictions_are_refused_naming_the_row(service, predictions, where, words):
    detail = refused(service, {"predictions": predictions}, 422)
    assert detail[0]["loc"] == ["body", "predictions", where] and words in detail[0]["msg"], detail


def test_request_shapes_past_their_bounds_are_refused(service):
    many = [{"instance_id": TOOLZ, "model_patch": ""}] * 4
    detail = refused(service, {"predictions": many}, 413)
    assert detail[0]["type"] == "too_large" and "max_predictions" in detail[0]["msg"]
    repeated = b'{"predictions": {"%s": {"model_patch": "a"}, "%s": {"model_patch": "b"}}}' % ((TOOLZ.encode(),) * 2)
    assert refused(service, repeated, 422)[0]["type"] == "prediction_invalid"  # a JSON reader would keep the last
    assert refused(service, {"predictions": [], "answer": "x"}, 422)[0]["loc"] == ["body", "answer"]
    assert refused(service, {"predictions": []}, 422)[0]["type"] == "too_short"
    health = service.call("GET", "/health")[1]
    assert health["swe"] == {"requests": 0}
    empty = graded(service, {INFLECTION: {"model_patch": None}})  # the control: the service still grades
    assert empty["empty_patch_ids"] == [INFLECTION]


def test_a_cp_row_still_grades_beside_predictions(service):
    row = {"question": "sum", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    code, answer, _ = service.call("POST", "/v1/grade", {"row": row, "answer": "print(sum(map(int, input().split())))"})
    assert code == 200 and answer["passed"], answer


def test_a_patch_that_hangs_past_the_request_deadline_is_scored_and_what_never_started_is_masked():
    """The per-request time bound, on the path the service grades through (`grade_swe`). Attack: a patch whose
    package sleeps at import, so its grading runs past the request's deadline; it was cut there and masked
    (``infra_error``, a door out of a 0); now a started grading runs to its end and the hang is the candidate's
    test timeout, scored. Honest controls: the gold patch under the same deadline resolves; a prediction whose
    grading never started before the deadline is masked with the reason, and no container is left."""
    from tasks.swe.evaluation import Prediction, grade_swe, grading_sandbox
    from tasks.swe.grader import SweGraderConfig
    from tests.swe_support import imported_by_toolz, repos_dir

    instances = shipped()
    images()
    hangs = imported_by_toolz("slow") + new_file("toolz/slow.py", "import time\ntime.sleep(600)")
    # the hang twice, one grading at a time (which of the two takes the slot first is the scheduler's choice): the
    # first holds the slot for its test timeout (20 s), well past the deadline (8 s), which in turn leaves it ample
    # time to start on a loaded machine
    predictions = [Prediction(instance_id=TOOLZ, model_patch=hangs)] * 2
    config = SweGraderConfig(concurrency=1, test_timeout_s=20)
    started = time.monotonic()
    results = grade_swe(predictions, instances, repos_dir(), config, grading_sandbox(None), deadline_s=8.0)
    hung, never = sorted(results, key=lambda r: r.status == "infra_error")
    assert hung.status == "unresolved" and hung.reward == 0.0 and hung.test_run == "timeout", results
    assert never.status == "infra_error" and never.reward is None and "not started within the 8 s" in never.detail
    assert time.monotonic() - started < 120
    gold = [Prediction(instance_id=TOOLZ, model_patch=instances[TOOLZ].patch)]
    [done] = grade_swe(gold, instances, repos_dir(), config, grading_sandbox(None), deadline_s=8.0)
    assert done.status == "resolved"  # the control: an honest patch under the same deadline
