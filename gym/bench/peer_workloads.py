"""The workloads of `python -m gym bench peers`, the same for every tool, in the standard library only.

The peer drivers (``peer_swerex.py``, ``peer_llm_sandbox.py``) import this module by file from their
own virtual environments, where the gym is not installed: nothing here may import the gym or a
third-party package.

* ``tiny``: the command ``true``.
* ``stdio_1mib``: 1 MiB in, the same 1 MiB out through ``cat``, checked byte for byte (after a pty's
  ``\\r\\n``). A tool whose command call takes stdin gets it there (the gym, ``docker exec -i``, the
  host); a tool without one takes it through its own file-write call, then ``cat`` of that file in its
  command call (SWE-ReX, llm-sandbox): one timed sample is both calls.
* ``file_rw``: a 64 KiB file written, then read back, through the tool's file calls.
* ``session_50``: 50 turns of one shell session, each a command whose output depends on the turns before
  it (a line appended to a file, the file's line count printed); one sample is the whole session.
"""

from __future__ import annotations

import json
import random
import statistics
import string
import sys
import time
from collections.abc import Awaitable, Callable

WORKLOADS = ("tiny", "stdio_1mib", "file_rw", "session_50")
STDIO_BYTES = 1 << 20
FILE_BYTES = 64 << 10
TURNS = 50
REPORT = "gym-bench-peer-report: "  # what starts the line of a driver's report


class WorkloadMismatch(RuntimeError):
    """A tool answered a workload with output other than the expected: the workload and what came back."""


def payload(size: int, seed: int = 0) -> str:
    """``size`` bytes of printable ASCII in 63-character lines (a pty, a JSON reply and a tar keep them as is)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    line = 63
    text = "".join("".join(rng.choices(alphabet, k=line)) + "\n" for _ in range(size // (line + 1)))
    return text + "x" * (size - len(text))  # whole lines, then a tail to make up the size


def turn_command(session: int, turn: int) -> str:
    """The shell command of turn ``turn`` (from 0) of session ``session``: it prints ``turn + 1``."""
    return f"echo {turn} >> session_{session}.log && wc -l < session_{session}.log"


def check_output(workload: str, got: str | bytes, expected: str) -> None:
    """Raise `WorkloadMismatch` unless ``got`` is ``expected`` (a pty's line ends and edge whitespace aside)."""
    text = got.decode() if isinstance(got, bytes) else got
    if text.replace("\r\n", "\n").strip() != expected.strip():
        raise WorkloadMismatch(f"{workload}: expected {len(expected)} bytes ({expected[:40]!r}...), got {text[:80]!r}")


def timed(call: Callable[[], object], n: int) -> list[float]:
    """``n`` wall-clock times of ``call()``, in milliseconds."""
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def timed_async(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    """As `timed`, for a coroutine function (under asyncio or trio alike)."""
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _rounds(spec: dict, name: str) -> tuple[int, int]:
    return spec["warmup"], spec["sessions"] if name == "session_50" else spec["iterations"]


def run_workloads(calls: dict[str, Callable[[], object]], spec: dict) -> dict:
    """``{"samples_ms": {workload: [ms]}, "errors": {workload: message}}`` of each call in ``calls``, timed
    ``spec["iterations"]`` times (``spec["sessions"]`` for session_50) after ``spec["warmup"]`` untimed rounds;
    a workload that fails is an error message and the others still run."""
    report: dict = {"samples_ms": {}, "errors": {}}
    for name, call in calls.items():
        warmup, n = _rounds(spec, name)
        try:
            timed(call, warmup)
            report["samples_ms"][name] = timed(call, n)
        except Exception as exc:  # one workload's failure is data
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
    return report


async def run_workloads_async(calls: dict[str, Callable[[], Awaitable[object]]], spec: dict) -> dict:
    """As `run_workloads`, for coroutine functions."""
    report: dict = {"samples_ms": {}, "errors": {}}
    for name, call in calls.items():
        warmup, n = _rounds(spec, name)
        try:
            await timed_async(call, warmup)
            report["samples_ms"][name] = await timed_async(call, n)
        except Exception as exc:  # one workload's failure is data
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
    return report


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def spec_from_argv() -> dict:
    """A driver's spec: the JSON object of its one argument (iterations, sessions, image, label, warmup)."""
    return json.loads(sys.argv[1])


def emit(report: dict) -> None:
    """A driver's report, as JSON on a stdout line of its own after `REPORT` (a peer may log on stdout too, even
    after the report: SWE-ReX's deployment does when it is collected)."""
    print(REPORT + json.dumps(report), flush=True)


def reported(stdout: str) -> dict | None:
    """The report a driver printed with `emit`, or None."""
    lines = [line for line in stdout.splitlines() if line.startswith(REPORT)]
    return json.loads(lines[-1][len(REPORT) :]) if lines else None
