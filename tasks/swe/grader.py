"""Grading one SWE prediction in a fresh container of the instance's image (the SWE-bench harness's steps).

1. Protected paths are stripped from the candidate's diff on the host
   (`tasks.swe.diff`) and reported.
2. In a fresh container: the pristine repository is copied into the tmpfs, the
   diff is applied (``git apply``, then ``patch --fuzz`` like the harness;
   neither applies -> ``patch_apply_failed``), the test files are reset to
   base_commit, and ``test_patch`` is applied. Whether ``test_patch`` applies is
   checked on the pristine tree first (no: the instance is broken ->
   ``infra_error``); a step that fails after the diff is applied fails on the
   tree the diff left (a full disk, no inodes left) -> ``patch_apply_failed``.
3. The tamper scan (`tasks.swe.tamper`) reads every changed path that is not
   restored, as it is and as it was at base_commit: code the diff added that
   reaches into the test run (pytest's hooks and reports, ``sys.modules`` and
   the import system, builtins, ``os._exit``, inherited descriptors, ...) is
   ``tampered`` before anything runs.
4. The test command runs as its own runner call; its exit code comes from the
   runner, not from the log, and the log is framed by start/end markers
   written on the host, so nothing the tests print can forge either. The
   run starts isolated (`isolated_environment`): the working directory is not
   on ``sys.path`` (the repository root comes after site-packages, so it
   cannot shadow an installed or standard module), no user site, bytecode
   only from a cache outside the tree, pytest's plugin autoload off and
   only the harness's plugin and the instance's declared plugins loaded.
   The harness (`tasks.swe.harness`) records every outcome out of band,
   under a key only it read.
5. The log is parsed (`tasks.swe.testlog`); when it adds up, the harness's
   record must verify and agree with it and with the exit status (else
   ``tampered``), and the record's statuses are graded (`tasks.swe.resolution`).
6. A P2P test the run skipped passes only where the same command skips it with
   the gold patch too (the pristine tree where an instance has none; with
   ``test_patch``): that reference run is made in another fresh container the
   first time a grading needs it, once per instance and command (gradings that
   need it meanwhile wait for it), and kept (`SweGrader.reference`). When it
   cannot tell (it did not end normally or add up, tried twice; it has no status
   for a skipped test), a result that only the skips keep from ``resolved`` is
   ``infra_error`` (the instance's failure); any other stays as graded, the
   skipped tests failing.

A sandbox failure or a grader crash is ``infra_error`` (masked, never a 0);
a timeout, OOM or runaway output of the tests is the candidate's doing:
``unresolved`` with the reason, every F2P and P2P test failing (the log of a
killed run is not graded).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from sandbox.config import SandboxConfig
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.fleet import FleetPool, open_pool
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest, ExecResult
from sandbox.workspace import Workspace
from tasks.swe import harness, tamper, testlog
from tasks.swe.diff import MODULE_FILE, RUNNER_MODULES, files_of_test_ids, protection, strip_protected
from tasks.swe.harness import judge as check_record
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import InstanceResult, Status, StrippedPath, TestGroup, allow_skips, grade_log
from tasks.swe.workspace import MAX_DIFF_BYTES, PRISTINE_REPO, REPO, copy_repo, put_file

log = logging.getLogger(__name__)

GRADE_DIR = "/workspace/.grade"
MODEL_DIFF = f"{GRADE_DIR}/model.diff"
TEST_DIFF = f"{GRADE_DIR}/test.diff"
START_MARKER = ">>>>> gym: start of the test run"
END_MARKER = ">>>>> gym: end of the test run"

# What the applied diff changed, read from the tree (not the diff text): git's status of tracked and new
# files, then every file written after the marker (an ignored or untracked file the diff edited).
_CHANGED = r"""
set -u
[ -e "$1" ] || touch "$1"
git -c core.quotepath=off status --porcelain=v1 -z --untracked-files=all
printf '\0%s\0' "$2"
find . -path ./.git -prune -o -newer "$1" \( -type f -o -type l \) -printf '%P\0'
"""
NEWER = "-- written after the marker --"
APPLY_MARKER = f"{GRADE_DIR}/applied.marker"
_APPLY = """
set -u
if git apply --verbose --whitespace=nowarn {diff}; then exit 0; fi
echo ">>>>> git apply failed (it changed nothing); trying patch --fuzz=5" >&2
patch --batch --fuzz=5 -p1 -i {diff}
"""
# Test files go back to base_commit (tracked ones) or away (new ones), whatever the diff did; the paths come
# NUL-separated on stdin (as many as the candidate's diff made: never an argv limit).
_RESET = """
set -eu
while IFS= read -r -d '' path; do
  if git cat-file -e "HEAD:$path" 2>/dev/null; then git checkout -q HEAD -- "$path"; else rm -rf -- "$path"; fi
done
"""
# Whatever the diff (or patch's fallback) wrote under .git, the repository's git directory goes back to the
# pristine one: config, hooks, filters and attributes of the candidate's making never run in grading.
_RESTORE_GIT = f"set -eu; rm -rf .git; cp -R -P {PRISTINE_REPO}/.git .git"
# What a new module at the repository's top level may not be named (`protection`'s ``shadowed``), read in the
# instance's container before the diff: the top-level modules the interpreter finds outside the repository
# (standard library, site- and dist-packages: everything the test runner can import, Debian's
# distutils-precedence.pth importing `_distutils_hack` at every start included), and the repository's own
# top-level modules at base_commit (its folders and module files at the root and in src/ and lib/), which are
# never protected for their names: a repository that is one of pytest's imports (iniconfig, tomli) is graded on
# its own code. argv[1]: `diff.MODULE_FILE`.
_MODULES = """
import json, os, pkgutil, re, sys
sys.path = [p for p in sys.path if p and not p.startswith('/workspace')]
outside = {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)
module_file, own = re.compile(sys.argv[1]), set()
for folder in ('.', 'src', 'lib'):
    for entry in os.listdir(folder) if os.path.isdir(folder) else ():
        match = module_file.match(entry)
        if os.path.isdir(os.path.join(folder, entry)) or match:
            own.add(match.group('name') if match else entry)
print(json.dumps({'own': sorted(own), 'outside': sorted(outside)}))
"""
LISTING_LIMIT_BYTES = 32 << 20
SCAN_LIMIT_BYTES = 1 << 20
SCAN_SHOWN = 12  # distinct findings named in a result's detail


PYCACHE = "/tmp/gym-pycache"


def isolated_environment(instance: SweInstance) -> dict[str, str]:
    """The environment of the test run: nothing of the repository runs before pytest's own start.

    ``PYTHONSAFEPATH``: ``python -m pytest`` would put the working directory first on ``sys.path``;
    ``PYTHONPYCACHEPREFIX``: ``.pyc`` files (pytest's rewritten tests included) are read and written only
    there, never from ``__pycache__`` folders a diff planted; ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``: no
    entry-point plugin loads (the repository's own metadata could declare one); the instance's declared
    ``plugins`` are loaded by name.
    """
    env = {
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPYCACHEPREFIX": PYCACHE,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    if instance.plugins:
        env["PYTEST_ADDOPTS"] = " ".join(f"-p {shlex.quote(name)}" for name in instance.plugins)
    return env


def shadowing(listing: dict[str, list[str]]) -> frozenset[str]:
    """The names a new top-level module may not take (`protection`'s ``shadowed``), from `_MODULES`'s listing:
    what the interpreter finds outside the repository and what pytest imports when it exists, less the
    repository's own top-level modules."""
    return (frozenset(listing["outside"]) | RUNNER_MODULES) - frozenset(listing["own"])


def changed_paths(before: bytes, after: bytes) -> set[str]:
    """Paths the apply step changed, from two ``_CHANGED`` listings (before and after it)."""
    old_status, _ = _listing(before)
    new_status, written = _listing(after)
    paths = written
    return paths | {entry[3:] for entry in new_status - old_status}


def _listing(raw: bytes) -> tuple[set[str], set[str]]:
    """``({"XY path", ...}, {written path, ...})``; a rename's origin (the NUL-separated entry after an R or C
    entry) is listed as ``"RO origin"``."""
    text = raw.decode("utf-8", errors="surrogateescape")
    status, _, written = text.partition(f"\0{NEWER}\0")
    entries, origin = set(), False
    for entry in filter(None, status.split("\0")):
        entries.add(f"RO {entry}" if origin else entry)
        origin = not origin and entry[:1] in ("R", "C")
    return entries, {p for p in written.split("\0") if p}


def shown(path: str) -> str:
    """A path of the candidate's making as text a report can hold: bytes that are not UTF-8 (surrogate escapes from
    the tree listing, or lone surrogates in the diff's text) become U+FFFD (a lone surrogate in a result made
    ``--json``, ``--swe-log-dir`` and every result serialised after it raise)."""
    return as_bytes(path).decode("utf-8", errors="replace")


def as_bytes(text: str) -> bytes:
    """``text`` of the candidate's making as the bytes it stands for: surrogate escapes back to their bytes, and a
    surrogate that stands for no byte (only a prediction's text can hold one) in its UTF-8 form."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="surrogatepass")


class SweGraderConfig(BaseModel):
    """Deadlines and bounds of SWE grading."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test_timeout_s: float = Field(900.0, gt=0, description="wall clock of the test command")
    setup_timeout_s: float = Field(300.0, gt=0, description="wall clock of each set-up step (copy, apply, reset)")
    log_limit_bytes: int = Field(8 << 20, gt=0, description="bound on the test log kept (stdout + stderr)")
    concurrency: int = Field(2, ge=1, le=64, description="instances graded at once, each in its own container")
    log_dir: Path | None = Field(None, description="write each instance's diff, test log and result here")


def _failed(result: ExecResult) -> bool:
    return result.failure != FailureKind.OK or result.exit_code != 0


def framed_log(result: ExecResult) -> str:
    """The test run framed by host-written markers, with the runner's exit status."""
    output = result.stdout_text + (("\n" + result.stderr_text) if result.stderr else "")
    end = f"{END_MARKER}: exit_code={result.exit_code} failure={result.failure.value}"
    return f"{START_MARKER}\n{output}\n{end}\n"


def _reported(restored: list[tuple[str, str]]) -> tuple[StrippedPath, ...]:
    """The protected paths the applied tree changed and grading restored, as a result reports them."""
    return tuple(StrippedPath(path=shown(p), reason=f"{why} (changed in the applied tree)") for p, why in restored)


def _protected(instance: SweInstance) -> set[str]:
    """The paths no diff may change: the instance's test files and the files its test ids name."""
    return set(instance.test_files()) | files_of_test_ids(instance.fail_to_pass + instance.pass_to_pass)


@dataclass(frozen=True)
class Evidence:
    """The harness's record of a test run (None: missing, and why) and the run's key."""

    record: bytes | None
    missing: str
    key: bytes


@dataclass(frozen=True)
class Reference:
    """The P2P tests the gold patch's run (the reference run) skips and passes."""

    skipped: frozenset[str]
    passed: frozenset[str]


class SweGrader:
    """Grades predictions; one fresh container per prediction, from a pool per instance image."""

    def __init__(self, config: SweGraderConfig | None = None):
        self.config = config or SweGraderConfig()
        # per (instance id, command): the reference run's P2P statuses, or why it failed (and how often)
        self._references: dict[tuple[str, str], Reference] = {}
        self._reference_failures: dict[tuple[str, str], tuple[int, str]] = {}
        self._reference_locks: dict[tuple[str, str], trio.Lock] = {}

    async def grade(self, pool: WorkspacePool | FleetPool, instance: SweInstance, model_patch: str) -> InstanceResult:
        """Grade ``model_patch``; never raises for anything the candidate or the sandbox does."""
        started = time.monotonic()
        try:
            kept = strip_protected(model_patch, _protected(instance))
            size = len(kept.diff.encode("utf-8", errors="surrogateescape"))  # a lone surrogate: not a diff
        except Exception as err:  # the candidate's diff text: whatever the parser meets in it is the candidate's
            result = self._outcome(instance, "patch_apply_failed", f"the diff cannot be read: {err!r}"[:500])
            self._save(instance, model_patch, "", "", result)
            return result
        if size > MAX_DIFF_BYTES:  # past a runner frame (256 MiB) writing it lost the runner: an infra_error, once
            detail = f"the diff is {size} bytes, above the {MAX_DIFF_BYTES} bytes of any agent's diff"
            result = self._outcome(instance, "patch_apply_failed", detail)
            self._save(instance, model_patch, "", "", result)
            return result
        stripped = tuple(StrippedPath(path=shown(s.path), reason=s.reason) for s in kept.stripped)
        try:
            async with pool.acquire(owner=f"swe-grade:{instance.instance_id}") as ws:
                result, text = await self._run(ws, instance, kept.diff)
            if result.p2p_skipped and result.status in ("resolved", "unresolved"):
                result = await self._judge_skips(pool, instance, result)
        except Exception as err:  # a sandbox or grader failure is infrastructure, never a reward of 0
            log.exception("grading %s crashed", instance.instance_id)
            result, text = self._outcome(instance, "infra_error", f"grader crash: {err!r}"[:500]), ""
        result = result.model_copy(
            update={"stripped": stripped + result.stripped, "wall_s": round(time.monotonic() - started, 3)}
        )
        self._save(instance, model_patch, kept.diff, text, result)
        return result

    async def _judge_skips(
        self, pool: WorkspacePool | FleetPool, instance: SweInstance, result: InstanceResult
    ) -> InstanceResult:
        """``result`` with the skipped P2P tests that the reference run skips too passing (see the module
        docstring); raises `InfraError` only when the reference cannot tell and only the skips stand between
        ``result`` and resolved."""
        decisive = not result.f2p.failure and set(result.p2p.failure) <= set(result.p2p_skipped)
        try:
            reference = await self.reference(pool, instance)
            undecided = [t for t in result.p2p_skipped if t not in reference.skipped and t not in reference.passed]
            if undecided:
                raise InfraError(
                    f"the reference run gives no pass or skip for skipped P2P test(s) {', '.join(undecided[:5])}"
                )
        except InfraError as err:
            if decisive:
                raise
            log.warning("%s: skipped P2P tests stay failing (the result cannot resolve): %s", instance.instance_id, err)
            return result
        return allow_skips(result, reference.skipped)

    async def reference(self, pool: WorkspacePool | FleetPool, instance: SweInstance) -> Reference:
        """The P2P statuses of the instance's command with the gold patch (the pristine tree where the instance has
        none), from a reference run in a fresh container, once per instance and command (concurrent callers wait
        for one run); raises `InfraError` when that run cannot be graded (the second failure is kept)."""
        key = (instance.instance_id, instance.command())
        async with self._reference_locks.setdefault(key, trio.Lock()):
            if key in self._references:
                return self._references[key]
            tries, why = self._reference_failures.get(key, (0, ""))
            if tries >= 2:
                raise InfraError(f"the reference run failed {tries} times: {why}")
            try:
                gold = strip_protected(instance.patch, _protected(instance)).diff if instance.patch.strip() else ""
                async with pool.acquire(owner=f"swe-grade-reference:{instance.instance_id}") as ws:
                    run, _ = await self._run(ws, instance, gold)
                if run.status not in ("resolved", "unresolved") or run.test_run not in ("ok", "nonzero_exit"):
                    raise InfraError(
                        f"the reference run (gold patch) ended {run.status}, test run {run.test_run}: {run.detail[:300]}"
                    )
            except Exception as err:
                self._reference_failures[key] = (tries + 1, repr(err)[:500])
                raise InfraError(f"the reference run failed: {err!r}"[:600]) from err
            self._references[key] = Reference(skipped=frozenset(run.p2p_skipped), passed=frozenset(run.p2p.success))
            log.info("%s: the gold patch's run skips %d P2P test(s)", instance.instance_id, len(run.p2p_skipped))
            return self._references[key]

    @staticmethod
    def _outcome(instance: SweInstance, status: Status, detail: str) -> InstanceResult:
        return InstanceResult(instance_id=instance.instance_id, resolved=False, status=status, detail=detail)

    async def _step(
        self, ws: Workspace, script: str, *args: str, stdin: bytes = b"", output_limit_bytes: int | None = None
    ) -> ExecResult:
        request = ExecRequest(
            argv=["bash", "-c", script, "step", *args],
            cwd=REPO,
            stdin=stdin,
            timeout_s=self.config.setup_timeout_s,
            output_limit_bytes=output_limit_bytes,
        )
        result = await ws.exec(request)
        if result.failure == FailureKind.INFRA_ERROR:
            raise InfraError(result.detail)
        return result

    async def _run(self, ws: Workspace, instance: SweInstance, diff: str) -> tuple[InstanceResult, str]:
        await copy_repo(ws, self.config.setup_timeout_s)
        await put_file(ws, TEST_DIFF, instance.test_patch.encode())
        # Whether the instance is broken is decided on the pristine tree, before the candidate's diff: after it,
        # a step that fails failed on the candidate's tree (a diff that used up the disk's inodes made git's
        # index.lock fail in the reset; the grader called that the host's failure and masked it).
        check = await self._step(ws, f"git apply --check {shlex.quote(TEST_DIFF)}")
        if _failed(check):
            detail = f"test_patch does not apply (the instance is broken): {check.stderr_text[-800:]}"
            return self._outcome(instance, "infra_error", detail), ""
        await put_file(ws, MODEL_DIFF, diff.encode("utf-8", errors="surrogateescape"))
        restored: list[tuple[str, str]] = []  # (path as listed, why): reset as listed, reported as text
        if diff.strip():
            modules = await self._step(
                ws,
                f"PYTHONSAFEPATH=1 python3 -c {shlex.quote(_MODULES)} {shlex.quote(MODULE_FILE.pattern)}",
                output_limit_bytes=LISTING_LIMIT_BYTES,
            )
            before = await self._step(ws, _CHANGED, APPLY_MARKER, NEWER, output_limit_bytes=LISTING_LIMIT_BYTES)
            if _failed(modules) or _failed(before):
                return self._outcome(
                    instance, "infra_error", f"listing the pristine tree: {before.stderr_text[-800:]}"
                ), ""
            applied = await self._step(ws, _APPLY.format(diff=shlex.quote(MODEL_DIFF)))
            if _failed(applied):
                detail = (applied.stdout_text + applied.stderr_text)[-1500:]
                return self._outcome(instance, "patch_apply_failed", detail), ""
            if _failed(git := await self._step(ws, _RESTORE_GIT)):
                return self._left_broken(instance, "restoring .git", git), ""
            after = await self._step(ws, _CHANGED, APPLY_MARKER, NEWER, output_limit_bytes=LISTING_LIMIT_BYTES)
            if after.truncated or after.failure == FailureKind.OUTPUT_TRUNCATED:  # the candidate's diff made it so
                detail = f"the applied diff changed more paths than grading checks (listing over {LISTING_LIMIT_BYTES} bytes)"
                return self._outcome(instance, "patch_apply_failed", detail), ""
            if _failed(after):
                return self._left_broken(instance, "listing the changed tree", after), ""
            protected = _protected(instance)
            shadowed = shadowing(json.loads(modules.stdout))
            changed = changed_paths(before.stdout, after.stdout)
            restored = [(path, why) for path in sorted(changed) if (why := protection(path, protected, shadowed))]
            tampering = await self._scan(ws, sorted(changed - {path for path, _ in restored}))
            if tampering is not None:
                return self._tampered(instance, tampering).model_copy(update={"stripped": _reported(restored)}), ""
        paths = [*instance.test_files(), *(path for path, _ in restored)]
        reset = await self._step(
            ws, _RESET, stdin=b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths)
        )
        if _failed(reset):
            return self._left_broken(instance, "resetting the test files", reset), ""
        tests = await self._step(ws, f"git apply --verbose {shlex.quote(TEST_DIFF)} && rm -rf {GRADE_DIR}")
        if _failed(tests):
            return self._left_broken(instance, "applying test_patch", tests), ""
        key = await harness.install(ws, instance, sorted(_protected(instance)))  # nothing of the candidate ran yet
        run = await ws.exec(
            ExecRequest(
                argv=["bash", "-c", instance.command()],
                cwd=REPO,
                env=harness.environment(instance, isolated_environment(instance)),
                timeout_s=self.config.test_timeout_s,
                output_limit_bytes=self.config.log_limit_bytes,
            )
        )
        text = framed_log(run)
        evidence = Evidence(*await harness.read_record(ws), key)
        # 8 MiB of log: off the event loop
        judged = await trio.to_thread.run_sync(self._judge, instance, run, text, evidence)
        return judged.model_copy(update={"stripped": _reported(restored)}), text

    async def _scan(self, ws: Workspace, paths: list[str]) -> str | None:
        """Why the applied tree is tampered (the tamper scan's findings in the changed, unprotected ``paths``), or
        None; a scan the tree keeps from finishing (a timeout, memory, a flood of findings) is the candidate's."""
        if not paths:
            return None
        # The scanner's source goes in argv, not a file: the applied tree may have used up the tmpfs's inodes.
        stdin = b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths)
        source = Path(tamper.__file__).read_text()
        command = 'python3 -I -S -c "$1" "$2" "$3"'
        scan = await self._step(
            ws, command, source, REPO, PRISTINE_REPO, stdin=stdin, output_limit_bytes=SCAN_LIMIT_BYTES
        )
        if scan.failure not in (FailureKind.OK, FailureKind.NONZERO_EXIT) or scan.truncated or scan.exit_code == 4:
            return f"the tamper scan could not finish on the applied tree: {scan.failure.value} {scan.detail}"[:500]
        if scan.exit_code != 0:
            raise InfraError(f"the tamper scan crashed: {scan.stderr_text[-800:]}")
        report = json.loads(scan.stdout)
        if not report["findings"]:
            return None
        findings = [tamper.Finding(*row) for row in report["findings"]]
        distinct = list({(f.rule, f.what): f for f in reversed(findings)}.values())[::-1][:SCAN_SHOWN]
        more = f" ({report['total']} findings in all)" if report["total"] > len(distinct) else ""
        shown = "; ".join(str(f) for f in sorted(distinct))
        return f"the diff adds code that reaches into the test run: {shown}{more}"[:2000]

    @staticmethod
    def _tampered(instance: SweInstance, detail: str) -> InstanceResult:
        """The candidate's code reached into the test run: every F2P and P2P test failing, reward 0, never masked."""
        failed = {"f2p": TestGroup(failure=instance.fail_to_pass), "p2p": TestGroup(failure=instance.pass_to_pass)}
        return InstanceResult(
            instance_id=instance.instance_id, resolved=False, status="tampered", detail=detail, **failed
        )

    @staticmethod
    def _left_broken(instance: SweInstance, step: str, result: ExecResult) -> InstanceResult:
        """A set-up step after the candidate's diff failed (the sandbox did not: `_step` raised for that): the
        tree the diff left made it fail (a full disk, inodes used up, paths in the way), so it is the candidate's
        failure, scored 0 (``patch_apply_failed``: no test ran, and an ``unresolved`` with no test ids would have a
        partial score of 1); the pristine tree passed the check of test_patch (`_run`)."""
        detail = f"{step} failed on the tree the diff left: {result.failure.value} (exit {result.exit_code}) "
        return SweGrader._outcome(instance, "patch_apply_failed", detail + (result.stderr_text + result.detail)[-800:])

    @staticmethod
    def _judge(instance: SweInstance, run: ExecResult, text: str, evidence: Evidence) -> InstanceResult:
        return SweGrader._judged(instance, run, text, evidence).model_copy(update={"test_run": run.failure.value})

    @staticmethod
    def _judged(instance: SweInstance, run: ExecResult, text: str, evidence: Evidence) -> InstanceResult:
        if run.failure == FailureKind.INFRA_ERROR:
            return SweGrader._outcome(instance, "infra_error", f"the test run was lost: {run.detail}")
        try:
            parsed = testlog.parse(text)
            result = grade_log(
                instance.instance_id, instance.fail_to_pass, instance.pass_to_pass, parsed, run.exit_code
            )
        except Exception as err:  # the log is the candidate's output: what it does to the parser is the candidate's
            log.warning("%s: the test log could not be read: %r", instance.instance_id, err)
            return SweGrader._outcome(instance, "invalid", f"the test log could not be read: {err!r}"[:500])
        if run.failure not in (FailureKind.OK, FailureKind.NONZERO_EXIT):
            # A hang, OOM or flood from the candidate's code: not resolved, and no test passed, whatever the partial
            # log says. A killed run's log cannot be checked against how the run ended (`validity_problem`), so its
            # statuses are only what the candidate's processes printed: package code that printed a forged
            # summary, then flooded the output or hung, had every F2P and P2P test "passing" (fraction 1.0).
            claimed = len(result.f2p.success) + len(result.p2p.success)
            detail = (
                f"the test run ended with {run.failure.value}: {run.detail} (its partial log showed {claimed} of "
                f"{result.f2p.total + result.p2p.total} tests passing; a killed run's log is not graded)"
            )
            failed = {"f2p": TestGroup(failure=instance.fail_to_pass), "p2p": TestGroup(failure=instance.pass_to_pass)}
            update = {
                "resolved": False, "status": "unresolved", "partial": 0.0, "detail": detail, "p2p_skipped": (), **failed
            }  # fmt: skip
            return result.model_copy(update=update)
        if result.status == "invalid":
            return result
        # The log adds up; the harness's record decides whether it tells the truth, and gives the statuses.
        problem, record = check_record(evidence.record, evidence.missing, evidence.key, parsed, run.exit_code)
        if problem is not None:
            return SweGrader._tampered(instance, problem).model_copy(update={"exit_code": run.exit_code})
        if record is not None:
            parsed.statuses = dict(record.statuses)
            result = grade_log(
                instance.instance_id, instance.fail_to_pass, instance.pass_to_pass, parsed, run.exit_code
            )
        return result

    def _save(self, instance: SweInstance, submitted: str, applied: str, text: str, result: InstanceResult) -> None:
        if self.config.log_dir is None:
            return
        folder = self.config.log_dir / instance.instance_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.diff").write_bytes(as_bytes(submitted))
        (folder / "applied.diff").write_bytes(as_bytes(applied))
        (folder / "test.log").write_text(text)
        (folder / "result.json").write_text(result.model_dump_json(indent=1) + "\n")


def grading_budgets(sandbox: SandboxConfig) -> SandboxConfig:
    """``sandbox`` for grading containers: a grading makes a dozen calls and runs whole test files, so the
    per-episode wall clock and call count of an agent's workspace do not bind it (at least 7200 s, 64 calls)."""
    episode = sandbox.episode.model_copy(
        update={"wall_s": max(sandbox.episode.wall_s, 7200.0), "max_calls": max(sandbox.episode.max_calls, 64)}
    )
    return sandbox.model_copy(update={"episode": episode})


def instance_sandbox(sandbox: SandboxConfig, image: str) -> SandboxConfig:
    """``sandbox`` on ``image``, with no warm containers (each instance image is used a few times at most)."""
    return sandbox.model_copy(update={"image": image, "pool": sandbox.pool.model_copy(update={"size": 0})})


def grading_bound_s(config: SweGraderConfig) -> float:
    """How long one grading can take when the engine answers: the candidate's run, a reference run it waits for
    (another grading's, which may fail) and the one it then makes itself (each: the repository copy, 10 set-up
    steps, 2 file writes of 120 s, the harness's install and read of 60 s, the tests), and the containers' starts.
    Every step ends on its own deadline, which is the candidate's when its tree makes it so; only an engine that
    stops answering keeps a grading past this."""
    run = config.test_timeout_s + 11 * config.setup_timeout_s + 2 * 120.0 + 2 * 60.0
    return 3 * run + 600.0


async def grade_predictions(
    predictions: Sequence[tuple[SweInstance, str]],
    images: dict[str, str],
    grader: SweGrader,
    sandbox: SandboxConfig,
    deadline_s: float = math.inf,
) -> list[InstanceResult]:
    """Grade ``(instance, model_patch)`` pairs, ``concurrency`` at a time; results in input order.

    ``images`` maps instance ids to image tags; an instance without one is ``infra_error``. No grading starts
    ``deadline_s`` after the first: the pairs not started by then are ``infra_error`` (the time ran out on the
    caller's side). A grading that started is never cut by the deadline: whatever its candidate does to the clock
    (tests that hang at import, a tree that slows every step) ends on that step's own deadline and is scored, never
    masked. Only a grading past `grading_bound_s` (an engine that stopped answering) is cut: ``infra_error``, its
    containers destroyed.
    """
    results: list[InstanceResult | None] = [None] * len(predictions)
    limiter = trio.CapacityLimiter(grader.config.concurrency)
    closes = trio.current_time() + deadline_s
    bound = grading_bound_s(grader.config)

    async def one(i: int, instance: SweInstance, patch: str) -> None:
        async with limiter:
            if trio.current_time() >= closes:
                return  # not started: the caller's deadline
            tag = images.get(instance.instance_id)
            if tag is None:
                results[i] = SweGrader._outcome(instance, "infra_error", "no image for this instance")
                return
            with trio.move_on_after(bound):
                async with open_pool(instance_sandbox(sandbox, tag), gc_at_start=False) as pool:
                    results[i] = await grader.grade(pool, instance, patch)
            if results[i] is None:
                detail = (
                    f"the grading outlived the {bound:g} s every step of it ends within: the engine stopped answering"
                )
                results[i] = SweGrader._outcome(instance, "infra_error", detail)
            done = sum(r is not None for r in results)
            log.info("graded %d/%d: %s %s", done, len(predictions), instance.instance_id, results[i].status)

    async with trio.open_nursery() as nursery:
        for i, (instance, patch) in enumerate(predictions):
            nursery.start_soon(one, i, instance, patch)
    late = f"not started within the {deadline_s:g} s the caller allows a request"
    return [
        r if r is not None else SweGrader._outcome(instance, "infra_error", late)
        for r, (instance, _) in zip(results, predictions)
    ]
