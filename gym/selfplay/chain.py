"""A self-play chain (generation, verification, meta-verification), the acceptance rule and the verifier row.

Acceptance (`decide`): a chain is accepted when, in order,

1. the generator's turn parsed (`gym.selfplay.roles.parse_generator`);
2. the ground-truth check of its final answer (math-verify on the host, `tasks.math.grader`) gave a
   verdict: ``passed`` (right) or any other candidate verdict (wrong); an ``infra_error`` check (a gold
   the checker cannot read, a checker that cannot start) rejects the chain as ``check_infra``;
3. the verifier's turn parsed and its solution verdict equals the check's: ``VERDICT: correct`` for a
   right answer, ``VERDICT: wrong`` for a wrong one;
4. the meta-verifier's turn parsed and says ``META: agree``.

The first step that fails names the rejection (`RejectReason`). A role that is not reached is not run.

Verifier rows (`verifier_row`), one JSON object per line in the process verifier's format
``{"id", "problem", "steps", "labels", "source"}`` (1 = step correct, 0 = step wrong):

* a right final answer gives every step label 1, whatever the verifier said (``source``
  ``selfplay:right``): the check vouches for the outcome, not for each step, as in outcome-labelled
  PRM data;
* a wrong final answer gives a row only when the chain was accepted (so the verifier flagged a step
  and the meta-verifier agreed): steps before the verifier's first flagged step 1, that step and every
  later one 0 (``source`` ``selfplay:flagged``);
* any other chain gives no row (a wrong answer nobody located the error of says nothing per step).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.selfplay.roles import MetaVerdict, Role, RoleFailure, Solution, Verdict
from gym.trajectory import Trajectory
from tasks.math.problem import MathTask
from tasks.result import TaskResult

RejectReason = Literal[
    "generator_failed", "check_infra", "verifier_failed", "verifier_disagrees", "meta_failed", "meta_rejects"
]
REJECT_REASONS: tuple[str, ...] = RejectReason.__args__  # type: ignore[attr-defined]


class RoleRecord(BaseModel):
    """One role's turn: the prompt it saw, the tokens it sampled, what its parser made of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role = Field(description="Which role.")
    trajectory: Trajectory = Field(description="Token-exact prompt and completion (no tools: one sampled turn).")
    finish_reason: Literal["stop", "length"] | None = Field(description="The engine's; None when nothing was sampled.")
    output: Solution | Verdict | MetaVerdict | None = Field(description="The parsed output; None on a failure.")
    failure: RoleFailure | None = Field(description="Why the turn could not be used; None when it parsed.")
    seconds: float = Field(ge=0, description="Wall time of the engine call.")


class Decision(BaseModel):
    """Whether a chain is accepted, and if not, at which step of the rule it stopped."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accepted: bool = Field(description="Every step of the acceptance rule held.")
    reason: RejectReason | None = Field(description="The first step that failed; None when accepted.")


class Chain(BaseModel):
    """One problem through the three roles, with the ground-truth check and the decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_id: str = Field(description="'<seed>-<position>': the run seed and the problem's draw position.")
    task: MathTask = Field(description="The problem (gold included; never shown to a role).")
    position: int = Field(ge=0, description="Draw position of the problem in the environment's task stream.")
    roles: tuple[RoleRecord, ...] = Field(description="The roles that ran, in order (1 to 3).")
    grading: TaskResult | None = Field(description="The math check of the generator's answer; None if not run.")
    decision: Decision = Field(description="The acceptance rule's outcome.")

    def record(self, role: Role) -> RoleRecord | None:
        return next((r for r in self.roles if r.role == role), None)

    def output(self, role: Role) -> Solution | Verdict | MetaVerdict | None:
        record = self.record(role)
        return None if record is None else record.output


def decide(
    solution: Solution | None, grading: TaskResult | None, verdict: Verdict | None, meta: MetaVerdict | None
) -> Decision:
    """The acceptance rule (module docstring): each argument is None when its step failed or did not run."""
    if solution is None:
        return Decision(accepted=False, reason="generator_failed")
    if grading is None or grading.infra_error:
        return Decision(accepted=False, reason="check_infra")
    if verdict is None:
        return Decision(accepted=False, reason="verifier_failed")
    if verdict.correct != grading.passed:
        return Decision(accepted=False, reason="verifier_disagrees")
    if meta is None:
        return Decision(accepted=False, reason="meta_failed")
    if not meta.agree:
        return Decision(accepted=False, reason="meta_rejects")
    return Decision(accepted=True, reason=None)


def decision_of(chain: Chain) -> Decision:
    """`decide` over a chain's recorded outputs (a replay re-applies the rule with this)."""
    solution, verdict, meta = (chain.output(role) for role in ("generator", "verifier", "meta_verifier"))
    return decide(
        solution if isinstance(solution, Solution) else None,
        chain.grading,
        verdict if isinstance(verdict, Verdict) else None,
        meta if isinstance(meta, MetaVerdict) else None,
    )


def step_labels(n_steps: int, answer_right: bool, first_flagged: int | None) -> list[int] | None:
    """Per-step labels (module docstring): all 1 for a right answer; for a wrong one, 1 before the first
    flagged step and 0 from it on; None when a wrong answer has no flagged step."""
    if answer_right:
        return [1] * n_steps
    if first_flagged is None or not 0 <= first_flagged < n_steps:
        return None
    return [1] * first_flagged + [0] * (n_steps - first_flagged)


def verifier_row(chain: Chain) -> dict | None:
    """The chain's verifier training row, or None (module docstring)."""
    solution, verdict = chain.output("generator"), chain.output("verifier")
    if not isinstance(solution, Solution) or chain.grading is None or chain.grading.infra_error:
        return None
    right = chain.grading.passed
    if right:
        labels = step_labels(len(solution.steps), True, None)
    elif chain.decision.accepted and isinstance(verdict, Verdict):
        labels = step_labels(len(solution.steps), False, verdict.first_flagged)
    else:
        return None
    if labels is None:
        return None
    row = {
        "id": f"{chain.chain_id}:{chain.task.task_id}",
        "problem": chain.task.problem,
        "steps": list(solution.steps),
        "labels": labels,
        "source": "selfplay:right" if right else "selfplay:flagged",
    }
    check_row(row)
    return row


def check_row(row: dict) -> None:
    """Raise ValueError unless ``row`` is a well-formed verifier row (the format above)."""
    keys = {"id", "problem", "steps", "labels", "source"}
    if set(row) != keys:
        raise ValueError(f"a verifier row has exactly the keys {sorted(keys)}, got {sorted(row)}")
    if not all(isinstance(row[key], str) and row[key] for key in ("id", "problem", "source")):
        raise ValueError("id, problem and source are non-empty strings")
    steps, labels = row["steps"], row["labels"]
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s for s in steps):
        raise ValueError("steps is a non-empty list of non-empty strings")
    if not isinstance(labels, list) or len(labels) != len(steps):
        raise ValueError(f"labels must be a list as long as steps ({len(steps)})")
    if any(label not in (0, 1) or isinstance(label, bool) for label in labels):
        raise ValueError("every label is the integer 0 or 1")


def accepted_record(chain: Chain, bundle: str | None) -> dict:
    """The line ``accepted.jsonl`` holds for an accepted chain."""
    solution, verdict, meta = (chain.output(role) for role in ("generator", "verifier", "meta_verifier"))
    assert isinstance(solution, Solution) and isinstance(verdict, Verdict) and isinstance(meta, MetaVerdict)
    assert chain.grading is not None
    return {
        "chain_id": chain.chain_id,
        "task_id": chain.task.task_id,
        "problem": chain.task.problem,
        "gold": chain.task.gold,
        "steps": list(solution.steps),
        "answer": solution.answer,
        "answer_right": chain.grading.passed,
        "verifier": {"steps_correct": list(verdict.steps_correct), "correct": verdict.correct},
        "meta_agree": meta.agree,
        "completions": {r.role: list(r.trajectory.completion_ids) for r in chain.roles},
        "bundle": bundle,
    }


def chain_summary(chain: Chain) -> dict:
    """The line ``chains.jsonl`` holds for every chain: its stages, failures and decision."""
    return {
        "chain_id": chain.chain_id,
        "task_id": chain.task.task_id,
        "roles": {
            r.role: {"parsed": r.failure is None, **({"failure": r.failure.model_dump()} if r.failure else {})}
            for r in chain.roles
        },
        "check": None if chain.grading is None else _check_word(chain.grading),
        "accepted": chain.decision.accepted,
        "reason": chain.decision.reason,
    }


def _check_word(grading: TaskResult) -> str:
    return "infra_error" if grading.infra_error else "right" if grading.passed else "wrong"
