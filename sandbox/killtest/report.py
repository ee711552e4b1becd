"""The suite's result: per-attack rows, the posture verdict, suite-level host checks; table and JSON."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.killtest.judge import AttackResult, Check, Verdict

TABLE_WIDTHS = {"attack": 20, "group": 11, "expected": 28, "observed": 30, "verdict": 9, "evidence": 90}


class SuiteReport(BaseModel):
    """Everything one run found. ``posture`` is "ok", "skipped", or the list of drifted keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attacks: list[AttackResult]
    posture: Literal["ok", "skipped"] | list[dict[str, Any]]
    checks: list[Check] = Field(default_factory=list, description="suite-level host checks (image, leftovers)")
    seconds: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict, description="the hardening and budgets under test")

    def counts(self) -> dict[str, int]:
        found = Counter(a.verdict.value for a in self.attacks)
        return {v.value: found.get(v.value, 0) for v in Verdict}

    @property
    def escaped(self) -> list[str]:
        return [a.name for a in self.attacks if a.verdict == Verdict.ESCAPED]

    @property
    def ok(self) -> bool:
        """Exit 0 only when every attack is contained, the posture matches and every suite check passed."""
        return (
            all(a.verdict == Verdict.CONTAINED for a in self.attacks)
            and self.posture in ("ok", "skipped")
            and all(c.passed for c in self.checks)
        )

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["summary"] = {**self.counts(), "ok": self.ok, "attacks": len(self.attacks)}
        return data

    def write_json(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


def _cell(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "~"


def table(report: SuiteReport) -> str:
    """attack | group | expected | observed | verdict | evidence, then the posture and the totals."""
    columns = list(TABLE_WIDTHS)
    rows = [[a.name, a.group, a.expected, a.observed, a.verdict.value, a.evidence] for a in report.attacks]
    widths = {
        c: min(TABLE_WIDTHS[c], max([len(c)] + [len(_cell(r[i], TABLE_WIDTHS[c])) for r in rows]))
        for i, c in enumerate(columns)
    }
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines.append("  ".join("-" * widths[c] for c in columns))
    for row in rows:
        lines.append("  ".join(_cell(v, widths[c]).ljust(widths[c]) for c, v in zip(columns, row)).rstrip())
    lines.append("")
    if isinstance(report.posture, list):
        lines.append(f"posture: DRIFT in {len(report.posture)} keys")
        lines += [f"  {d['key']}: expected {d['expected']!r}, observed {d['observed']!r}" for d in report.posture]
    else:
        lines.append(f"posture: {report.posture}")
    for check in report.checks:
        lines.append(f"{check.name}: {'ok' if check.passed else 'FAILED'} ({check.detail})")
    counts = report.counts()
    lines.append(
        f"{len(report.attacks)} attacks: {counts['contained']} contained, {counts['escaped']} escaped, "
        f"{counts['error']} error in {report.seconds:.0f}s -> {'PASS' if report.ok else 'FAIL'}"
    )
    return "\n".join(lines)
