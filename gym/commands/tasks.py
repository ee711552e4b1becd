"""`python -m gym tasks`: build and inspect task sets.

``build-swe``: the shipped SWE instances (`tasks/swe/shipped.py`) -- download
each spec's sdist, make the local clones under ``tasks/swe/repos/`` and write
``tasks/swe/instances.jsonl`` (both git-ignored).

``derive-swe-tests``: run an instance file's tests with each gold patch and
with none, in fresh containers, and print the FAIL_TO_PASS / PASS_TO_PASS ids
(YAML, ready to paste into a spec).

``generate``: the generated task family (`tasks/generator.py`): seeded train
and held-out CodeContests files with their reference solutions.

``check``: load a task file as an environment does and report what it skips:
each row that does not parse, and each math task whose gold the math check
cannot grade against (`tasks/math/golds.py`); exit 1 when anything is skipped.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gym.cli import HELP_FORMATTER, epilog

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from tasks.swe.shipped import DEFAULT_OUT, DEFAULT_REPOS_DIR
    from tasks.swe.spec import SPECS_DIR

    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build-swe",
        help="shipped SWE specs -> local clones + instances.jsonl",
        epilog=epilog(("", "--out /tmp/swe/instances.jsonl --repos-dir /tmp/swe/repos")),
        formatter_class=HELP_FORMATTER,
    )
    build.add_argument("--specs", type=Path, default=SPECS_DIR, metavar="DIR", help="folder of instance specs (*.yaml)")
    build.add_argument("--repos-dir", type=Path, default=DEFAULT_REPOS_DIR, metavar="DIR", help="where clones go")
    build.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="FILE", help="instances file written")
    derive = sub.add_parser(
        "derive-swe-tests",
        help="F2P/P2P ids of instances from gold vs empty test runs",
        epilog=epilog(
            ("", "--instance pytoolz__toolz-gym-1", "--tasks /tmp/swe/instances.jsonl --repos-dir /tmp/swe/repos")
        ),
        formatter_class=HELP_FORMATTER,
    )
    derive.add_argument("--tasks", type=Path, default=DEFAULT_OUT, metavar="FILE", help="instances file")
    derive.add_argument("--repos-dir", type=Path, default=None, metavar="DIR", help="local clones as DIR/owner__name")
    derive.add_argument("--instance", action="append", default=None, metavar="ID", help="only these instances")
    generate = sub.add_parser(
        "generate",
        help="seeded train/held-out CP tasks (CodeContests rows) + reference solutions",
        description="Write DIR/train.jsonl, DIR/heldout.jsonl (CodeContests layout) and DIR/{train,heldout}"
        ".solutions.jsonl (reference solutions, expect: passed). Held-out tasks are parameters never in train.",
        epilog=epilog(
            (
                "--out runs/tasks",
                "--out /tmp/gen --seed 3 --train 200 --heldout 50 --levels 1,2",
                "--out /tmp/gen_input --params-in input",
            )
        ),
        formatter_class=HELP_FORMATTER,
    )
    check = sub.add_parser(
        "check",
        help="load a task file: rows skipped and why, math golds the check cannot read (exit 1 if any)",
        description="Load FILE as an environment's pool does and print each row skipped with its reason, each math "
        "task skipped because the math check cannot grade against its gold (it cannot read it, or the gold given as "
        "the answer does not pass), then one summary line. Exit 0 when every row is a usable task, 1 otherwise.",
        epilog=epilog(("tasks/samples/math_competition.jsonl", "data/math_test.jsonl --format math")),
        formatter_class=HELP_FORMATTER,
    )
    check.add_argument("path", type=Path, metavar="FILE", help="dataset file (JSON Lines or JSON, optionally gzipped)")
    check.add_argument("--format", default="auto", metavar="FORMAT", help="dataset format (default: recognised)")
    generate.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder the four files go to")
    generate.add_argument("--seed", type=int, default=0, metavar="S", help="picks the tasks and every test input")
    generate.add_argument("--train", type=_count, default=1000, metavar="N", help="training tasks written")
    generate.add_argument("--heldout", type=_count, default=200, metavar="M", help="held-out tasks written")
    generate.add_argument(
        "--levels",
        type=_levels,
        default=(1, 2, 3),
        metavar="L,L",
        help="difficulty levels drawn, comma-separated (1: one input, 2: t test cases, "
        "3: harder variant, t test cases)",
    )
    generate.add_argument(
        "--params-in",
        choices=("statement", "input"),
        default="statement",
        help="statement: parameter values stated, programs assign them; input: every test's "
        "first line holds them, programs read them",
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a count is a non-negative integer, got {text!r}")
    return int(text)


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels must be comma-separated integers, got {text!r}") from None


def _build(args: argparse.Namespace) -> int:
    import time

    from tasks.swe.images import REPO_DIRS
    from tasks.swe.leak_guard import evidence, summary
    from tasks.swe.shipped import build_shipped
    from tasks.swe.spec import load_specs

    started = time.monotonic()
    instances = build_shipped(load_specs(args.specs), args.repos_dir, args.out)
    for instance in instances:
        # what `images build` will scan each instance image for (the gold patch's fixed code, tasks.swe.leak_guard)
        looked_for = summary(evidence(instance, args.repos_dir / instance.clone_name, REPO_DIRS))
        print(
            f"{instance.instance_id:<40} base_commit={instance.base_commit[:12]} "
            f"f2p={len(instance.fail_to_pass)} p2p={len(instance.pass_to_pass)}; {looked_for}"
        )
    print(
        f"wrote {len(instances)} instances to {args.out} in {time.monotonic() - started:.1f}s "
        f"(clones under {args.repos_dir})"
    )
    return 0


def _derive(args: argparse.Namespace) -> int:
    import yaml

    from tasks.swe.evaluation import derive_tests, grading_sandbox
    from tasks.swe.grader import SweGraderConfig
    from tasks.swe.instance import load_instances

    instances = list(load_instances(args.tasks).instances)
    if args.instance:
        instances = [i for i in instances if i.instance_id in set(args.instance)]
    for derived in derive_tests(instances, args.repos_dir, SweGraderConfig(), grading_sandbox(None)):
        print(f"# {derived.instance_id}" + (f": {derived.detail}" if derived.detail else ""))
        if derived.failing_with_gold:
            print(f"# failing even with the gold patch (left out): {list(derived.failing_with_gold)}")
        print(
            yaml.safe_dump(
                {"fail_to_pass": list(derived.fail_to_pass), "pass_to_pass": list(derived.pass_to_pass)},
                sort_keys=False,
                width=200,
            )
        )
    return 0


def _generate(args: argparse.Namespace) -> int:
    import time

    from tasks.generator import write

    started = time.monotonic()
    written = write(args.out, args.seed, args.train, args.heldout, args.levels, args.params_in)
    for split, count in written.rows.items():
        print(f"{split:<8} {count:>6} tasks -> {args.out / f'{split}.jsonl'} (+ {split}.solutions.jsonl)")
    splits = list(written.rows)
    print(
        "degenerate programs (constants, echo, the reference off by one) rejected by every task: strengthened "
        + ", ".join(f"{written.strengthened[s]} {s}" for s in splits)
        + " (hidden tests added), dropped "
        + ", ".join(f"{written.dropped[s]} {s}" for s in splits)
        + " (replaced by the next task of their bucket)"
    )
    print(
        f"seed {args.seed}, levels {','.join(map(str, sorted(set(args.levels))))}, parameters in the "
        f"{args.params_in}, "
        f"{time.monotonic() - started:.1f}s; load with --format codecontests"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from tasks.families import ungradable
    from tasks.loader import load_tasks

    report = load_tasks(args.path, args.format)
    for error in report.errors:
        print(f"row {error.index}: skipped: {error.reason}")
    unread = ungradable(report.tasks)  # math: golds the check cannot grade against
    for finding in unread:
        print(f"task {finding.task_id}: skipped: {finding.reason}")
    usable = len(report.tasks) - len(unread)
    print(
        f"{args.path}: format {report.format}, {usable} usable tasks, {len(report.errors)} rows skipped, "
        f"{len(unread)} math golds the check cannot grade against"
    )
    return 1 if report.errors or unread else 0


def run(args: argparse.Namespace) -> int:
    from tasks.errors import TaskError
    from tasks.swe.repository import GitError

    actions = {"build-swe": _build, "derive-swe-tests": _derive, "generate": _generate, "check": _check}
    try:
        return actions[args.action](args)
    except (TaskError, GitError) as err:
        print(f"tasks {args.action}: {err}", file=sys.stderr)
        return 1
