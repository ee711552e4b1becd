"""The grade of one SWE instance: F2P/P2P rules over parsed test statuses, and the report shapes.

Rules (the SWE-bench harness's, made stricter where a log can lie):

* an F2P test passes only when its status is ``PASSED``;
* a P2P test passes when ``PASSED`` or ``XPASS``, or ``SKIPPED`` where the same
  command skips it with the gold patch too (the grader's reference run,
  `allow_skips`): a skip is the result of whatever code ran, so code that calls
  ``pytest.skip`` where a broken P2P test would fail must not turn that failure
  into a pass, however the skip's reported place is dressed up (a frame hidden
  with ``__tracebackhide__``, code compiled under an installed package's file
  name); ``XFAIL`` is never a pass, so code that calls ``pytest.xfail`` cannot
  either;
* a test missing from the log fails; an id of the instance's lists cut short inside its parameters (more ``[``
  than ``]``, as SWE-bench's parser cuts an id at its first space: 676 of SWE-bench Verified's ids) stands for the
  tests whose ids go on from it after whitespace, and is as good as the worst of them (the harness also takes
  them when they agree, by any prefix);
* resolved = every F2P and every P2P test passes, and the log is valid;
* a log without evidence the session ran, a non-zero exit with no failure in
  the log, a zero exit with failures in it, or a summary that does not add up
  is ``invalid``: never resolved, reported apart from ordinary failures.

Statuses: ``resolved``, ``unresolved``, ``patch_apply_failed``, ``invalid``
(the run cannot be trusted: reward 0, it is the candidate's doing),
``tampered`` (the candidate's code reached into the test run: the tamper scan
of the applied tree or the harness's record of the run, `tasks.swe.harness`;
reward 0, every test failing, never masked), ``infra_error`` (the sandbox or
the instance failed: masked, never a 0) and ``empty`` (a null or empty
``model_patch`` in a predictions file: not run, unresolved, counted apart as the
SWE-bench harness counts it). `HarnessReport` gives the harness's report fields
for the same results (the mapping is in docs/swe.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.swe.testlog import SEVERITY, PytestLog, TestStatus

Status = Literal["resolved", "unresolved", "patch_apply_failed", "invalid", "tampered", "infra_error", "empty"]

F2P_PASS = frozenset({TestStatus.PASSED})
P2P_PASS = frozenset({TestStatus.PASSED, TestStatus.XPASS})  # SKIPPED: only as the reference run skips it


class TestGroup(BaseModel):
    """The F2P or P2P tests split by outcome (the SWE-bench report's ``success``/``failure``)."""

    __test__ = False  # not a test class, whatever pytest thinks of the name
    model_config = ConfigDict(frozen=True, extra="forbid")

    success: tuple[str, ...] = ()
    failure: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.success) + len(self.failure)

    @property
    def fraction(self) -> float:
        return len(self.success) / self.total if self.total else 1.0


class StrippedPath(BaseModel):
    """A path the candidate's diff changed that grading ignored, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    reason: str


class InstanceResult(BaseModel):
    """The grade of one prediction, in the shape ``--json`` writes per instance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str
    resolved: bool
    status: Status
    f2p: TestGroup = Field(default_factory=TestGroup)
    p2p: TestGroup = Field(default_factory=TestGroup)
    partial: float = Field(0.0, description="fraction of F2P and P2P tests that pass (0 unless the log is valid)")
    stripped: tuple[StrippedPath, ...] = Field((), description="protected paths removed from the diff")
    exit_code: int | None = None
    detail: str = ""
    wall_s: float = 0.0
    p2p_skipped: tuple[str, ...] = Field(
        (), description="P2P tests the run skipped and the gold patch's run does not (or not yet compared): failing"
    )
    test_run: str | None = Field(
        None, description="how the test command ended (the runner's failure kind: ok, nonzero_exit, timeout, oom, ...)"
    )

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    @property
    def reward(self) -> float | None:
        """1.0 resolved, 0.0 otherwise, None (masked) for an infrastructure failure."""
        return None if self.infra_error else float(self.resolved)


class SweReport(BaseModel):
    """Totals over predictions, in the shape ``python -m gym grade --swe --json`` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    resolved: int
    infra_errors: int
    invalid: int
    patch_apply_failed: int
    tampered: int
    empty: int = 0
    instances: tuple[InstanceResult, ...]

    @classmethod
    def of(cls, results: Sequence[InstanceResult]) -> SweReport:
        return cls(
            total=len(results),
            resolved=sum(r.resolved for r in results),
            infra_errors=sum(r.status == "infra_error" for r in results),
            invalid=sum(r.status == "invalid" for r in results),
            patch_apply_failed=sum(r.status == "patch_apply_failed" for r in results),
            tampered=sum(r.status == "tampered" for r in results),
            empty=sum(r.status == "empty" for r in results),
            instances=tuple(results),
        )


HARNESS_SCHEMA_VERSION = 2  # swebench 5.0.2's reporting.make_run_report
HARNESS_COMPLETED = ("resolved", "unresolved", "tampered")  # graded on a test run the harness would report on
HARNESS_ERRORS = ("infra_error", "patch_apply_failed", "invalid")  # no report the harness would call completed


class HarnessReport(BaseModel):
    """The SWE-bench harness's run report (``make_run_report``, schema 2) for our results, written beside ours.

    Ours onto theirs: ``resolved`` -> resolved; ``unresolved`` and ``tampered`` -> unresolved (both completed);
    ``infra_error``, ``patch_apply_failed`` and ``invalid`` -> error (``infra_error`` also an infra failure, as the
    harness marks an environment fault besides counting it); ``empty`` -> empty patch (not run, neither completed
    nor unresolved). An instance of the task file without a usable prediction is incomplete."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total_instances: int
    submitted_instances: int
    completed_instances: int
    resolved_instances: int
    unresolved_instances: int
    infra_failure_instances: int
    ambiguous_failure_instances: int = 0  # every failure of ours is classified
    empty_patch_instances: int
    error_instances: int
    completed_ids: tuple[str, ...]
    incomplete_ids: tuple[str, ...]
    empty_patch_ids: tuple[str, ...]
    submitted_ids: tuple[str, ...]
    resolved_ids: tuple[str, ...]
    unresolved_ids: tuple[str, ...]
    infra_failure_ids: tuple[str, ...]
    ambiguous_failure_ids: tuple[str, ...] = ()
    failure_reasons: dict[str, str] = Field(default_factory=dict, description="an infra failure's first detail line")
    error_ids: tuple[str, ...]
    schema_version: int = HARNESS_SCHEMA_VERSION

    @classmethod
    def of(cls, results: Sequence[InstanceResult], instance_ids: Sequence[str]) -> HarnessReport:
        """The fields for ``results`` (one per submitted prediction) over the task file's ``instance_ids``."""
        by_status: dict[str, list[str]] = {}
        for r in results:
            by_status.setdefault(r.status, []).append(r.instance_id)

        def ids(*statuses: str) -> tuple[str, ...]:
            return tuple(sorted(i for status in statuses for i in by_status.get(status, ())))

        submitted = tuple(sorted({r.instance_id for r in results}))
        infra = ids("infra_error")
        fields = {
            "completed": ids(*HARNESS_COMPLETED),
            "resolved": ids("resolved"),
            "unresolved": ids("unresolved", "tampered"),
            "infra_failure": infra,
            "empty_patch": ids("empty"),
            "error": ids(*HARNESS_ERRORS),
        }
        reasons = {r.instance_id: (r.detail.splitlines() or [""])[0][:300] for r in results if r.instance_id in infra}
        return cls(
            total_instances=len(instance_ids),
            submitted_instances=len(submitted),
            submitted_ids=submitted,
            incomplete_ids=tuple(sorted(set(instance_ids) - set(submitted))),
            failure_reasons=dict(sorted(reasons.items())),
            **{f"{name}_instances": len(found) for name, found in fields.items()},
            **{f"{name}_ids": found for name, found in fields.items()},
        )


def status_of(test_id: str, statuses: dict[str, TestStatus]) -> TestStatus | None:
    """``test_id``'s status; for an id cut inside its parameters (more ``[`` than ``]``) and absent, the worst status
    of the tests whose ids continue it after whitespace (the cut SWE-bench's parser makes), or None."""
    if test_id in statuses or test_id.count("[") <= test_id.count("]"):
        return statuses.get(test_id)
    cut = len(test_id)
    found = [s for t, s in statuses.items() if t.startswith(test_id) and t[cut : cut + 1].isspace()]
    return max(found, key=SEVERITY.__getitem__, default=None)


def group(test_ids: Sequence[str], statuses: dict[str, TestStatus], passing: frozenset[TestStatus]) -> TestGroup:
    found = {t: status_of(t, statuses) for t in test_ids}
    success = tuple(t for t in test_ids if found[t] in passing)
    failure = tuple(t for t in test_ids if found[t] not in passing)
    return TestGroup(success=success, failure=failure)


def validity_problem(log: PytestLog, exit_code: int | None) -> str | None:
    """Why a test run cannot be graded, or None."""
    problem = log.consistency_problem()
    if problem:
        return problem
    if exit_code not in (0, None) and log.failures == 0:
        return f"the test command exited {exit_code} but the log shows no failure"
    if exit_code == 0 and log.failures > 0:
        return f"the test command exited 0 but the log shows {log.failures} failures"
    return None


def grade_log(
    instance_id: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    log: PytestLog,
    exit_code: int | None,
) -> InstanceResult:
    """Apply the F2P/P2P rules to a parsed log (``exit_code`` None: the command was killed, e.g. timeout)."""
    f2p = group(fail_to_pass, log.statuses, F2P_PASS)
    p2p = group(pass_to_pass, log.statuses, P2P_PASS)
    skipped = tuple(t for t in p2p.failure if status_of(t, log.statuses) == TestStatus.SKIPPED)
    problem = validity_problem(log, exit_code)
    if problem:
        return InstanceResult(
            instance_id=instance_id,
            resolved=False,
            status="invalid",
            f2p=f2p,
            p2p=p2p,
            exit_code=exit_code,
            detail=problem,
        )
    return _graded(
        InstanceResult(instance_id=instance_id, resolved=False, status="unresolved", exit_code=exit_code),
        f2p,
        p2p,
        skipped,
    )


def allow_skips(result: InstanceResult, skipped_before: frozenset[str]) -> InstanceResult:
    """``result`` with its skipped P2P tests that the reference run skips as well (``skipped_before``) passing:
    a skip the candidate's change did not cause is not a regression; the others keep failing."""
    allowed = [t for t in result.p2p_skipped if t in skipped_before]
    if not allowed or result.status not in ("resolved", "unresolved"):
        return result
    p2p = TestGroup(
        success=tuple(t for t in result.p2p.failure if t in allowed) + result.p2p.success,
        failure=tuple(t for t in result.p2p.failure if t not in allowed),
    )
    return _graded(result, result.f2p, p2p, tuple(t for t in result.p2p_skipped if t not in allowed))


def _graded(result: InstanceResult, f2p: TestGroup, p2p: TestGroup, skipped: tuple[str, ...]) -> InstanceResult:
    """``result`` (a valid log's) with these groups: resolved, status, partial and detail follow from them."""
    resolved = not f2p.failure and not p2p.failure
    total = f2p.total + p2p.total
    detail = ""
    if skipped:
        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        detail = f"{len(skipped)} P2P test(s) skipped that the gold patch's run does not skip: {shown}"
    return result.model_copy(
        update={
            "resolved": resolved,
            "status": "resolved" if resolved else "unresolved",
            "f2p": f2p,
            "p2p": p2p,
            "partial": (len(f2p.success) + len(p2p.success)) / total if total else 0.0,
            "detail": detail,
            "p2p_skipped": skipped,
        }
    )
