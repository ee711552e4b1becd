"""SWE predictions on ``POST /v1/grade``: a batch of candidate patches in, the SWE-bench harness's report out.

A request is ``{"predictions": P}`` (``"format": "swe"`` may name it), ``P`` in either form sb-cli and the harness
take: a list of ``{"instance_id", "model_patch", "model_name_or_path"}`` rows, or sb-cli's object keyed by
instance id (`tasks.swe.evaluation.document_rows`; one row object alone is a batch of one). Every id must name one
of the service's instances (``swe.instances``, by default the shipped ones `python -m gym tasks build-swe`
makes). The batch is graded by what ``gym grade --swe`` grades with (`tasks.swe.evaluation.grade_swe`): each
patch in a fresh container of its instance's image, protected paths (the tests, pytest's configuration) stripped
and the applied tree checked again, an empty patch not run (``empty_patch_ids``), a patch past
``swe.max_patch_bytes`` not run (``patch_apply_failed``, an error id). The answer is ``--json``'s document
(`tasks.swe.evaluation.report_document`): ``total``, ``resolved``, ..., ``instances`` with each result, and the
harness's ``resolved_ids``, ``unresolved_ids``, ``empty_patch_ids``, ``error_ids``, ... over the submitted ids.

Refused whole, as the harness refuses a predictions file it cannot run: more than ``swe.max_predictions``
predictions (413), a row that is no prediction or an instance given two different patches (422, the row named),
an id that names no instance (422, listing a few valid ids). What a patch does is never an error of the request:
it is its result. No grading of a request starts ``swe.max_request_s`` after its first: what has not started by
then is an ``infra_error`` (masked, ``error_ids``, its reason in ``failure_reasons``); a grading that started runs
to its end, its candidate's hangs ending on their own deadlines and scored (`tasks.swe.grader.grade_predictions`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.config import SandboxConfig
from tasks.source import RowError
from tasks.swe.evaluation import (
    Prediction,
    SweReport,
    document_rows,
    grade_swe,
    json_value,
    predictions_of,
    report_document,
)
from tasks.swe.grader import SweGraderConfig, grading_budgets
from tasks.swe.instance import SweInstance, load_instances
from tasks.swe.resolution import HarnessReport
from tasks.swe.shipped import DEFAULT_OUT, DEFAULT_REPOS_DIR
from tasks.swe.workspace import MAX_DIFF_BYTES
from tasks.task_ids import unknown_ids_hint

_REQUEST_KEYS = frozenset({"predictions", "format"})


def _grader() -> SweGraderConfig:
    return SweGraderConfig(test_timeout_s=300.0, setup_timeout_s=120.0)


class SweGradeOptions(BaseModel):
    """``swe:`` of a sandbox-serve config: what ``/v1/grade`` grades predictions against, and its bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    instances: Path = DEFAULT_OUT
    """The instances predictions may name (JSON Lines in the published schema); by default the shipped ones."""
    repos_dir: Path = DEFAULT_REPOS_DIR
    """Local clones as DIR/owner__name (the shipped instances' are rebuilt from their sdists when missing)."""
    max_predictions: int = Field(8, ge=1, le=1024)
    """Predictions in one request at most (413 above); each is a container and a test run."""
    max_patch_bytes: int = Field(1 << 20, ge=1, le=MAX_DIFF_BYTES)
    """A patch past this is not run: ``patch_apply_failed`` (the candidate's failure, an error id)."""
    max_request_s: float = Field(1800.0, gt=0)
    """Grading time of one request, from its start; what has not started by then is an ``infra_error`` (what
    started runs to its end)."""
    max_requests: int = Field(2, ge=1, le=64)
    """SWE requests waiting or grading at once (503 beyond: retry later); one grades at a time, in arrival order,
    ``grader.concurrency`` containers at once."""
    grader: SweGraderConfig = Field(default_factory=_grader)
    """Deadlines and bounds of each grading (tasks/swe/grader.py): test timeout, set-up steps, log bound."""

    @model_validator(mode="after")
    def _one_grading_fits(self) -> SweGradeOptions:
        whole = self.grader.test_timeout_s + 4 * self.grader.setup_timeout_s
        if self.max_request_s < whole:
            raise ValueError(
                f"swe.max_request_s ({self.max_request_s:g}) must leave one whole grading: grader.test_timeout_s "
                f"+ 4 x grader.setup_timeout_s = {whole:g} (a hanging test is then the candidate's timeout, "
                "not a masked request)"
            )
        return self


class SweRequestError(ValueError):
    """A predictions request the service refuses whole: HTTP ``status`` and FastAPI-style ``detail`` items."""

    def __init__(self, status: int, detail: list[dict[str, Any]]) -> None:
        super().__init__(detail[0]["msg"])
        self.status = status
        self.detail = detail


def _error(status: int, kind: str, loc: list, msg: str) -> SweRequestError:
    return SweRequestError(status, [{"type": kind, "loc": ["body", *loc], "msg": msg[:2000]}])


def swe_document(body: bytes) -> dict | None:
    """The body's JSON object when it is a predictions request (it holds ``predictions``), else None: the row
    formats' path reads it. Repeated keys are kept (`tasks.swe.evaluation.json_value`), so two patches of one id
    in sb-cli's object are seen, not the last one silently."""
    if b'"predictions"' not in body:
        return None
    document = json_value(body)
    if isinstance(document, RowError) or not isinstance(document, dict) or "predictions" not in document:
        return None
    return document


def checked_predictions(document: dict, options: SweGradeOptions, by_id: dict[str, SweInstance]) -> list[Prediction]:
    """The predictions of a request, or `SweRequestError` (see the module docstring)."""
    extra = sorted(set(document) - _REQUEST_KEYS)
    if extra:
        raise _error(422, "extra_forbidden", [extra[0]], "a predictions request holds predictions and format only")
    if document.get("format", "swe") not in ("swe", "auto"):
        raise _error(422, "literal_error", ["format"], "a predictions request's format is 'swe'")
    rows = list(document_rows(document["predictions"]))
    if len(rows) > options.max_predictions:
        limit = options.max_predictions
        raise _error(413, "too_large", ["predictions"], f"{len(rows)} predictions: swe.max_predictions is {limit}")
    predictions, errors = predictions_of(rows)
    if errors:
        raise SweRequestError(
            422,
            [{"type": "prediction_invalid", "loc": ["body", "predictions", e.index], "msg": e.reason} for e in errors],
        )
    if not predictions:
        raise _error(422, "too_short", ["predictions"], "no prediction to grade")
    unknown = sorted({p.instance_id for p in predictions if p.instance_id not in by_id})
    if unknown:
        shown = ", ".join(repr(i[:200]) for i in unknown[:5])
        raise _error(
            422,
            "unknown_instance",
            ["predictions"],
            f"{len(unknown)} prediction(s) name no instance the service grades ({shown}); "
            f"{unknown_ids_hint(sorted(by_id), unknown).replace('the tasks file', 'the service')}",
        )
    return predictions


def load_service_instances(options: SweGradeOptions) -> dict[str, SweInstance]:
    """The instances of ``options.instances`` by id; `FileNotFoundError` naming how to make the shipped ones."""
    if not Path(options.instances).is_file():
        raise FileNotFoundError(
            f"no SWE instances at {options.instances}: run `python -m gym tasks build-swe` (the shipped ones), or "
            "point swe.instances at a file"
        )
    return load_instances(options.instances).by_id()


def grade(
    predictions: list[Prediction], by_id: dict[str, SweInstance], options: SweGradeOptions, sandbox: SandboxConfig
) -> dict[str, Any]:
    """The report of one request's predictions (blocking: run it off the event loop)."""
    results = grade_swe(
        predictions,
        by_id,
        options.repos_dir,
        options.grader,
        grading_budgets(sandbox),
        max_patch_bytes=options.max_patch_bytes,
        deadline_s=options.max_request_s,
    )
    harness = HarnessReport.of(results, [p.instance_id for p in predictions])
    return {"format": "swe"} | report_document(SweReport.of(results), harness)
