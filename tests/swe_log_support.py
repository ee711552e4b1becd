"""pytest logs several SWE test modules read: verbatim pytest output of the skip-test package (tests/unit/test_swe_skips.py
says how it was captured) and hand-written -rA and -v logs of the log parser's tests (tests/unit/test_swe_testlog.py);
tests/integration/test_swe_harness_agreement.py feeds the same logs to the official swebench parser."""

from __future__ import annotations

# The pieces several of the logs share, verbatim (the header and progress lines of -rA and -rs, of -v and -rA -v,
# the failure report of all, the summary of -rA and -rA -v, the location lines of -rA, -rA -v, -rs and -q -rs).
HEADER = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.7.0
rootdir: /workspace/repo
collected 8 items

tests/test_pkg.py .Fsss.s.                                               [100%]

"""
VERBOSE_HEADER = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.7.0 -- /usr/local/bin/python
rootdir: /workspace/repo
collecting ... collected 8 items

tests/test_pkg.py::test_ok PASSED                                        [ 12%]
tests/test_pkg.py::test_fix FAILED                                       [ 25%]
tests/test_pkg.py::test_marked SKIPPED (optional dependency)             [ 37%]
tests/test_pkg.py::test_called SKIPPED (later)                           [ 50%]
tests/test_pkg.py::test_fixture SKIPPED (no resource)                    [ 62%]
tests/test_pkg.py::test_param[1] PASSED                                  [ 75%]
tests/test_pkg.py::test_param[2] SKIPPED (two)                           [ 87%]
tests/test_pkg.py::test_helper PASSED                                    [100%]

"""
QUIET_PROGRESS = ".Fsss.s.                                                                 [100%]\n"
FAILURES = """\
=================================== FAILURES ===================================
___________________________________ test_fix ___________________________________

    def test_fix():
>       assert add(2, 2) == 4
E       assert 0 == 4
E        +  where 0 = add(2, 2)

tests/test_pkg.py:11: AssertionError
"""
SUMMARY = "=========================== short test summary info ============================\n"
SKIP_LOCATIONS = """\
SKIPPED [1] tests/test_pkg.py:14: optional dependency
SKIPPED [1] tests/test_pkg.py:20: later
SKIPPED [1] tests/test_pkg.py:28: no resource
SKIPPED [1] tests/test_pkg.py:35: two
"""
RA_SUMMARY = f"""\
==================================== PASSES ====================================
{SUMMARY}PASSED tests/test_pkg.py::test_ok
PASSED tests/test_pkg.py::test_param[1]
PASSED tests/test_pkg.py::test_helper
{SKIP_LOCATIONS}FAILED tests/test_pkg.py::test_fix - assert 0 == 4
"""
FAILED_LINE = "FAILED tests/test_pkg.py::test_fix - assert 0 == 4\n"
COUNTS = "1 failed, 3 passed, 4 skipped in {}s"
FRAMED = "==================== " + COUNTS + " ====================\n"
LOGS = {
    "-rA": HEADER + FAILURES + RA_SUMMARY + FRAMED.format(0.12),
    "-v": VERBOSE_HEADER + FAILURES + SUMMARY + FAILED_LINE + FRAMED.format(0.13),
    "-rA -v": VERBOSE_HEADER + FAILURES + RA_SUMMARY + FRAMED.format(0.18),
    "-q -rs": QUIET_PROGRESS + FAILURES + SUMMARY + SKIP_LOCATIONS + COUNTS.format(0.14) + "\n",
    "-rs": HEADER + FAILURES + SUMMARY + SKIP_LOCATIONS + FRAMED.format(0.15),
    "-q": QUIET_PROGRESS + FAILURES + SUMMARY + FAILED_LINE + COUNTS.format(0.25) + "\n",
}

# Also captured: -q -rs (and -q) over the fixed package and a test file without skips; -q over it and a module
# skipped whole at import; -q over 100 parametrized tests, a teardown error and the 3 tests above.
QUIET_CLEAN = """\
...                                                                      [100%]
3 passed in 0.01s
"""
QUIET_MODULE_SKIPPED = """\
...                                                                      [100%]
3 passed, 1 skipped in 0.01s
"""
QUIET_TEARDOWN_ERROR = """\
........................................................................ [ 69%]
.............................E...                                        [100%]
==================================== ERRORS ====================================
______________________ ERROR at teardown of test_teardown ______________________

    @pytest.fixture
    def broken():
        yield
>       raise RuntimeError("teardown")
E       RuntimeError: teardown

tests/test_many.py:7: RuntimeError
=========================== short test summary info ============================
ERROR tests/test_many.py::test_teardown - RuntimeError: teardown
104 passed, 1 error in 0.06s
"""


RA_LOG = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.5.0
rootdir: /workspace/repo
collected 12 items

test_demo.py .FF....sxXE.                                                [100%]

==================================== ERRORS ====================================
_________________________ ERROR at setup of test_error _________________________
E   RuntimeError: fixture
=================================== FAILURES ===================================
__________________________________ test_fail ___________________________________
E   assert 0
----------------------------- Captured stdout call -----------------------------
PASSED test_demo.py::test_fail
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED test_demo.py::test_pass
PASSED test_demo.py::test_param[a - b]
PASSED test_demo.py::test_param[]
PASSED test_demo.py::test_param[None]
PASSED test_demo.py::test_param[sp ace]
PASSED test_demo.py::TestK::test_m
SKIPPED [1] test_demo.py:6: nope
XFAIL test_demo.py::test_xfail - bad
XPASS test_demo.py::test_xpass
ERROR test_demo.py::test_error - RuntimeError: fixture
FAILED test_demo.py::test_fail - assert 0
FAILED test_demo.py::test_param[1] - assert 1 != 1
==== 2 failed, 6 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error in 2.31s =====
"""

VERBOSE_LOG = """\
============================= test session starts ==============================
collecting ... collected 4 items

test_demo.py::test_pass PASSED                                           [ 25%]
test_demo.py::test_skip SKIPPED (nope)                                   [ 50%]
test_demo.py::test_teardown PASSED                                       [ 75%]
test_demo.py::test_teardown ERROR                                        [ 75%]
test_demo.py::test_param[a - b] PASSED                                   [100%]

==================================== ERRORS ====================================
test_demo.py::test_pass FAILED
=========================== short test summary info ============================
PASSED test_demo.py::test_pass
PASSED test_demo.py::test_teardown
PASSED test_demo.py::test_param[a - b]
SKIPPED [1] test_demo.py:6: nope
ERROR test_demo.py::test_teardown - RuntimeError
============= 3 passed, 1 skipped, 1 error in 0.10s ==============
"""
