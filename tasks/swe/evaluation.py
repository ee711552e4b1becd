"""``python -m gym grade --swe``: predictions over a task file, graded end to end.

::

    python -m gym grade --swe --tasks FILE [--repos-dir DIR] --solutions FILE|gold|empty [--json OUT]

Predictions are read in every form the SWE-bench harness and sb-cli accept (`read_predictions`):
JSON Lines of ``{"instance_id", "model_patch", "model_name_or_path"}``, a JSON list of those, or sb-cli's
object keyed by instance id. A null or missing ``model_patch`` is an empty patch, which is not run (the
harness's rule): its status is ``empty``. ``gold`` grades each instance's own ``patch``, ``empty`` an
empty diff in a container (the control run: the base tree must fail its F2P tests). Images are built
first (cached by input hash, `tasks.swe.images`), then every prediction is graded in a fresh container.
Prints one line per prediction and the totals; ``--json OUT`` writes ``{"total", "resolved",
"infra_errors", "invalid", "patch_apply_failed", "tampered", "empty", "instances": [{"instance_id",
"resolved", "status", "f2p": {"success", "failure"}, "p2p": {...}, "partial", "stripped", ...}]}``, the
harness's report fields beside them (`tasks.swe.resolution.HarnessReport`) and the skipped rows.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import math
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel, ConfigDict

from sandbox.config import SandboxConfig
from sandbox.distribution import resolve
from tasks.errors import SourceError
from tasks.source import RowError
from tasks.swe.grader import SweGrader, SweGraderConfig, grade_predictions, grading_budgets
from tasks.swe.images import build_images
from tasks.swe.instance import SweInstance, load_instances
from tasks.swe.resolution import HarnessReport, InstanceResult, SweReport
from tasks.swe.workspace import MAX_DIFF_BYTES
from tasks.task_ids import unknown_ids_hint

log = logging.getLogger(__name__)
NOTHING_TO_GRADE = 5  # the exit code `gym grade` gives when nothing was graded (gym.commands.grade)

BUILTIN_SOLUTIONS = ("gold", "empty")


class Prediction(BaseModel):
    """One candidate patch for one instance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str
    model_patch: str
    model_name_or_path: str | None = None


MAX_PREDICTIONS_BYTES = 256 << 20
"""A predictions file (decompressed) past this is refused unread: 2,294 SWE-bench predictions of a few KiB each
are ~10 MiB, and every patch past `tasks.swe.workspace.MAX_DIFF_BYTES` (16 MiB) is refused when graded anyway."""

_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
_ROW_KEYS = ("instance_id", "model_patch", "model_name_or_path")
_SURROGATE = re.compile("[\ud800-\udfff]")  # a "\\ud800" escape: text no file or container can be given


class _Object(dict):
    """A JSON object that keeps its pairs in order, repeated keys included (``json`` keeps the last silently:
    ``{"a": {...}, "a": {...}}`` would hide one of two predictions)."""

    pairs: list[tuple[str, Any]]
    repeated: str | None  # the first key given twice


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    obj.pairs = pairs
    obj.repeated = None
    if len(obj) < len(pairs):
        seen: set[str] = set()
        obj.repeated = next(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def json_value(text: str | bytes) -> Any | RowError:
    """The JSON value of ``text``, objects as `_Object` (repeated keys kept), or why it is not one (nesting past
    the parser's depth included)."""
    try:
        return json.loads(text, object_pairs_hook=_object)
    except RecursionError:
        return RowError(index=0, reason="nested deeper than the JSON reader goes")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return RowError(index=0, reason=f"invalid JSON: {err}")


def _bounded_bytes(path: Path) -> bytes | RowError:
    """The file's bytes (gunzipped when they start as gzip does), read only up to the bound; a path that cannot be
    opened is the caller's `SourceError`, what it holds a `RowError`."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_PREDICTIONS_BYTES:
                return RowError(index=0, reason=f"the file is {size} bytes, over the {MAX_PREDICTIONS_BYTES} read")
            raw = handle.read(MAX_PREDICTIONS_BYTES + 1)  # a file still growing, or a device, stops here
    except OSError as err:
        raise SourceError(f"{path}: cannot be read: {err.strerror or err}") from err
    if raw.startswith(_GZIP):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
                raw = stream.read(MAX_PREDICTIONS_BYTES + 1)
        except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
            return RowError(index=0, reason=f"not a readable gzip file: {err}")
    if len(raw) > MAX_PREDICTIONS_BYTES:
        return RowError(index=0, reason=f"the file holds over the {MAX_PREDICTIONS_BYTES} bytes read")
    return raw.removeprefix(_BOM)


def _prediction_rows(raw: bytes) -> Iterator[tuple[int, Any]]:
    """``(index, row)`` for every prediction the bytes hold, a row being an object or a `RowError`. The form is
    read from the content: one JSON value (a list of rows; an object that is one row, or sb-cli's object keyed by
    instance id) or JSON Lines (a file that is not one value and holds a line that is an object)."""
    opening = raw.lstrip()[:1]
    if not opening:
        return
    if opening not in (b"[", b"{"):
        yield 0, RowError(index=0, reason="not JSON rows: a predictions file opens with '[' or '{'")
        return
    document = json_value(raw)
    if isinstance(document, (list, _Object)):
        yield from document_rows(document)
    else:  # one broken document, or JSON Lines
        lines = [(i, line) for i, line in enumerate(filter(bytes.strip, raw.splitlines()))]
        rows = [(i, json_value(line)) for i, line in lines] if opening == b"{" else []
        if not any(isinstance(row, dict) for _, row in rows):
            what = "a JSON list" if opening == b"[" else "one JSON value or JSON Lines"
            yield 0, RowError(index=0, reason=f"not {what}: {document.reason}")
            return
        yield from ((i, RowError(index=i, reason=row.reason) if isinstance(row, RowError) else row) for i, row in rows)


def document_rows(document: Any) -> Iterator[tuple[int, Any]]:
    """``(index, row)`` of one JSON value read by `json_value`: a list of rows, an object that is one row, or
    sb-cli's object keyed by instance id; anything else is one `RowError`."""
    if isinstance(document, list):
        yield from enumerate(document)
    elif isinstance(document, _Object) and any(not isinstance(document.get(k, {}), dict) for k in _ROW_KEYS):
        yield 0, document  # one row
    elif isinstance(document, _Object):
        yield from _keyed_rows(document)
    else:
        yield 0, RowError(index=0, reason=f"predictions are a list or an object, not a {_kind(document)}")


def _keyed_rows(document: _Object) -> Iterator[tuple[int, Any]]:
    """sb-cli's ``{"<instance_id>": {"model_patch", "model_name_or_path"}}``: the key is the id."""
    for index, (key, value) in enumerate(document.pairs):
        if not isinstance(value, dict):
            yield index, RowError(index=index, reason=f"entry {key!r} is a {_kind(value)}, not an object")
        elif "instance_id" in value and value["instance_id"] != key:
            inner = value["instance_id"]
            yield index, RowError(index=index, reason=f"entry {key!r} holds instance_id {inner!r}: not its key")
        elif value.repeated is not None:
            yield index, RowError(index=index, reason=f"entry {key!r} gives the key {value.repeated!r} twice")
        else:
            yield index, _object([*value.pairs, ("instance_id", key)] if "instance_id" not in value else value.pairs)


def _kind(value: Any) -> str:
    kinds = {dict: "object", _Object: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _prediction(index: int, row: Any) -> Prediction | RowError:
    """The prediction of one row, or why it is none."""
    if not isinstance(row, dict):
        return RowError(index=index, reason=f"row is a {_kind(row)}, not a JSON object")
    if row.repeated is not None:
        return RowError(index=index, reason=f"the row gives the key {row.repeated!r} twice")
    instance_id, patch, model = row.get("instance_id"), row.get("model_patch"), row.get("model_name_or_path")
    if not isinstance(instance_id, str) or not instance_id.strip():
        return RowError(index=index, reason=f"instance_id must be a non-empty string, not a {_kind(instance_id)}")
    if patch is not None and not isinstance(patch, str):
        return RowError(
            index=index, reason=f"model_patch of {instance_id!r} must be a string or null, not a {_kind(patch)}"
        )
    if model is not None and not isinstance(model, str):
        return RowError(index=index, reason=f"model_name_or_path of {instance_id!r} must be a string or null")
    if any(_SURROGATE.search(text) for text in (instance_id, patch or "", model or "")):
        return RowError(index=index, reason=f"the row of {instance_id!r} is not valid Unicode text (a lone surrogate)")
    return Prediction(instance_id=instance_id, model_patch=patch or "", model_name_or_path=model)


def read_predictions(path: Path) -> tuple[list[Prediction], list[RowError]]:
    """Predictions of a file in any form the SWE-bench harness or sb-cli reads; a row that cannot be one, and every
    row of an instance given different patches, is reported and skipped (identical repeats count once). Raises
    `SourceError` only for a path that is no file."""
    raw = _bounded_bytes(resolve(Path(path)))
    if isinstance(raw, RowError):
        return [], [raw]
    return predictions_of(_prediction_rows(raw))


def predictions_of(rows: Iterable[tuple[int, Any]]) -> tuple[list[Prediction], list[RowError]]:
    """The predictions of ``(index, row)`` pairs (`document_rows`); a row that cannot be one, and every row of an
    instance given different patches, is reported and skipped (identical repeats count once)."""
    read: list[tuple[int, Prediction]] = []
    errors: list[RowError] = []
    for index, row in rows:
        prediction = row if isinstance(row, RowError) else _prediction(index, row)
        if isinstance(prediction, RowError):
            errors.append(prediction)
        else:
            read.append((index, prediction))
    patches: dict[str, set[str]] = {}
    for _, prediction in read:
        patches.setdefault(prediction.instance_id, set()).add(prediction.model_patch)
    predictions: dict[str, Prediction] = {}
    for index, prediction in read:
        if len(patches[prediction.instance_id]) > 1:
            reason = f"instance {prediction.instance_id!r} has {len(patches[prediction.instance_id])} different patches"
            errors.append(RowError(index=index, reason=reason + ": none is graded"))
        else:
            predictions.setdefault(prediction.instance_id, prediction)
    return list(predictions.values()), sorted(errors, key=lambda e: e.index)


def builtin_predictions(choice: str, instances: tuple[SweInstance, ...]) -> list[Prediction]:
    """``gold``: every instance's own patch; ``empty``: an empty diff for every instance."""
    return [Prediction(instance_id=i.instance_id, model_patch=i.patch if choice == "gold" else "") for i in instances]


def evaluate(
    pairs: list[tuple[SweInstance, str]],
    repos_dir: Path | None,
    config: SweGraderConfig,
    sandbox: SandboxConfig,
    deadline_s: float = math.inf,
) -> SweReport:
    """Build the images the pairs need, then grade every pair (synchronous entry point); a pair whose grading has
    not started within ``deadline_s`` of the first is an ``infra_error`` (`grade_predictions`)."""
    needed = list({instance.instance_id: instance for instance, _ in pairs}.values())
    images, errors = build_images(needed, repos_dir)
    results = trio.run(grade_predictions, pairs, images, SweGrader(config), sandbox, deadline_s)
    results = [
        r.model_copy(update={"detail": f"image build failed: {errors[r.instance_id]}"})
        if r.instance_id in errors
        else r
        for r in results
    ]
    return SweReport.of(results)


def print_report(report: SweReport, harness: HarnessReport | None = None) -> None:
    width = max((len(r.instance_id) for r in report.instances), default=11)
    for r in report.instances:
        stripped = f"  stripped={','.join(s.path for s in r.stripped)}" if r.stripped else ""
        detail = f"  {r.detail.splitlines()[0][:120]}" if r.detail and not r.resolved else ""
        print(
            f"{r.instance_id:<{width}}  {r.status:<18}  f2p {len(r.f2p.success)}/{r.f2p.total}  "
            f"p2p {len(r.p2p.success)}/{r.p2p.total}  {r.wall_s:6.1f}s{stripped}{detail}"
        )
    rate = report.resolved / report.total if report.total else 0.0
    print(
        f"resolved {report.resolved}/{report.total} ({rate:.3f}), patch_apply_failed {report.patch_apply_failed}, "
        f"invalid {report.invalid}, tampered {report.tampered}, empty {report.empty}, "
        f"infra_errors {report.infra_errors}"
    )
    if harness is not None:
        print(
            f"as the SWE-bench harness counts: {harness.total_instances} instances, {harness.submitted_instances} "
            f"submitted, {harness.completed_instances} completed, {harness.resolved_instances} resolved, "
            f"{harness.unresolved_instances} unresolved, {harness.empty_patch_instances} empty patches, "
            f"{harness.error_instances} errors, {len(harness.incomplete_ids)} incomplete"
        )


def empty_result(prediction: Prediction) -> InstanceResult:
    """An empty or null patch, not run (the SWE-bench harness's rule): unresolved, status ``empty``."""
    detail = "empty patch: not run (the SWE-bench harness counts it apart, unresolved)"
    return InstanceResult(instance_id=prediction.instance_id, resolved=False, status="empty", detail=detail)


def oversized_result(prediction: Prediction, size: int, limit: int) -> InstanceResult:
    """A patch past the caller's bound, not run: the candidate's failure to apply (0, never masked)."""
    detail = f"the patch is {size} bytes, over the {limit} bytes graded (max_patch_bytes): not run"
    return InstanceResult(
        instance_id=prediction.instance_id, resolved=False, status="patch_apply_failed", detail=detail
    )


def grade_swe(
    predictions: Sequence[Prediction],
    by_id: dict[str, SweInstance],
    repos_dir: Path | None,
    config: SweGraderConfig,
    sandbox: SandboxConfig,
    *,
    run_empty: bool = False,
    max_patch_bytes: int = MAX_DIFF_BYTES,
    deadline_s: float = math.inf,
) -> list[InstanceResult]:
    """The results of the ``predictions`` that name an instance of ``by_id`` (the others are the caller's to
    report): each graded in a fresh container, the graded ones first, then those not run. An empty patch is not run
    (the harness's rule) unless ``run_empty`` (the control run of ``--solutions empty``); a patch past
    ``max_patch_bytes`` is not run either (`oversized_result`); a prediction whose grading has not started within
    ``deadline_s`` is an ``infra_error`` (one that started is graded to its end). `gym grade --swe` and the sandbox service's ``/v1/grade`` both grade through here."""
    known = [p for p in predictions if p.instance_id in by_id]
    sizes = {p.instance_id: len(p.model_patch.encode("utf-8", errors="surrogatepass")) for p in known}
    not_run = [
        empty_result(p) if not p.model_patch else oversized_result(p, sizes[p.instance_id], max_patch_bytes)
        for p in known
        if (not p.model_patch and not run_empty) or sizes[p.instance_id] > max_patch_bytes
    ]
    skipped = {r.instance_id for r in not_run}
    graded = [(by_id[p.instance_id], p.model_patch) for p in known if p.instance_id not in skipped]
    log.info("grading %d predictions (%d not run)", len(graded), len(not_run))
    results = list(evaluate(graded, repos_dir, config, sandbox, deadline_s).instances) if graded else []
    return results + not_run


def grading_sandbox(path: Path | None) -> SandboxConfig:
    return grading_budgets(SandboxConfig.from_yaml(path) if path is not None else SandboxConfig())


def report_document(report: SweReport, harness: HarnessReport) -> dict[str, Any]:
    """Our totals and per-instance results with the harness's report fields beside them (``--json``'s document,
    and ``/v1/grade``'s answer to predictions)."""
    return report.model_dump(mode="json") | harness.model_dump(mode="json")


def run_swe(args: argparse.Namespace) -> int:
    """The ``--swe`` mode of ``python -m gym grade``."""
    # --tasks and --solutions are required by the parser; a bad --sandbox-config (exit 2) is found before the
    # instances load, and an unreadable file raises TaskError: one `gym: error:` line, exit 5 (gym.fault)
    sandbox = grading_sandbox(args.sandbox_config)
    loaded = load_instances(args.tasks)
    choice = str(args.solutions)
    builtin = choice in BUILTIN_SOLUTIONS and not Path(choice).exists()
    if builtin:
        predictions, bad = builtin_predictions(choice, loaded.instances), []
    else:
        predictions, bad = read_predictions(args.solutions)
    for error in bad:
        log.warning("%s: skipped prediction row %d: %s", args.solutions, error.index, error.reason)
    prefix = getattr(args, "id_prefix", "") or ""  # --id-prefix names the instances as a pool's id_prefix would
    by_id = {prefix + instance_id: instance for instance_id, instance in loaded.by_id().items()}
    known = [p for p in predictions if p.instance_id in by_id]
    unknown = sorted({p.instance_id for p in predictions if p.instance_id not in by_id})
    hint = unknown_ids_hint(list(by_id), unknown)  # a few instances the file does hold
    if unknown:
        log.warning(
            "%d predictions name instances not in %s: %s (%s)", len(unknown), args.tasks, ", ".join(unknown[:10]), hint
        )
    overrides = {"log_dir": args.swe_log_dir}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.test_timeout is not None:
        overrides["test_timeout_s"] = args.test_timeout
    config = SweGraderConfig(**overrides)
    results = grade_swe(predictions, by_id, args.repos_dir, config, sandbox, run_empty=builtin)
    report = SweReport.of(results)
    harness = HarnessReport.of(results, [i.instance_id for i in loaded.instances])
    print_report(report, harness)
    if args.json is not None:
        document = report_document(report, harness)
        document["skipped_task_rows"] = [e.model_dump() for e in loaded.errors]
        document["skipped_solution_rows"] = [e.model_dump() for e in bad]
        document["unknown_instance_ids"] = unknown
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if predictions and not known:  # every prediction names an instance the file does not hold
        print(f"grade: nothing graded: no prediction of {args.solutions} names an instance of {args.tasks}; {hint}",
              file=sys.stderr)  # fmt: skip
        return NOTHING_TO_GRADE
    return 0


class DerivedTests(BaseModel):
    """Test ids derived by running an instance's tests with its gold patch and with none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    failing_with_gold: tuple[str, ...]  # broken or flaky at gold: kept out of both lists
    detail: str = ""


def derive_tests(
    instances: list[SweInstance], repos_dir: Path | None, config: SweGraderConfig, sandbox: SandboxConfig
) -> list[DerivedTests]:
    """F2P = PASSED with the gold patch and not with an empty one; P2P = PASSED with both."""
    import tempfile

    from tasks.swe import testlog

    derived: list[DerivedTests] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = {choice: Path(tmp) / choice for choice in BUILTIN_SOLUTIONS}
        for choice, folder in logs.items():
            pairs = [(i, p.model_patch) for i, p in zip(instances, builtin_predictions(choice, tuple(instances)))]
            evaluate(pairs, repos_dir, config.model_copy(update={"log_dir": folder}), sandbox)
        for instance in instances:
            runs = {}
            for choice, folder in logs.items():
                path = folder / instance.instance_id / "test.log"
                runs[choice] = testlog.parse(path.read_text()) if path.exists() else testlog.PytestLog()
            gold, empty = runs["gold"], runs["empty"]
            passed = testlog.TestStatus.PASSED
            detail = "" if gold.ran and empty.ran else "a test run left no usable log (see the grading lines above)"
            derived.append(
                DerivedTests(
                    instance_id=instance.instance_id,
                    fail_to_pass=tuple(
                        t for t, s in gold.statuses.items() if s == passed and empty.statuses.get(t) != passed
                    ),
                    pass_to_pass=tuple(
                        t for t, s in gold.statuses.items() if s == passed and empty.statuses.get(t) == passed
                    ),
                    failing_with_gold=tuple(t for t, s in gold.statuses.items() if s != passed),
                    detail=detail,
                )
            )
    return derived
