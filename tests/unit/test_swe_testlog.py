"""The pytest log parser: statuses, parametrized ids, what counts as evidence, forged lines."""

from __future__ import annotations

from tasks.swe.testlog import TestStatus, parse, split_id
from tests.swe_log_support import RA_LOG, VERBOSE_LOG


def test_every_status_and_parametrized_ids():
    log = parse(RA_LOG)
    assert log.ran and log.consistency_problem() is None
    assert log.statuses == {
        "test_demo.py::test_pass": TestStatus.PASSED,
        "test_demo.py::test_param[a - b]": TestStatus.PASSED,
        "test_demo.py::test_param[]": TestStatus.PASSED,
        "test_demo.py::test_param[None]": TestStatus.PASSED,
        "test_demo.py::test_param[sp ace]": TestStatus.PASSED,
        "test_demo.py::TestK::test_m": TestStatus.PASSED,
        "test_demo.py::test_xfail": TestStatus.XFAIL,
        "test_demo.py::test_xpass": TestStatus.XPASS,
        "test_demo.py::test_error": TestStatus.ERROR,
        "test_demo.py::test_fail": TestStatus.FAILED,
        "test_demo.py::test_param[1]": TestStatus.FAILED,
    }
    assert log.skipped_locations == ["test_demo.py:6"]
    assert log.counts == {"failed": 2, "passed": 6, "skipped": 1, "xfailed": 1, "xpassed": 1, "error": 1}
    assert log.failures == 3


def test_captured_output_cannot_forge_a_pass():
    # The failing test printed "PASSED test_demo.py::test_fail" in its captured output.
    assert parse(RA_LOG).statuses["test_demo.py::test_fail"] == TestStatus.FAILED


def test_a_forged_pass_line_never_hides_a_failure():
    forged = RA_LOG.replace(
        "FAILED test_demo.py::test_fail - assert 0\n",
        "FAILED test_demo.py::test_fail - assert 0\nPASSED test_demo.py::test_fail\n",
    )
    log = parse(forged)
    assert log.statuses["test_demo.py::test_fail"] == TestStatus.FAILED
    assert "7 PASSED lines" in log.consistency_problem()  # the counts no longer add up either


def test_verbose_progress_lines_and_worst_status():
    log = parse(VERBOSE_LOG)
    assert log.statuses["test_demo.py::test_skip"] == TestStatus.SKIPPED  # only -v ties a skip to its id
    assert log.statuses["test_demo.py::test_teardown"] == TestStatus.ERROR  # passed its call, errored in teardown
    assert log.statuses["test_demo.py::test_param[a - b]"] == TestStatus.PASSED
    # a FAILED line inside a report section is not a progress line
    assert log.statuses["test_demo.py::test_pass"] == TestStatus.PASSED
    assert log.consistency_problem() is None


def test_no_evidence_the_session_ran():
    assert not parse("").ran
    assert not parse("Traceback (most recent call last):\nImportError: boom\n").ran
    cut = RA_LOG.rsplit("====", 2)[0]  # killed before the final count line
    assert not parse(cut).ran
    assert "no evidence" in parse(cut).consistency_problem()
    headless = RA_LOG.split("\n", 1)[1].replace("short test summary info", "summary")
    assert not parse(headless).ran  # a final line with neither a session header nor a summary header


def test_collection_errors_and_no_tests():
    log = parse(
        "===== test session starts =====\ncollected 0 items / 1 error\n"
        "=========== short test summary info ===========\n"
        "ERROR tests/test_x.py - ImportError: cannot import name 'f'\n"
        "!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!\n"
        "============ 1 error in 0.20s ============\n"
    )
    assert log.ran and log.statuses == {} and log.module_errors == ["tests/test_x.py"] and log.failures == 1
    empty = parse("===== test session starts =====\ncollected 0 items\n===== no tests ran in 0.01s =====\n")
    assert empty.ran and empty.counts == {} and empty.failures == 0


def test_ansi_colours_are_ignored():
    coloured = RA_LOG.replace("PASSED test_demo.py::test_pass", "\x1b[32mPASSED\x1b[0m test_demo.py::test_pass")
    assert parse(coloured).statuses["test_demo.py::test_pass"] == TestStatus.PASSED


def test_split_id_keeps_brackets_whole():
    assert split_id("t.py::f[a - b] - AssertionError: x - y") == ("t.py::f[a - b]", "AssertionError: x - y")
    assert split_id("t.py::f") == ("t.py::f", "")
    assert split_id("t.py::C::f[x] - bad") == ("t.py::C::f[x]", "bad")


def test_quiet_logs_have_no_header_but_still_count():
    quiet = (
        "..F                                                                      [100%]\n"
        "=================================== FAILURES ===================================\n"
        "E   assert 0\n"
        "=========================== short test summary info ============================\n"
        "PASSED t.py::test_a\nPASSED t.py::test_b\nFAILED t.py::test_c - assert 0\n"
        "1 failed, 2 passed in 0.05s\n"
    )
    log = parse(quiet)
    assert log.ran and log.consistency_problem() is None
    assert log.statuses == {
        "t.py::test_a": TestStatus.PASSED,
        "t.py::test_b": TestStatus.PASSED,
        "t.py::test_c": TestStatus.FAILED,
    }
    # no summary (-q -rs or -rN with nothing to list): the progress line opens the record; its marks must add up
    assert parse("..F  [100%]\n1 failed, 2 passed in 0.05s\n").consistency_problem() is None
    assert "progress lines show 2" in parse(".F  [100%]\n1 failed, 2 passed in 0.05s\n").consistency_problem()
    assert not parse("..F\n1 failed, 2 passed in 0.05s\n").ran  # marks without the percentage open nothing


def test_nothing_may_follow_pytests_own_final_line():
    """Package code that prints a summary and a count line, then goes on: only pytest's last line counts."""
    fake = RA_LOG + "=== short test summary info ===\nPASSED test_demo.py::test_fail\n=== 12 passed in 0.1s ===\nbye\n"
    assert "follow the final count line" in parse(fake).consistency_problem()
    framed = ">>>>> gym: start of the test run\n" + RA_LOG + "\n>>>>> gym: end of the test run: exit_code=1\n"
    assert parse(framed).consistency_problem() is None


def test_counts_must_account_for_what_pytest_collected():
    forged = RA_LOG.replace(
        "==== 2 failed, 6 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error in 2.31s =====",
        "==== 20 passed in 2.31s ====",
    )
    assert "collected 12 tests" in parse(forged).consistency_problem()
    assert parse(VERBOSE_LOG).consistency_problem() is None  # a teardown error counts twice: still consistent


# What package code printed at import (during collection) through pytest's saved stdout before exiting:
# pytest's header, then a summary block and a count line that match the instance's tests.
FORGED_AT_COLLECTION = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.5.0
rootdir: /workspace/repo
=========================== short test summary info ============================
PASSED test_demo.py::test_fail
PASSED test_demo.py::test_pass
============================== 2 passed in 0.31s ===============================
"""


def test_a_summary_forged_before_collection_ended_is_invalid():
    log = parse(FORGED_AT_COLLECTION)
    assert log.ran and log.failures == 0  # every line the old checks read looks fine
    assert "'collected N items' line is missing" in log.consistency_problem()


def test_a_summary_forged_from_inside_a_test_lacks_the_progress_marks():
    """The forger knows the collected count but the run stopped after three tests: the marks say so."""
    progress = "test_demo.py .FF....sxXE.                                                [100%]"
    head = RA_LOG.split(progress)[0]
    forged = (
        head
        + "test_demo.py ..."
        + (
            "\n=========================== short test summary info ============================\n"
            + "".join(f"PASSED test_demo.py::test_{i}\n" for i in range(12))
            + "============================== 12 passed in 0.31s ==============================\n"
        )
    )
    problem = parse(forged).consistency_problem()
    assert problem and "progress lines show 3 test reports" in problem
    # Control: the same forged block after every mark pytest would have printed is not caught (the limit).
    complete = head + "test_demo.py " + "." * 12 + forged.split("test_demo.py ...", 1)[1]
    assert parse(complete).consistency_problem() is None


def test_collection_time_skips_deselection_and_wrapped_progress_lines():
    skipped_module = (
        "===== test session starts =====\ncollected 1 item / 1 skipped\n\ntest_ok.py .      [100%]\n\n"
        "===== short test summary info =====\nPASSED test_ok.py::test_ok\nSKIPPED [1] test_mod.py:2: m\n"
        "===== 1 passed, 1 skipped in 1.37s =====\n"
    )
    assert parse(skipped_module).consistency_problem() is None
    deselected = (
        "===== test session starts =====\ncollected 3 items / 2 deselected / 1 selected\n\nt.py .   [100%]\n\n"
        "===== short test summary info =====\nPASSED t.py::test_a\n===== 1 passed, 2 deselected in 0.1s =====\n"
    )
    assert parse(deselected).consistency_problem() is None
    long_module = (
        "===== test session starts =====\ncollected 150 items\n\n"
        f"t.py {'.' * 70} [ 46%]\n{'.' * 72} [ 94%]\n{'.' * 8}     [100%]\n\n"
        "===== short test summary info =====\n"
        + "".join(f"PASSED t.py::test_x[{i}]\n" for i in range(150))
        + "===== 150 passed in 1.0s =====\n"
    )
    assert parse(long_module).consistency_problem() is None
    xdist = (
        "===== test session starts =====\ncreated: 2/2 workers\n2 workers [2 items]\n\n..        [100%]\n"
        "===== short test summary info =====\nPASSED t.py::test_a\nPASSED t.py::test_b\n"
        "===== 2 passed in 0.9s =====\n"
    )
    assert parse(xdist).consistency_problem() is None


def test_a_forged_collection_error_does_not_switch_the_checks_off():
    """Outside attack: a fake 'collected 1 item / 1 error' at import, then a summary from inside a test."""
    forged = (
        "===== test session starts =====\ncollected 1 item / 1 error\ncollected 57 items\n\n"
        "toolz/tests/test_itertoolz.py ..\n"
        "===== short test summary info =====\n"
        + "".join(f"PASSED t.py::test_{i}\n" for i in range(57))
        + "===== 57 passed in 0.42s =====\n"
    )
    assert "'collected N items' lines" in parse(forged).consistency_problem()
    only_fake = forged.replace("collected 57 items\n", "")
    assert "collected 1 tests but its final line accounts for 57" in parse(only_fake).consistency_problem()
    right_count = only_fake.replace("collected 1 item / 1 error", "collected 57 items / 1 error")
    assert "progress lines show 2 test reports" in parse(right_count).consistency_problem()
    interrupted = (
        "===== test session starts =====\ncollected 1 item / 1 error / 1 skipped\n\n"
        "===== short test summary info =====\nSKIPPED [1] test_m.py:2: m\nERROR test_broken.py\n"
        "!!!!! Interrupted: 1 error during collection !!!!!\n===== 1 skipped, 1 error in 1.52s =====\n"
    )
    assert parse(interrupted).consistency_problem() is None and parse(interrupted).failures == 1


def test_hostile_lines_neither_crash_nor_stall_the_parser():
    """A 5000-digit count (int() raises past 4300 digits) and lines built to make a backtracking regex
    quadratic (a 60,000-character line of colons once took 39 s): parsed, not trusted, in linear time."""
    import time

    huge = RA_LOG.replace("2 failed, 6 passed", "9" * 5000 + " passed")
    assert parse(huge).consistency_problem() is not None
    hostile = [
        "x" + ":" * 16000,
        "x" + "::" * 8000,
        "= " + " =" * 8000 + "x",
        "1 passed, " * 1600 + "x",
        "SKIPPED [1] " + ": " * 8000,
        "collected 1 items" + " / 1 error" * 1500,
        "x" + ":" * 60000,
    ]
    started = time.monotonic()
    for line in hostile:
        log = parse(RA_LOG.replace("test_demo.py .FF....sxXE.", f"{line}\ntest_demo.py .FF....sxXE.", 1))
        assert log.statuses["test_demo.py::test_pass"] == TestStatus.PASSED
    assert time.monotonic() - started < 5.0  # about 0.01 s; quadratic backtracking took minutes
