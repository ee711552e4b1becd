"""From what happened to a verdict: observations, host checks, and the rule that combines them.

Pure functions over typed records, so the rule is tested without Docker:
an attack is ``contained`` when every observation is one of its expected
ones and every host check passed; ``error`` when it could not be judged
(the sandbox itself failed, or a program could not set up its attack);
``escaped`` otherwise.
"""

from __future__ import annotations

import enum
import json

from pydantic import BaseModel, ConfigDict, Field

from sandbox.failure import FailureKind
from sandbox.killtest.attack import ERROR, Attack, Program
from sandbox.protocol import ExecResult

REPORT_PREFIX = "KILLTEST "
SWEPT = "swept"
# Past deadline + grace the host presumes the runner lost; allow this much more for the reply's transport.
# A memory bomb stalls the runner too (same cgroup, page-cache reclaim): overshoots of 2 s were measured.
DEADLINE_SLACK_S = 0.5


class Verdict(str, enum.Enum):
    CONTAINED = "contained"
    ESCAPED = "escaped"
    ERROR = "error"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Observation(_Record):
    """What one stage of an attack (a program or a tool step) came to."""

    stage: str
    observed: str
    expected: tuple[str, ...]
    evidence: str = ""

    @property
    def held(self) -> bool:
        return self.observed in self.expected


class Check(_Record):
    """One host-side check."""

    name: str
    passed: bool
    detail: str = ""


class AttackResult(_Record):
    """One row of the report."""

    name: str
    group: str
    goal: str
    expected: str
    observed: str
    verdict: Verdict
    evidence: str
    observations: list[Observation] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    seconds: float = 0.0


def parse_report(stdout: bytes) -> dict | None:
    """The last ``KILLTEST {json}`` line of a program's stdout, if any."""
    for line in reversed(stdout.decode("utf-8", errors="replace").splitlines()):
        if line.startswith(REPORT_PREFIX):
            try:
                data = json.loads(line[len(REPORT_PREFIX) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) and isinstance(data.get("observed"), str) else None
    return None


def observe(
    stage: str, program: Program, result: ExecResult, survivors: list[str], runner_lost_escapes: bool = False
) -> Observation:
    """The observation of one program run, from the source its ``observe`` names.

    A lost runner (``infra_error``) cannot be judged in an attack's first call; in a later
    call of the same workspace (``runner_lost_escapes``) it is what the attack left behind.
    """
    report = parse_report(result.stdout) or {}
    evidence = str(report.get("evidence", "")) or _tail(result)
    if result.failure == FailureKind.INFRA_ERROR:
        observed = FailureKind.INFRA_ERROR.value if runner_lost_escapes else ERROR
        return Observation(
            stage=stage, observed=observed, expected=program.expected, evidence=f"infra_error: {result.detail}"
        )
    if program.observe == "failure":
        observed = result.failure.value
        evidence = str(report.get("evidence", "")) or _outcome(result)
    elif program.observe == "processes":
        observed = SWEPT if not survivors else f"{len(survivors)} survived"
        evidence = "; ".join(survivors) or f"only init and the runner left after the call ({result.failure.value})"
    elif report:
        observed = report["observed"]
    elif result.failure not in (FailureKind.OK, FailureKind.NONZERO_EXIT):
        observed = result.failure.value  # killed (oom, deadline, ...) before it could report
    else:
        observed, evidence = ERROR, f"no report line; exit {result.exit_code}; {_tail(result)}"
    return Observation(stage=stage, observed=observed, expected=program.expected, evidence=evidence)


def _outcome(result: ExecResult) -> str:
    ended = f"signal {result.signal}" if result.signal else f"exit {result.exit_code}"
    size = len(result.stdout) + len(result.stderr)
    return f"{ended} after {result.wall_s:.2f}s, {size} bytes of output kept; {result.detail or _tail(result, 120)}"


def _tail(result: ExecResult, size: int = 200) -> str:
    text = (result.stderr or result.stdout)[-size:].decode("utf-8", errors="replace").strip()
    return " ".join(text.split()) or result.detail


def bounds(
    stage: str, program: Program, result: ExecResult, output_limit: int, host_wall_s: float, grace_s: float
) -> Check:
    """The call stayed inside its deadline (plus the host's grace) and its output bound, as seen from the host."""
    size = len(result.stdout) + len(result.stderr)
    limit_s = program.timeout_s + grace_s + DEADLINE_SLACK_S
    passed = size <= output_limit and result.wall_s <= limit_s and host_wall_s <= limit_s
    detail = f"{stage}: wall {result.wall_s:.2f}s (host {host_wall_s:.2f}s) <= {limit_s:.1f}s, output {size} <= {output_limit} B"
    return Check(name="bounds", passed=passed, detail=detail)


def canary(outputs: list[bytes], secret: str) -> Check:
    """The host's canary secret appears in no output."""
    leaked = any(secret.encode() in out for out in outputs)
    return Check(
        name="host_secret", passed=not leaked, detail="host canary secret " + ("LEAKED" if leaked else "not seen")
    )


def judge(
    attack: Attack, observations: list[Observation], checks: list[Check], seconds: float, error: str = ""
) -> AttackResult:
    """The verdict and the row of the report."""
    failed = [c for c in checks if not c.passed]
    broken = [o for o in observations if o.observed == ERROR]
    escaped = [o for o in observations if not o.held and o.observed != ERROR]
    if error or broken:
        verdict = Verdict.ERROR
    elif escaped or failed:
        verdict = Verdict.ESCAPED
    else:
        verdict = Verdict.CONTAINED
    evidence = [error] if error else []
    evidence += [f"{o.stage}: {o.evidence}" for o in broken + escaped]
    evidence += [f"{c.name} FAILED: {c.detail}" for c in failed]
    if not evidence:
        evidence = [o.evidence for o in observations if o.evidence][:2]
    return AttackResult(
        name=attack.name,
        group=attack.group,
        goal=attack.goal,
        expected=attack.expected,
        observed=summary(observations) or ERROR,
        verdict=verdict,
        evidence="; ".join(e for e in evidence if e),
        observations=observations,
        checks=checks,
        seconds=round(seconds, 2),
    )


def summary(observations: list[Observation]) -> str:
    """Observed outcomes for the table: programs one by one, tool steps folded into one count."""
    parts: list[str] = []
    tools = [o for o in observations if o.stage.startswith("tool ")]
    for o in observations:
        if o.stage.startswith("tool "):
            if o is tools[0]:
                bad = [t for t in tools if not t.held]
                parts.append(
                    f"tools {len(tools) - len(bad)}/{len(tools)} held"
                    + "".join(f" [{t.stage[5:]}: {t.observed}]" for t in bad)
                )
        else:
            parts.append(o.observed)
    return "; ".join(parts)
