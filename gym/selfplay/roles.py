"""The three self-play roles as Harmony tasks: their prompts and their strict output parsers.

One policy plays all three (`gym.selfplay.run`); each role is one sampled turn after a system, a developer
(the role's instructions) and a user message, with no tools offered. What each role must write:

* **generator** (user message: the problem as written): its solution steps on the ``analysis``
  channel, one step per line (blank lines are ignored), then the final answer alone on the ``final``
  channel. Steps: the non-empty lines of the turn's analysis messages; at most ``max_steps``, each at
  most ``max_step_chars`` characters.
* **verifier** (user message: ``Problem:``, the numbered ``Solution steps:`` and the ``Final answer:``):
  on the ``final`` channel exactly one line per step, in order, ``STEP i: correct`` or
  ``STEP i: wrong`` for i = 1..n, then one last line ``VERDICT: correct`` or ``VERDICT: wrong``.
  The verdict must agree with the steps: ``correct`` when no step is wrong, ``wrong`` when one is.
* **meta_verifier** (user message: the verifier's user message plus ``Assessment:``, the verifier's
  lines as `verdict_text` writes them): on the ``final`` channel exactly ``META: agree`` (the
  assessment is right) or ``META: disagree``.

Lines are compared after stripping surrounding white space; keywords are exact (upper-case ``STEP``,
``VERDICT``, ``META``; lower-case ``correct``, ``wrong``, ``agree``, ``disagree``). Anything else is a
`RoleFailure` with one of `FAILURE_KINDS`, never an exception: the parsers take whatever the
Harmony parser returned, a hostile completion included.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.format.harmony import ParsedTurn, ParseError
from gym.format.message import Message
from gym.format.prompt import SystemPrompt, developer_message, system_message

Role = Literal["generator", "verifier", "meta_verifier"]
ROLES: tuple[Role, ...] = ("generator", "verifier", "meta_verifier")

FailureKindName = Literal[
    "parse_error",  # not a valid Harmony turn (gym.format.harmony), a truncated one included
    "context_full",  # the role's prompt leaves no room to sample in the context
    "tool_call",  # the turn calls a tool: roles are offered none
    "no_final",  # the turn has no final-channel message
    "too_long",  # the final message, a step, or the number of steps is over its bound
    "no_steps",  # generator: no non-empty analysis line
    "no_answer",  # generator: an empty final answer
    "bad_line",  # verifier/meta: a line that is none of the allowed forms
    "step_count",  # verifier: step lines missing, extra or out of order
    "no_verdict",  # verifier: no VERDICT line last / meta: no META line
    "several_verdicts",  # more than one VERDICT (verifier) or META (meta) line
    "inconsistent",  # verifier: VERDICT correct with a wrong step, or wrong with none
]
FAILURE_KINDS: tuple[str, ...] = FailureKindName.__args__  # type: ignore[attr-defined]

DEFAULT_IDENTITY = "You are a careful mathematician."
GENERATOR_INSTRUCTIONS = (
    "Solve the math problem step by step. On the analysis channel write your solution steps, one step per "
    "line. Then write only the final answer (a number or a mathematical expression) on the final channel."
)
VERIFIER_INSTRUCTIONS = (
    "Check the solution. On the final channel write one line per solution step, in order: 'STEP i: correct' "
    "or 'STEP i: wrong'. Then write one last line: 'VERDICT: correct' when every step is correct, else "
    "'VERDICT: wrong'. Write nothing else on the final channel."
)
META_INSTRUCTIONS = (
    "Decide whether the assessment of the solution is right. On the final channel write exactly "
    "'META: agree' when it is right, or 'META: disagree' when it is not."
)

_STEP = re.compile(r"STEP (\d{1,4}): (correct|wrong)")
_VERDICT = re.compile(r"VERDICT: (correct|wrong)")
_META = re.compile(r"META: (agree|disagree)")


class RolePrompts(BaseModel):
    """The role prompts and the bounds their parsers enforce."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_identity: str = Field(DEFAULT_IDENTITY, description="First line of every role's system message.")
    reasoning: Literal["low", "medium", "high"] = Field("low", description="Reasoning effort line.")
    generator: str = Field(GENERATOR_INSTRUCTIONS, description="Developer instructions of the generator.")
    verifier: str = Field(VERIFIER_INSTRUCTIONS, description="Developer instructions of the verifier.")
    meta_verifier: str = Field(META_INSTRUCTIONS, description="Developer instructions of the meta-verifier.")
    max_steps: int = Field(32, ge=1, le=1000, description="Most solution steps a generator may write.")
    max_step_chars: int = Field(400, ge=1, description="Longest solution step, in characters.")
    max_final_chars: int = Field(4000, ge=1, description="Longest final message of any role, in characters.")


class Solution(BaseModel):
    """What a generator wrote: its steps and its final answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[str, ...] = Field(min_length=1, description="Solution steps, one line each, in order.")
    answer: str = Field(min_length=1, description="The final-channel answer (stripped).")


class Verdict(BaseModel):
    """What a verifier wrote: a label per step and the solution's verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps_correct: tuple[bool, ...] = Field(description="True for 'STEP i: correct', per step in order.")
    correct: bool = Field(description="True for 'VERDICT: correct'.")

    @property
    def first_flagged(self) -> int | None:
        """Index (0-based) of the first step marked wrong; None when none is."""
        return next((i for i, ok in enumerate(self.steps_correct) if not ok), None)


class MetaVerdict(BaseModel):
    """What a meta-verifier wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agree: bool = Field(description="True for 'META: agree'.")


class RoleFailure(BaseModel):
    """Why a role's turn could not be used: a classified failure, counted, never raised."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FailureKindName = Field(description="The failure class (module docstring).")
    detail: str = Field("", description="What was wrong, shortened.")


def _fail(kind: FailureKindName, detail: str = "") -> RoleFailure:
    return RoleFailure(kind=kind, detail=detail[:300])


# -- prompts ----------------------------------------------------------------


def role_messages(prompts: RolePrompts, role: Role, user: str) -> list[Message]:
    """System, developer (the role's instructions, no tools) and user messages of one role turn."""
    system = system_message(
        SystemPrompt(model_identity=prompts.model_identity, reasoning=prompts.reasoning), has_tools=False
    )
    return [system, developer_message(getattr(prompts, role)), Message.user(user)]


def solution_text(problem: str, solution: Solution) -> str:
    """The verifier's user message: the problem, the numbered steps and the final answer."""
    steps = "\n".join(f"{i}. {step}" for i, step in enumerate(solution.steps, 1))
    return f"Problem:\n{problem}\n\nSolution steps:\n{steps}\n\nFinal answer: {solution.answer}"


def verdict_text(verdict: Verdict) -> str:
    """A verdict as the verifier's format writes it (the meta-verifier reads this, never the raw turn)."""
    lines = [f"STEP {i}: {'correct' if ok else 'wrong'}" for i, ok in enumerate(verdict.steps_correct, 1)]
    return "\n".join([*lines, f"VERDICT: {'correct' if verdict.correct else 'wrong'}"])


def assessment_text(problem: str, solution: Solution, verdict: Verdict) -> str:
    """The meta-verifier's user message: the verifier's, then the assessment under review."""
    return f"{solution_text(problem, solution)}\n\nAssessment:\n{verdict_text(verdict)}"


def role_user_text(role: Role, problem: str, solution: Solution | None, verdict: Verdict | None) -> str:
    """The user message of ``role`` for a chain's inputs so far."""
    if role == "generator":
        return problem
    if solution is None:
        raise ValueError(f"the {role} needs the generator's solution")
    if role == "verifier":
        return solution_text(problem, solution)
    if verdict is None:
        raise ValueError("the meta_verifier needs the verifier's verdict")
    return assessment_text(problem, solution, verdict)


# -- parsers ----------------------------------------------------------------


def _final(turn: ParsedTurn | ParseError, prompts: RolePrompts) -> str | RoleFailure:
    """The final-channel text of a role's turn, or why there is none."""
    if isinstance(turn, ParseError):
        return _fail("parse_error", turn.reason)
    if turn.tool_call is not None:
        return _fail("tool_call", f"called {turn.tool_call.recipient}; roles are offered no tools")
    final = turn.final
    if final is None:
        return _fail("no_final", f"the turn ends with a {turn.messages[-1].channel or 'channel-less'} message")
    if len(final) > prompts.max_final_chars:
        return _fail("too_long", f"final message of {len(final)} characters (at most {prompts.max_final_chars})")
    return final


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _final_lines(
    turn: ParsedTurn | ParseError, prompts: RolePrompts, keyword: re.Pattern[str], name: str
) -> tuple[list[str], list[str]] | RoleFailure:
    """The final message's non-empty lines and those that are ``keyword`` lines; more than one is a failure."""
    final = _final(turn, prompts)
    if isinstance(final, RoleFailure):
        return final
    lines = _lines(final)
    matching = [line for line in lines if keyword.fullmatch(line)]
    if len(matching) > 1:
        return _fail("several_verdicts", f"{len(matching)} {name} lines")
    return lines, matching


def parse_generator(turn: ParsedTurn | ParseError, prompts: RolePrompts) -> Solution | RoleFailure:
    """The generator's steps and answer (module docstring), or the failure."""
    final = _final(turn, prompts)
    if isinstance(final, RoleFailure):
        return final
    assert isinstance(turn, ParsedTurn)
    steps = [line for m in turn.messages if m.channel == "analysis" for line in _lines(m.content)]
    if not steps:
        return _fail("no_steps", "no non-empty line on the analysis channel")
    if len(steps) > prompts.max_steps:
        return _fail("too_long", f"{len(steps)} steps (at most {prompts.max_steps})")
    longest = max(steps, key=len)
    if len(longest) > prompts.max_step_chars:
        return _fail("too_long", f"a step of {len(longest)} characters (at most {prompts.max_step_chars})")
    answer = final.strip()
    if not answer:
        return _fail("no_answer", "the final message is empty")
    return Solution(steps=tuple(steps), answer=answer)


def parse_verifier(turn: ParsedTurn | ParseError, n_steps: int, prompts: RolePrompts) -> Verdict | RoleFailure:
    """The verifier's labels for a solution of ``n_steps`` steps (module docstring), or the failure."""
    found = _final_lines(turn, prompts, _VERDICT, "VERDICT")
    if isinstance(found, RoleFailure):
        return found
    lines, verdicts = found
    if not verdicts or not _VERDICT.fullmatch(lines[-1]):
        return _fail("no_verdict", "the last line is not 'VERDICT: correct' or 'VERDICT: wrong'")
    labels: list[bool] = []
    for line in lines[:-1]:
        step = _STEP.fullmatch(line)
        if step is None:
            return _fail("bad_line", f"not a STEP line: {line[:80]!r}")
        if int(step.group(1)) != len(labels) + 1:
            return _fail("step_count", f"expected STEP {len(labels) + 1}, got {line[:40]!r}")
        labels.append(step.group(2) == "correct")
    if len(labels) != n_steps:
        return _fail("step_count", f"{len(labels)} STEP lines for {n_steps} steps")
    correct = _VERDICT.fullmatch(lines[-1]).group(1) == "correct"  # type: ignore[union-attr]
    if correct != all(labels):
        return _fail("inconsistent", f"VERDICT {'correct' if correct else 'wrong'} with steps {labels}")
    return Verdict(steps_correct=tuple(labels), correct=correct)


def parse_meta(turn: ParsedTurn | ParseError, prompts: RolePrompts) -> MetaVerdict | RoleFailure:
    """The meta-verifier's decision (module docstring), or the failure."""
    found = _final_lines(turn, prompts, _META, "META")
    if isinstance(found, RoleFailure):
        return found
    lines, metas = found
    if not lines:
        return _fail("no_verdict", "the final message is empty")
    if len(lines) > 1 or not metas:
        bad = next((line for line in lines if not _META.fullmatch(line)), lines[0])
        return _fail("bad_line", f"not 'META: agree' or 'META: disagree': {bad[:80]!r}")
    return MetaVerdict(agree=_META.fullmatch(metas[0]).group(1) == "agree")  # type: ignore[union-attr]


def parse_role(
    role: Role, turn: ParsedTurn | ParseError, prompts: RolePrompts, solution: Solution | None = None
) -> Solution | Verdict | MetaVerdict | RoleFailure:
    """Dispatch to the role's parser (the verifier needs the solution it judged, for its step count)."""
    if role == "generator":
        return parse_generator(turn, prompts)
    if role == "verifier":
        if solution is None:
            raise ValueError("the verifier's parse needs the solution it judged")
        return parse_verifier(turn, len(solution.steps), prompts)
    return parse_meta(turn, prompts)


def completion_messages(turn: ParsedTurn | ParseError) -> Sequence[Message]:
    """The messages a turn adds to the conversation (none for a parse error)."""
    return () if isinstance(turn, ParseError) else turn.messages
