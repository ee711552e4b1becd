"""The host's side of the grading harness: install its plugin, read its record, judge the test run by it.

The plugin (`tasks.swe.harness_plugin`) is written into ``HARNESS_DIR`` of the grading container (``/tmp``: outside
the repository and outside the tmpfs a diff can fill) after the candidate's diff is applied and before the test
command, with a fresh 32-byte key (`install`), and loaded with ``-p`` (`environment`). After the run the host reads the record (`read_record`, a
regular file only, bounded) and `judge` decides, in this order:

* the record must verify: every line's MAC under this run's key, seq 0, 1, 2, ... without a gap, ``start``
  first, one ``end`` last (a line the harness did not write, or a record cut short, missing or replaced, means
  code of the run wrote it or removed it);
* the harness saw no tampering (``hook``, ``patched``, ``changed`` lines: see the plugin);
* the process exited with the status pytest ended its session with, and that status is not 0 while the record
  holds a failure or error;
* the log never shows a test better off than the harness saw it (``PASSED`` where pytest reported a failure, a
  test pytest never reported).

Any of these failing is ``tampered``; otherwise the statuses are the record's (`Record.statuses`), and the log
adds only its own checks (`tasks.swe.resolution.validity_problem`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest
from sandbox.workspace import Workspace, tar_of
from tasks.swe.diff import PYTEST_CONFIG
from tasks.swe.instance import SweInstance
from tasks.swe.testlog import SEVERITY, PytestLog, TestStatus
from tasks.swe.workspace import PRISTINE_REPO, REPO

HARNESS_DIR = "/tmp/gym-harness"
PLUGIN = "_gym_harness"
RECORD = f"{HARNESS_DIR}/record"
RECORD_LIMIT_BYTES = 48 << 20
SOURCE = Path(__file__).with_name("harness_plugin.py")
_READ = (
    f'f={shlex.quote(RECORD)}; [ -f "$f" ] && [ ! -L "$f" ] || exit 3; exec head -c {RECORD_LIMIT_BYTES + 1} -- "$f"'
)
_SHOWN = 5


def environment(instance: SweInstance, base: dict[str, str]) -> dict[str, str]:
    """``base`` (the isolated environment of the test run) with the harness plugin loaded first."""
    addopts = " ".join(part for part in (f"-p {PLUGIN}", base.get("PYTEST_ADDOPTS", "")) if part)
    return {**base, "PYTHONPATH": HARNESS_DIR, "PYTEST_ADDOPTS": addopts}


def settings_of(watched: list[str], repo: str, pristine: str) -> str:
    """The plugin's settings: the repository, its pristine copy, the test files to watch (relative paths) and the
    names of the conftest/ini files pytest reads beside or above them."""
    config = {"repo": repo, "pristine": pristine, "watch": sorted(set(watched)), "config_names": sorted(PYTEST_CONFIG)}
    return json.dumps(config)


async def install(ws: Workspace, instance: SweInstance, watched: list[str]) -> bytes:
    """Write the plugin, its settings and a fresh key into the container; returns the key. Nothing of the
    candidate's has run in the container yet (``/tmp`` is as the image left it), so a failure is the sandbox's."""
    key = secrets.token_bytes(32)
    settings = settings_of(watched, REPO, PRISTINE_REPO)
    files = {f"{PLUGIN}.py": SOURCE.read_bytes(), "settings.json": settings.encode(), "key": key}
    script = f"mkdir -m 700 {HARNESS_DIR} && tar -x -C {HARNESS_DIR} -f -"
    result = await ws.exec(
        ExecRequest(argv=["bash", "-c", script], cwd="/workspace", stdin=tar_of(files), timeout_s=60.0)
    )
    if result.failure != FailureKind.OK or result.exit_code != 0:
        raise InfraError(f"installing the harness: {result.failure.value} {result.stderr_text[-500:]} {result.detail}")
    return key


async def read_record(ws: Workspace) -> tuple[bytes | None, str]:
    """``(record, "")``, or ``(None, why)`` when there is no record to read (only the run's own code can have
    removed, replaced or grown it); InfraError when the sandbox failed."""
    result = await ws.exec(
        ExecRequest(
            argv=["bash", "-c", _READ], cwd="/workspace", timeout_s=60.0, output_limit_bytes=RECORD_LIMIT_BYTES + 4096
        )
    )
    if result.failure == FailureKind.INFRA_ERROR:
        raise InfraError(f"reading the harness's record: {result.detail}")
    if result.failure != FailureKind.OK or result.exit_code != 0:
        return None, f"no record to read ({result.failure.value}, exit {result.exit_code})"
    if len(result.stdout) > RECORD_LIMIT_BYTES:
        return None, f"the record is over {RECORD_LIMIT_BYTES} bytes"
    return result.stdout, ""


class RecordError(ValueError):
    """The record cannot be trusted: why."""


def status_of(when: str, outcome: str, xfail: bool) -> TestStatus | None:
    """A test report's status as pytest's terminal shows it (None: a passing set-up or teardown)."""
    if xfail:
        return {"skipped": TestStatus.XFAIL, "passed": TestStatus.XPASS}.get(outcome, TestStatus.FAILED)
    if outcome == "passed":
        return TestStatus.PASSED if when == "call" else None
    if outcome == "failed":
        return TestStatus.FAILED if when == "call" else TestStatus.ERROR
    return TestStatus.SKIPPED


@dataclass
class Record:
    """What the harness saw."""

    statuses: dict[str, TestStatus] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    finish: tuple[int, int, int] | None = None  # exit status, collected, failed at the end of the session
    end: int | None = None  # the exit status once pytest unconfigured

    def failures(self) -> int:
        worst = sum(s in (TestStatus.FAILED, TestStatus.ERROR) for s in self.statuses.values())
        return worst + len(self.collect_errors)


def parse_record(raw: bytes, key: bytes) -> Record:
    """The verified record; `RecordError` names the first line at fault."""
    if not raw.endswith(b"\n"):
        raise RecordError("the record does not end with a complete line")
    record = Record()
    for seq, line in enumerate(raw[:-1].split(b"\n")):
        body, _, mac = line.rpartition(b" ")
        expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            raise RecordError(f"line {seq + 1} of the record was not written by the harness")
        data = json.loads(body)
        if data[0] != seq:
            raise RecordError(f"line {seq + 1} of the record is out of order (seq {data[0]})")
        if record.end is not None:
            raise RecordError("the record goes on after the end of the session")
        kind, *values = data[1:]
        if (seq == 0) != (kind == "start"):
            raise RecordError(f"line {seq + 1} of the record is {kind!r}")
        if kind == "report":
            node, when, outcome, xfail = values
            status = status_of(when, outcome, xfail)
            previous = record.statuses.get(node)
            if status is not None and (previous is None or SEVERITY[status] > SEVERITY[previous]):
                record.statuses[node] = status
        elif kind == "collect":
            record.collect_errors.append(values[0])
        elif kind in ("hook", "patched", "changed"):
            record.tampering.append(f"{kind} {' '.join(str(v) for v in values)}")
        elif kind == "finish":
            record.finish = (int(values[0]), int(values[1]), int(values[2]))
        elif kind == "end":
            record.end = int(values[0])
    return record


def _shown(items: list[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return "; ".join(items[:_SHOWN]) + more


def judge(raw: bytes | None, why: str, key: bytes, log: PytestLog, exit_code: int | None) -> tuple[str | None, Record]:
    """``(why the run is tampered, or None; the record)`` for a run whose log passed its own checks."""
    if raw is None:
        return (
            f"the harness's record of the run is missing ({why}): the log shows a session pytest never reported",
            Record(),
        )
    try:
        record = parse_record(raw, key)
    except (RecordError, ValueError, TypeError, IndexError, KeyError) as err:
        return f"the harness's record of the run was altered: {err}"[:500], Record()
    if record.tampering:
        return f"code in the test run interfered with pytest: {_shown(record.tampering)}"[:1500], record
    if record.end is None:
        return "the harness saw no end of the session: the process ended outside pytest (os._exit, a signal)", record
    if record.end != exit_code:
        return f"pytest ended the session with exit status {record.end} but the process exited {exit_code}", record
    if record.end == 0 and record.failures():
        return f"pytest's exit status is 0 but the harness recorded {record.failures()} failures", record
    forged = []
    for test_id, status in log.statuses.items():
        seen = record.statuses.get(test_id)
        if seen is None:
            forged.append(f"{test_id} {status.value} (pytest reported no such test)")
        elif SEVERITY[status] < SEVERITY[seen]:
            forged.append(f"{test_id} {status.value} (pytest reported {seen.value})")
    if forged:
        return f"the log shows what pytest did not report: {_shown(forged)}"[:1500], record
    return None, record
