"""Skipped tests are judged the same whatever the test command prints (issue 42, class 3): real pytest processes on
the host, the harness's plugin loaded as grading loads it, the full `SweGrader.grade` (the reference run included)
over their output and record.

``-rA`` names a skip only by the place it was raised (``SKIPPED [1] tests/test_pkg.py:20: later``), ``-v`` by its
test id, ``-q -rs`` by place without any header, ``-q`` not at all; the harness records every outcome by node id, so
the same run gets the same verdict under each. A candidate whose code makes a P2P test skip (the gold patch's run
does not) or an F2P test skip is not resolved under any of them, and lines shaped like skips printed by the code under
test change nothing. Controls: graded from the log alone, the ``-rA`` run of the gold patch loses its skipped P2P
tests (what the issue saw: no reference run, ``p2p_skipped`` empty) while ``-v`` keeps them; a ``-q -rs`` run with
nothing to summarise is graded, so a candidate's skip is no longer masked by an unreadable reference run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from sandbox.failure import FailureKind
from sandbox.protocol import ExecResult
from tasks.swe.grader import Evidence, SweGrader, framed_log
from tasks.swe.harness import PLUGIN, SOURCE, settings_of
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import InstanceResult

pytestmark = pytest.mark.slow

COMMANDS = ("-rA", "-v", "-rA -v", "-q -rs", "-rs", "-q", "-q -rA")
TESTS = """\
import pytest

from pkg import add, helper


def test_ok():
    assert add(1, 2) == 3


def test_fix():
    assert add(2, 2) == 4


@pytest.mark.skip(reason="optional dependency")
def test_marked():
    pass


def test_called():
    pytest.skip("later")


@pytest.fixture
def resource():
    pytest.skip("no resource")


def test_fixture(resource):
    pass


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    if x == 2:
        pytest.skip("two")


def test_helper():
    assert helper() == "ok"
"""
# No skip and, fixed, no failure: -q -rs and -q print progress marks and the final line only.
CLEAN_TESTS = "from pkg import add, helper\n\n\ndef test_ok():\n    assert add(1, 2) == 3\n\n\n" + (
    'def test_fix():\n    assert add(2, 2) == 4\n\n\ndef test_helper():\n    assert helper() == "ok"\n'
)
FIXED_ADD = "def add(a, b):\n    return a + b\n"
BROKEN_ADD = "def add(a, b):\n    return a + b if a != 2 else 0\n"
HELPER = '\n\ndef helper():\n    return "ok"\n'
SKIPPING_HELPER = '\n\ndef helper():\n    import pytest\n\n    pytest.skip("later")\n    return "ok"\n'
SKIPPING_ADD = "def add(a, b):\n    import pytest\n\n    if a == 2:\n        pytest.skip('later')\n    return a + b\n"
# Lines shaped like pytest's skip reports, printed by the code under test (captured; with -s, on the terminal).
FORGED = (
    "SKIPPED [1] tests/test_pkg.py:10: forged",
    "tests/test_pkg.py::test_fix SKIPPED (forged)",
    "SKIPPED tests/test_pkg.py::test_fix",
)
FORGING_HELPER = f"\n\ndef helper():\n    print({chr(10).join(FORGED)!r})\n    return 'ok'\n"
PACKAGES = {
    "empty": BROKEN_ADD + HELPER,
    "gold": FIXED_ADD + HELPER,
    "skips-p2p": FIXED_ADD + SKIPPING_HELPER,
    "skips-f2p": SKIPPING_ADD + HELPER,
    "forges-gold": FIXED_ADD + FORGING_HELPER,
    "forges-empty": BROKEN_ADD + FORGING_HELPER,
}
TEST_FILE = "tests/test_pkg.py"
SKIPPED = tuple(f"{TEST_FILE}::{name}" for name in ("test_marked", "test_called", "test_fixture", "test_param[2]"))
P2P = (f"{TEST_FILE}::test_ok", *SKIPPED[:3], f"{TEST_FILE}::test_param[1]", SKIPPED[3], f"{TEST_FILE}::test_helper")
F2P = (f"{TEST_FILE}::test_fix",)


def diff_of(variant: str) -> str:
    """A diff that names the package variant (the host-side `_run` below reads the name; nothing applies it)."""
    return f"diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n@@ -1 +1 @@\n-x\n+{variant}\n"


def instance_of(command: str, tests: str = TESTS) -> SweInstance:
    clean = tests == CLEAN_TESTS
    return SweInstance(
        instance_id=f"o__pkg-{'clean' if clean else 'skips'}",
        repo="o/pkg",
        base_commit="abcdef1",
        patch=diff_of("gold"),
        test_patch=f"diff --git a/{TEST_FILE} b/{TEST_FILE}\n--- a/{TEST_FILE}\n+++ b/{TEST_FILE}\n@@ -1 +1 @@\n-x\n+y\n",
        problem_statement="add(2, 2) is 0",
        FAIL_TO_PASS=list(F2P),
        PASS_TO_PASS=[f"{TEST_FILE}::test_ok", f"{TEST_FILE}::test_helper"] if clean else list(P2P),
        test_cmd=f"python -m pytest {command} -p no:cacheprovider {TEST_FILE}",
    )


def run_pytest(folder: Path, command: str, package: str, tests: str) -> tuple[ExecResult, Evidence]:
    """``command`` over ``tests`` in a fresh repository whose ``pkg`` is ``package``, with the harness's plugin, key
    and settings installed as grading installs them: the run as the runner returns it, and the harness's record."""
    repo, pristine, harness = folder / "repo", folder / "pristine", folder / "harness"
    for root, source in ((repo, package), (pristine, PACKAGES["empty"])):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text(source)
        (root / "tests").mkdir()
        (root / TEST_FILE).write_text(tests)
    harness.mkdir()
    shutil.copy(SOURCE, harness / f"{PLUGIN}.py")
    key = secrets.token_bytes(32)
    (harness / "key").write_bytes(key)
    (harness / "settings.json").write_text(settings_of([TEST_FILE], str(repo), str(pristine)))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))},
        "PYTHONPATH": f"{harness}{os.pathsep}{repo}",
        "PYTEST_ADDOPTS": f"-p {PLUGIN}",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONSAFEPATH": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    argv = [sys.executable, "-m", "pytest", *shlex.split(command), "-p", "no:cacheprovider", TEST_FILE]
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, timeout=120)
    failure = FailureKind.OK if proc.returncode == 0 else FailureKind.NONZERO_EXIT
    record = harness / "record"
    evidence = Evidence(record.read_bytes() if record.exists() else None, "no record", key)
    return ExecResult(exit_code=proc.returncode, failure=failure, stdout=proc.stdout, stderr=proc.stderr), evidence


class HostGrader(SweGrader):
    """`SweGrader` whose test runs are real pytest processes on the host, one fresh folder each; the reference run
    (the gold patch's) goes through it too."""

    def __init__(self, folder: Path, command: str, tests: str) -> None:
        super().__init__()
        self.folder, self.command, self.tests, self.runs = folder, command, tests, []

    async def _run(self, _ws, instance: SweInstance, diff: str) -> tuple[InstanceResult, str]:
        variant = diff.rstrip("\n").rsplit("\n+", 1)[-1]
        self.runs.append(variant)
        folder = self.folder / f"{len(self.runs)}-{variant}"
        run, evidence = await trio.to_thread.run_sync(run_pytest, folder, self.command, PACKAGES[variant], self.tests)
        text = framed_log(run)
        return self._judge(instance, run, text, evidence), text


class Pool:
    """Hands out a placeholder: `HostGrader._run` needs no container."""

    @contextlib.asynccontextmanager
    async def acquire(self, owner: str):
        yield object()


def grade_all(
    folder: Path, command: str, variants: tuple[str, ...], tests: str = TESTS
) -> tuple[dict[str, InstanceResult], int]:
    """Each variant graded under ``command`` by one grader, and how many reference runs it made (at most one: the
    first grading that needs it makes it)."""
    grader, instance = HostGrader(folder, command, tests), instance_of(command, tests)

    async def main() -> dict[str, InstanceResult]:
        return {variant: await grader.grade(Pool(), instance, diff_of(variant)) for variant in variants}

    results = trio.run(main)
    return results, grader.runs.count("gold") - ("gold" in variants)


def verdict(result: InstanceResult) -> tuple:
    return result.status, result.resolved, result.f2p, result.p2p, result.p2p_skipped, result.partial


def test_a_skip_is_judged_the_same_whatever_the_command_prints(tmp_path):
    variants = ("gold", "skips-p2p", "skips-f2p", "forges-gold", "empty", "forges-empty")
    by_command = {}
    for i, command in enumerate(COMMANDS):
        by_command[command], references = grade_all(tmp_path / f"c{i}", command, variants)
        assert references == 1, command  # the skips made the gold patch's run, once
    for command, results in by_command.items():
        gold, skips_p2p, skips_f2p = results["gold"], results["skips-p2p"], results["skips-f2p"]
        # the gold patch's run skips the same four P2P tests: not a regression
        assert gold.status == "resolved" and gold.reward == 1.0 and gold.p2p_skipped == (), (command, gold)
        assert set(SKIPPED) <= set(gold.p2p.success), (command, gold)
        # a candidate's code that skips a P2P test the gold patch's run passes: failing, the reason named
        assert skips_p2p.status == "unresolved" and skips_p2p.reward == 0.0, (command, skips_p2p)
        assert skips_p2p.p2p.failure == skips_p2p.p2p_skipped == (f"{TEST_FILE}::test_helper",), (command, skips_p2p)
        assert "test_helper" in skips_p2p.detail, (command, skips_p2p)
        # a skipped F2P test never passes
        assert skips_f2p.status == "unresolved" and skips_f2p.f2p.failure == F2P, (command, skips_f2p)
        # lines shaped like skips, printed by the code under test, change nothing
        assert verdict(results["forges-gold"]) == verdict(gold), (command, results["forges-gold"])
        assert verdict(results["forges-empty"]) == verdict(results["empty"]), (command, results["forges-empty"])
        assert results["empty"].status == "unresolved" and results["empty"].f2p.failure == F2P, command
    first = by_command[COMMANDS[0]]
    for command, results in by_command.items():
        assert {v: verdict(r) for v, r in results.items()} == {v: verdict(r) for v, r in first.items()}, command


@pytest.mark.parametrize("command", ["-v -s", "-rA -s"])
def test_skip_lines_on_the_terminal_do_not_help_a_broken_candidate(tmp_path, command):
    """With ``-s`` the printed lines reach the terminal among pytest's own: a failing F2P test stays failing."""
    results, _ = grade_all(tmp_path, command, ("forges-empty", "gold"))
    forged = results["forges-empty"]
    assert not forged.resolved and forged.reward == 0.0 and F2P[0] not in forged.f2p.success, forged
    assert results["gold"].resolved, results["gold"]


def test_control_the_log_alone_loses_the_skips_of_an_ra_run(tmp_path, monkeypatch):
    """Without the harness's record deciding, the gold patch's ``-rA`` run shows its skipped P2P tests as missing
    (failing, ``p2p_skipped`` empty, so no reference run could allow them), its ``-v`` run as skipped."""
    from tasks.swe import grader

    monkeypatch.setattr(grader, "check_record", lambda raw, why, key, log, exit_code: (None, None))
    (ra, ra_references), (verbose, verbose_references) = (
        grade_all(tmp_path / c, f"-{c}", ("skips-p2p",)) for c in ("rA", "v")
    )
    assert ra_references == 0 and verbose_references == 1
    ra, verbose = ra["skips-p2p"], verbose["skips-p2p"]
    assert ra.p2p_skipped == () and set(SKIPPED) <= set(ra.p2p.failure), ra
    assert verbose.p2p_skipped == (f"{TEST_FILE}::test_helper",) and set(SKIPPED) <= set(verbose.p2p.success), verbose


@pytest.mark.parametrize("command", ["-q -rs", "-q"])
def test_a_quiet_run_with_nothing_to_summarise_is_graded(tmp_path, command):
    """The gold patch's ``-q -rs`` run prints no summary (no skip, no failure); it was ``invalid``, so the reference
    run failed and a candidate whose code skips a P2P test was masked (``infra_error``) instead of scored."""
    results, references = grade_all(tmp_path, command, ("gold", "skips-p2p", "empty"), tests=CLEAN_TESTS)
    assert references == 1
    assert results["gold"].status == "resolved", results["gold"]
    skipping = results["skips-p2p"]
    assert skipping.status == "unresolved" and skipping.reward == 0.0, skipping
    assert skipping.p2p_skipped == (f"{TEST_FILE}::test_helper",), skipping
    assert results["empty"].status == "unresolved" and results["empty"].f2p.failure == F2P, results["empty"]
