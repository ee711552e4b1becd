"""``python -m gym grade --swe``: predictions over a task file, graded end to end.

::

    python -m gym grade --swe --tasks FILE [--repos-dir DIR] --solutions FILE|gold|empty [--json OUT]

Predictions are JSON Lines ``{"instance_id", "model_patch"}`` (the SWE-bench
predictions convention; other keys such as ``model_name_or_path`` are
ignored, a null ``model_patch`` is an empty one). ``gold`` grades each
instance's own ``patch``, ``empty`` an empty diff. Images are built first
(cached by input hash, `tasks.swe.images`), then every prediction is graded in a
fresh container. Prints one line per prediction and the totals; ``--json OUT``
writes ``{"total", "resolved", "infra_errors", "invalid", "patch_apply_failed",
"tampered", "instances": [{"instance_id", "resolved", "status", "f2p": {"success",
"failure"}, "p2p": {...}, "partial", "stripped", ...}]}`` plus the skipped rows.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict

from sandbox.config import SandboxConfig
from tasks.source import RowError, read_rows
from tasks.swe.grader import SweGrader, SweGraderConfig, grade_predictions, grading_budgets
from tasks.swe.images import build_images
from tasks.swe.instance import SweInstance, load_instances
from tasks.swe.resolution import SweReport

log = logging.getLogger(__name__)

BUILTIN_SOLUTIONS = ("gold", "empty")


class Prediction(BaseModel):
    """One candidate patch for one instance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str
    model_patch: str


def read_predictions(path: Path) -> tuple[list[Prediction], list[RowError]]:
    """Predictions of a JSON Lines file; a row without a usable id or patch is reported and skipped."""
    predictions: list[Prediction] = []
    errors: list[RowError] = []
    for index, row in read_rows(Path(path), "plain"):
        if isinstance(row, RowError):
            errors.append(row)
            continue
        instance_id, patch = row.get("instance_id"), row.get("model_patch", "")
        if not isinstance(instance_id, str) or not instance_id:
            errors.append(RowError(index=index, reason="field 'instance_id' must be a non-empty string"))
        elif patch is not None and not isinstance(patch, str):
            errors.append(RowError(index=index, reason="field 'model_patch' must be a string or null"))
        else:
            predictions.append(Prediction(instance_id=instance_id, model_patch=patch or ""))
    return predictions, errors


def builtin_predictions(choice: str, instances: tuple[SweInstance, ...]) -> list[Prediction]:
    """``gold``: every instance's own patch; ``empty``: an empty diff for every instance."""
    return [Prediction(instance_id=i.instance_id, model_patch=i.patch if choice == "gold" else "") for i in instances]


def evaluate(
    pairs: list[tuple[SweInstance, str]], repos_dir: Path | None, config: SweGraderConfig, sandbox: SandboxConfig
) -> SweReport:
    """Build the images the pairs need, then grade every pair (synchronous entry point)."""
    needed = list({instance.instance_id: instance for instance, _ in pairs}.values())
    images, errors = build_images(needed, repos_dir)
    results = trio.run(grade_predictions, pairs, images, SweGrader(config), sandbox)
    results = [
        r.model_copy(update={"detail": f"image build failed: {errors[r.instance_id]}"})
        if r.instance_id in errors
        else r
        for r in results
    ]
    return SweReport.of(results)


def print_report(report: SweReport) -> None:
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
        f"invalid {report.invalid}, tampered {report.tampered}, infra_errors {report.infra_errors}"
    )


def grading_sandbox(path: Path | None) -> SandboxConfig:
    return grading_budgets(SandboxConfig.from_yaml(path) if path is not None else SandboxConfig())


def run_swe(args: argparse.Namespace) -> int:
    """The ``--swe`` mode of ``python -m gym grade``."""
    # --tasks and --solutions are required by the parser; a bad --sandbox-config (exit 2) is found before the
    # instances load, and an unreadable file raises TaskError: one `gym: error:` line, exit 5 (gym.fault)
    sandbox = grading_sandbox(args.sandbox_config)
    loaded = load_instances(args.tasks)
    choice = str(args.solutions)
    if choice in BUILTIN_SOLUTIONS and not Path(choice).exists():
        predictions, bad = builtin_predictions(choice, loaded.instances), []
    else:
        predictions, bad = read_predictions(args.solutions)
    for error in bad:
        log.warning("%s: skipped prediction row %d: %s", args.solutions, error.index, error.reason)
    by_id = loaded.by_id()
    pairs = [(by_id[p.instance_id], p.model_patch) for p in predictions if p.instance_id in by_id]
    unknown = sorted({p.instance_id for p in predictions if p.instance_id not in by_id})
    if unknown:
        log.warning("%d predictions name instances not in %s: %s", len(unknown), args.tasks, ", ".join(unknown[:10]))
    overrides = {"log_dir": args.swe_log_dir}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.test_timeout is not None:
        overrides["test_timeout_s"] = args.test_timeout
    log.info("grading %d predictions for %d instances", len(pairs), len(loaded.instances))
    report = evaluate(pairs, args.repos_dir, SweGraderConfig(**overrides), sandbox)
    print_report(report)
    if args.json is not None:
        document = json.loads(report.model_dump_json())
        document["skipped_task_rows"] = [e.model_dump() for e in loaded.errors]
        document["skipped_solution_rows"] = [e.model_dump() for e in bad]
        document["unknown_instance_ids"] = unknown
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
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
