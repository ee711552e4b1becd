"""Parsing a pytest log (``-rA``, optionally ``-v`` or ``-q``) into per-test statuses.

What is read, and why only that (``-q`` logs work too: they lack the header
and the ``=`` framing of the last line; their progress lines or their summary
section open the record):

* The **short test summary** (between ``=== short test summary info ===``
  and pytest's final ``=== N passed, ... in Xs ===`` line): one
  ``STATUS node-id[ - message]`` line per test with ``-rA``.
* The **verbose progress lines** (``node-id STATUS [ NN%]``), only between
  ``=== test session starts ===`` and the first section header after it.

Captured output of tests is printed in other sections (FAILURES, PASSES, ...),
so a test that prints ``PASSED some::test`` does not count. When a test has
several statuses (``-v`` progress plus summary, or a test that passed its call
and errored in teardown) the worst one wins, so a forged ``PASSED`` line can
never hide a real failure. The log is *evidence the suite ran* only when it
holds the session header (or, with ``-q``, a progress line ending in its
percentage, or the summary header) and the final count line, and the log adds
up: the ``PASSED`` lines of the summary match the count pytest printed, with
the header the count matches the ``collected N items`` line, and the progress
marks (one per test report) printed before the first section match the count.
A ``-q`` run with nothing to summarise (``-rs`` and no skip, or no ``-r`` and
no failure) prints only its progress lines and the final line. Output that
stops early and a forged summary block with a plausible count both fail these
checks unless they reproduce every line pytest would have printed; code
running inside the pytest process can do that, which is the known limit.

Skips reported only by location (``SKIPPED [1] path:line: reason``, what
``-rA`` or ``-rs`` prints without ``-v``) cannot be tied to a test id from the
log: the place is where the skip was raised (a fixture, package code) and one
line may stand for several tests. They are kept as ``skipped_locations``; the
grader takes every test's status, skips included, from the harness's record
(`tasks.swe.harness`, by node id), so a skip is judged the same whatever the
command prints.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

_SESSION_START = re.compile(r"^=+ test session starts =+$")
_SECTION = re.compile(r"^=+ .+ =+$")
_SUMMARY_START = re.compile(r"^=+ short test summary info =+$")
# pytest's last line; ``-q`` prints it without the ``=`` framing.
# Counts have at most 12 digits: a longer number in captured output is not pytest's, and int() of one past
# 4300 digits raises (the candidate's output must never crash the grader).
_FINAL = re.compile(
    r"^(?:=+ )?(?P<body>(?:\d{1,12} \w+|no tests ran)(?:, \d{1,12} \w+)*) in [\d.]{1,20}s(?: \([^)]*\))?(?: =+)?$"
)
_COUNT = re.compile(r"(\d{1,12}) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)")
# A -v progress line: "node-id STATUS [ NN%]". Matched without backtracking over the id (a line of colons once
# took the host 39 s): the status words are found first, then the id before one is checked.
_STATUS_WORD = re.compile(r" (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?= |$)")
_SKIP_LOCATION = re.compile(r"^SKIPPED \[\d{1,12}\] (?P<where>.+?)(?:: .*)?$")
MAX_LINE = 16384  # pytest's own lines are far shorter (terminal width, test ids); longer ones are not read
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COLLECTED = re.compile(r"^(?:collecting \.\.\. )?collected (?P<n>\d{1,12}) items?(?P<rest>(?: / \d{1,12} \w+)*)\s*$")
_XDIST_COLLECTED = re.compile(r"^\d{1,6} workers? \[(?P<n>\d{1,12}) items?\]$")
# A progress line without -v: the module's path and one mark per test phase report, then the percentage;
# a long module goes on over lines holding only marks.
_PROGRESS = re.compile(r"^(?:\S+\.py )?(?P<marks>[.FEsxXR]+)(?: +\[ *\d{1,3}%\])?$")
# The first progress line of a -q run (no session header): marks only, never the module's path, then the percentage.
_QUIET_PROGRESS = re.compile(r"^[.FEsxXR]+ +\[ *\d{1,3}%\]$")


def verbose_line(line: str) -> tuple[str, TestStatus] | None:
    """``(node id, status)`` of a ``-v`` progress line, or None (linear time in the line's length)."""
    if not line or line[0].isspace():
        return None
    for match in _STATUS_WORD.finditer(line):
        test_id = line[: match.start()]
        if "::" in test_id[1:] and not test_id.endswith("::"):
            return test_id, TestStatus(match.group(1))
    return None


_FRAME = ">>>>> gym:"  # the grader's own framing lines around the run (tasks/swe/grader.py)


class TestStatus(str, enum.Enum):
    """A test's outcome as pytest reports it."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"
    XFAIL = "XFAIL"
    XPASS = "XPASS"


# Higher wins when one test has several statuses.
SEVERITY = {
    TestStatus.PASSED: 0,
    TestStatus.XPASS: 1,
    TestStatus.SKIPPED: 2,
    TestStatus.XFAIL: 3,
    TestStatus.FAILED: 4,
    TestStatus.ERROR: 5,
}


@dataclass
class PytestLog:
    """What a pytest log says."""

    statuses: dict[str, TestStatus] = field(default_factory=dict)
    session_started: bool = False
    final_line: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    summary_passed_lines: int = 0
    skipped_locations: list[str] = field(default_factory=list)
    module_errors: list[str] = field(default_factory=list)  # ERROR lines without a test id (collection errors)

    summary_seen: bool = False
    quiet_progress: bool = False  # a -q run's progress lines opened the record (no session header)
    collected: int | None = None  # "collected N items" of the session header
    collection_counts: dict[str, int] = field(default_factory=dict)  # its "/ M skipped / K errors" part
    collected_lines: int = 0  # "collected N items" lines in the header region (pytest prints one)
    progress_marks: int = 0  # progress marks (or -v lines) between the header and the first section
    after_final: int = 0  # non-empty lines after the last final count line (pytest prints nothing there)

    @property
    def ran(self) -> bool:
        """The log holds evidence that a pytest session ran to its end (a start, and the final count line)."""
        return (self.session_started or self.quiet_progress or self.summary_seen) and self.final_line is not None

    @property
    def failures(self) -> int:
        """Failures the log shows (statuses, module errors and pytest's own counts)."""
        shown = sum(s in (TestStatus.FAILED, TestStatus.ERROR) for s in self.statuses.values())
        counted = self.counts.get("failed", 0) + self.counts.get("error", 0)
        return max(shown + len(self.module_errors), counted)

    def consistency_problem(self) -> str | None:
        """Why the log does not add up (forged or truncated lines), or None."""
        if not self.ran:
            return "no evidence the test session ran (no session header or no final count line)"
        if self.after_final:
            return (
                f"{self.after_final} lines follow the final count line: only pytest's own last summary "
                "counts, and pytest prints nothing after it"
            )
        if self.session_started and self.collected is None:
            return "pytest's 'collected N items' line is missing (the session ended before collection did)"
        if self.collected_lines > 1:
            return f"{self.collected_lines} 'collected N items' lines: pytest prints one"
        if self.collected is not None:
            # Modules skipped whole are counted by the collected line's "/ M skipped", never as tests.
            skipped = self.counts.get("skipped", 0) - self.collection_counts.get("skipped", 0)
            tests = skipped + sum(self.counts.get(k, 0) for k in ("passed", "failed", "xfailed", "xpassed"))
            # A test that passed and then errored in teardown counts in both "passed" and "error".
            errors, selected = self.counts.get("error", 0), tests + self.counts.get("deselected", 0)
            if skipped < 0:
                return "pytest's final line counts fewer skips than its collected line"
            if self.collection_counts.get("error"):
                # Collection errors interrupt the session before any test runs (unless told to go on: then
                # the collected tests run as usual); either way no more tests run than were collected.
                if selected > self.collected:
                    return f"pytest collected {self.collected} tests but its final line accounts for {selected}"
            elif not selected <= self.collected <= selected + errors:
                return f"pytest collected {self.collected} tests but its final line accounts for {selected}"
            if problem := self._marks_problem(tests, tests):
                return problem
        elif self.quiet_progress:
            # No collected line: a module skipped whole counts as a skip in the final line and leaves no mark.
            tests = sum(self.counts.get(k, 0) for k in ("passed", "failed", "xfailed", "xpassed", "skipped"))
            if problem := self._marks_problem(tests - self.counts.get("skipped", 0), tests):
                return problem
        if self.summary_passed_lines and self.summary_passed_lines != self.counts.get("passed", 0):
            return (
                f"the summary lists {self.summary_passed_lines} PASSED lines but pytest counted "
                f"{self.counts.get('passed', 0)} passed"
            )
        return None

    def _marks_problem(self, least: int, tests: int) -> str | None:
        """Each test run leaves a progress mark (a teardown error or a rerun one more) before any section."""
        most = tests + self.counts.get("error", 0) + self.counts.get("rerun", 0)
        if least <= self.progress_marks <= most:
            return None
        return f"the progress lines show {self.progress_marks} test reports but pytest's final line counts {tests} tests run"


def split_id(rest: str) -> tuple[str, str]:
    """``node-id - message`` -> ``(node-id, message)``; a `` - `` inside ``[...]`` belongs to the id."""
    depth = 0
    for i, char in enumerate(rest):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i], rest[i + 3 :]
    return rest, ""


def _record(log: PytestLog, test_id: str, status: TestStatus) -> None:
    previous = log.statuses.get(test_id)
    if previous is None or SEVERITY[status] > SEVERITY[previous]:
        log.statuses[test_id] = status


def _summary_line(log: PytestLog, line: str) -> None:
    word, _, rest = line.partition(" ")
    try:
        status = TestStatus(word)
    except ValueError:
        return
    if status == TestStatus.SKIPPED and (match := _SKIP_LOCATION.match(line)):
        log.skipped_locations.append(match.group("where"))
        return
    test_id, _ = split_id(rest.strip())
    if not test_id:
        return
    if "::" not in test_id:
        if status == TestStatus.ERROR:
            log.module_errors.append(test_id)
        return
    if status == TestStatus.PASSED:
        log.summary_passed_lines += 1
    _record(log, test_id, status)


def parse(text: str) -> PytestLog:
    """Statuses of every test a pytest log reports (see the module docstring for what counts)."""
    log = PytestLog()
    region = "before"  # before -> progress -> sections -> summary -> after
    for raw in text.splitlines():
        if len(raw) > MAX_LINE:  # not a line of pytest's own; it still counts as something after the final line
            log.after_final += log.final_line is not None
            continue
        line = _ANSI.sub("", raw).rstrip()
        if _SESSION_START.match(line):
            log.session_started = True
            region = "progress"
            continue
        if (
            log.session_started
            and region == "progress"
            and (collected := _COLLECTED.match(line) or _XDIST_COLLECTED.match(line))
        ):
            log.collected_lines += 1
            if log.collected is not None:
                continue
            log.collected = int(collected.group("n"))
            for number, word in _COUNT.findall(collected.groupdict().get("rest") or ""):
                key = {"errors": "error"}.get(word, word)
                log.collection_counts[key] = log.collection_counts.get(key, 0) + int(number)
            continue
        final = _FINAL.match(line)
        if log.final_line is not None and line and not line.startswith(_FRAME) and not final:
            log.after_final += 1
        if final and (region != "before" or log.summary_seen):
            log.after_final = 0
            log.final_line = line
            log.counts = {}
            for number, word in _COUNT.findall(final.group("body")):
                key = {"errors": "error", "warnings": "warning"}.get(word, word)
                log.counts[key] = log.counts.get(key, 0) + int(number)
            region = "after"
            continue
        if region == "before" and not log.summary_seen and _QUIET_PROGRESS.match(line):
            # -q: no session header; its first progress line opens the record (marks without the percentage do
            # not: a line of dots or letters printed before the session is no progress line of pytest's)
            log.quiet_progress = True
            region = "progress"
        if _SUMMARY_START.match(line) and region != "after":
            region = "summary"  # with -q there is no session header: the summary alone opens the record
            log.summary_seen = True
            continue
        if region == "progress" and _SECTION.match(line):
            region = "sections"
            continue
        if region == "progress" and (verbose := verbose_line(line)):
            _record(log, *verbose)
            log.progress_marks += log.collected is not None
        elif (
            region == "progress"
            and (log.collected is not None or log.quiet_progress)
            and (marks := _PROGRESS.match(line))
        ):
            log.progress_marks += len(marks.group("marks"))
        elif region == "summary":
            _summary_line(log, line)
    return log
