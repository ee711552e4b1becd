"""F2P/P2P grading rules, validity of a run, report totals."""

from __future__ import annotations

from tasks.swe.resolution import InstanceResult, SweReport, allow_skips, grade_log
from tasks.swe.testlog import PytestLog, TestStatus

P, F, E, S, XF, XP = (
    TestStatus.PASSED,
    TestStatus.FAILED,
    TestStatus.ERROR,
    TestStatus.SKIPPED,
    TestStatus.XFAIL,
    TestStatus.XPASS,
)
F2P = ["t.py::test_fix", "t.py::test_fix_param[1]"]
P2P = ["t.py::test_old", "t.py::test_other"]


def log_of(statuses: dict[str, TestStatus], **counts: int) -> PytestLog:
    passed = sum(s == P for s in statuses.values())
    failed = sum(s == F for s in statuses.values())
    errors = sum(s == E for s in statuses.values())
    counts = {"passed": passed, "failed": failed, "error": errors, **counts}
    reports = sum(counts.get(k, 0) for k in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"))
    return PytestLog(
        statuses=dict(statuses),
        session_started=True,
        final_line="=== done in 0.1s ===",
        counts=counts,
        summary_passed_lines=passed,
        collected=reports,
        progress_marks=reports,
    )


def grade(statuses, exit_code=None, **counts):
    if exit_code is None:
        exit_code = 1 if any(s in (F, E) for s in statuses.values()) else 0
    return grade_log("i", F2P, P2P, log_of(statuses, **counts), exit_code)


def test_all_pass_is_resolved():
    result = grade({t: P for t in F2P + P2P})
    assert result.resolved and result.status == "resolved" and result.partial == 1.0 and result.reward == 1.0
    assert result.f2p.success == tuple(F2P) and result.p2p.failure == ()


def test_one_f2p_failure_is_not_resolved_and_partial_counts():
    result = grade({F2P[0]: P, F2P[1]: F, **{t: P for t in P2P}})
    assert not result.resolved and result.status == "unresolved" and result.reward == 0.0
    assert result.f2p.failure == (F2P[1],) and result.partial == 0.75


def test_a_skipped_p2p_test_passes_only_where_the_unpatched_tree_skips_it_too():
    skipped_p2p = grade({**{t: P for t in F2P}, P2P[0]: S, P2P[1]: P}, skipped=1)
    assert not skipped_p2p.resolved and skipped_p2p.p2p.failure == (P2P[0],)  # until the reference run says
    assert skipped_p2p.p2p_skipped == (P2P[0],) and P2P[0] in skipped_p2p.detail
    allowed = allow_skips(skipped_p2p, frozenset({P2P[0], "t.py::test_unrelated"}))
    assert allowed.resolved and allowed.status == "resolved" and allowed.partial == 1.0 and allowed.reward == 1.0
    assert allowed.p2p.failure == () and allowed.p2p_skipped == () and allowed.detail == ""
    regression = allow_skips(skipped_p2p, frozenset({P2P[1]}))  # the unpatched tree runs test_old: a regression
    assert regression == skipped_p2p and not regression.resolved
    both = grade({**{t: P for t in F2P}, **{t: S for t in P2P}}, skipped=2)
    partly = allow_skips(both, frozenset({P2P[1]}))
    assert not partly.resolved and partly.p2p.failure == (P2P[0],) and partly.p2p_skipped == (P2P[0],)
    assert partly.partial == 0.75
    skipped_f2p = grade({F2P[0]: S, F2P[1]: P, **{t: P for t in P2P}}, skipped=1)
    assert allow_skips(skipped_f2p, frozenset(F2P)).f2p.failure == (F2P[0],)  # an F2P test must pass, never skip
    invalid = grade({**{t: P for t in F2P}, P2P[0]: S, P2P[1]: P}, exit_code=3, skipped=1)
    assert invalid.status == "invalid" and allow_skips(invalid, frozenset(P2P)) == invalid


def test_xfail_is_not_a_pass_xpass_is_for_p2p():
    assert not grade({**{t: P for t in F2P}, P2P[0]: XF, P2P[1]: P}).resolved
    assert grade({**{t: P for t in F2P}, P2P[0]: XP, P2P[1]: P}).resolved
    assert not grade({F2P[0]: XP, F2P[1]: P, **{t: P for t in P2P}}).resolved


def test_a_missing_test_fails():
    result = grade({F2P[0]: P, **{t: P for t in P2P}})
    assert not result.resolved and result.f2p.failure == (F2P[1],)


def test_a_broken_p2p_test_blocks_resolution():
    result = grade({**{t: P for t in F2P}, P2P[0]: F, P2P[1]: P})
    assert not result.resolved and result.f2p.failure == () and result.p2p.failure == (P2P[0],)


def test_no_evidence_is_invalid_never_resolved():
    log = PytestLog(statuses={t: P for t in F2P + P2P}, session_started=False)
    result = grade_log("i", F2P, P2P, log, 0)
    assert result.status == "invalid" and not result.resolved and result.partial == 0.0
    assert result.reward == 0.0 and not result.infra_error


def test_exit_codes_that_contradict_the_log_are_invalid():
    all_pass = {t: P for t in F2P + P2P}
    assert grade(all_pass, exit_code=3).status == "invalid"  # non-zero exit, no failure in the log
    assert "no failure" in grade(all_pass, exit_code=3).detail
    failing = {**all_pass, P2P[0]: F}
    assert grade(failing, exit_code=0).status == "invalid"  # exit 0 although the log shows a failure
    assert grade(failing, exit_code=1).status == "unresolved"


def test_summary_that_does_not_add_up_is_invalid():
    log = log_of({t: P for t in F2P + P2P})
    log.summary_passed_lines += 1
    assert grade_log("i", F2P, P2P, log, 0).status == "invalid"


def test_report_totals():
    results = [
        InstanceResult(instance_id="a", resolved=True, status="resolved"),
        InstanceResult(instance_id="b", resolved=False, status="infra_error"),
        InstanceResult(instance_id="c", resolved=False, status="patch_apply_failed"),
        InstanceResult(instance_id="d", resolved=False, status="invalid"),
    ]
    report = SweReport.of(results)
    assert (report.total, report.resolved, report.infra_errors, report.patch_apply_failed, report.invalid) == (
        4,
        1,
        1,
        1,
        1,
    )
    assert results[1].reward is None  # masked, never a 0
    document = report.model_dump(mode="json")
    assert set(document) >= {"total", "resolved", "infra_errors", "instances"}
    assert set(document["instances"][0]) >= {"instance_id", "resolved", "f2p", "p2p"}
