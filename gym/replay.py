"""Replaying a bundle: re-execute its tool calls in a fresh workspace, regrade, report every difference.

Three kinds of check, all reported as ``Difference`` data:

1. consistency of the bundle itself: its tool calls and results are the ones
   in the trajectory's messages and events, its answer is the submitted
   program (or the final answer's code), its reward is what the rubric gives
   for its grading, and the trajectory's ids are the canonical rendering of its
   messages in the trajectory's chat format (``assert_token_exact``, when every
   turn parsed and the tokenizer, and a model family's chat template, are
   available);
2. the workspace image digest is the one recorded;
3. re-execution: each tool call, run in order in a fresh workspace with the
   recorded sandbox and tool configuration, gives the recorded observation and
   failure kind; the answer is graded again in another fresh container with
   the recorded grader configuration and gives the same verdict per test and
   the same reward.

Timings (wall time of tests and calls) are never compared. An outcome that depends on
timing (a tool call that timed out on one side only, a test judged ``time_limit`` on one
side only) is reported in ``ReplayReport.timing``, with every difference that follows it in
the episode (a call that timed out leaves the workspace in another state), never as a
difference of the environment. A field cut when the bundle was written (``Bundle.cuts``,
gym/bundle.py) is compared by its size and sha256; such a bundle is reported as truncated,
never as identical. A bundle that cannot be replayed here (its image is not on this engine,
its pool does not open) is reported as ``failed`` with the reason; the others replay.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from gym.bundle import Bundle, BundleError, image_digest, read_bundle, recorded_call
from gym.format.chat_format import ChatFormatError, load_chat_format
from gym.format.tokenizer import TokenizerError, load_tokenizer
from gym.replay_limits import vet
from gym.rubric import score, total
from gym.tools import Toolbox, printable
from gym.trajectory import TrajectoryError, assert_token_exact
from sandbox.errors import InfraError, SandboxError
from sandbox.failure import FailureKind, Verdict
from sandbox.fleet import FleetPool, open_pool
from sandbox.pool import WorkspacePool
from tasks.families import kind_of
from tasks.family import FamilyResources, TaskFamily
from tasks.grader import Grader
from tasks.result import TaskResult

log = logging.getLogger(__name__)


class Difference(BaseModel):
    """One thing that did not come out as recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    what: str = Field(description="Which check, e.g. 'tool call 2 output'.")
    recorded: str = Field(description="What the bundle says (shortened).")
    replayed: str = Field(description="What the check found (shortened).")


class ReplayReport(BaseModel):
    """The outcome of replaying one bundle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle: str = Field(description="Bundle path.")
    task_id: str = Field(description="The task.")
    tool_calls: int = Field(description="Tool calls re-executed.")
    reward_recorded: float | None = Field(description="Reward in the bundle.")
    reward_replayed: float | None = Field(description="Reward of the replayed grading.")
    differences: tuple[Difference, ...] = Field(description="Everything that differed; empty when identical.")
    notes: tuple[str, ...] = Field((), description="Checks that could not run, and why.")
    truncated: tuple[str, ...] = Field(
        (), description="Fields cut when the bundle was written (compared by sha256): it never replays identically."
    )
    timing: tuple[Difference, ...] = Field(
        (),
        description="Outcomes that depend on timing (a call or test timed out on one side only) and every "
        "difference after the first of them: not differences of the environment, never identical either.",
    )
    failed: str = Field("", description="Why the bundle could not be replayed here ('' when it was).")

    @property
    def identical(self) -> bool:
        return not self.differences and not self.truncated and not self.timing and not self.failed


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _diff(out: list[Difference], what: str, recorded: object, replayed: object) -> None:
    if recorded != replayed:
        out.append(Difference(what=what, recorded=_short(recorded), replayed=_short(replayed)))


def _timing_only(recorded: TaskResult | None, replayed: TaskResult | None) -> bool:
    """Whether two gradings differ only in tests judged ``time_limit`` on one side (and what follows from them)."""
    if recorded is None or replayed is None or len(recorded.tests) != len(replayed.tests):
        return False
    pairs = [(a.verdict, b.verdict) for a, b in zip(recorded.tests, replayed.tests) if a.verdict != b.verdict]
    return bool(pairs) and all(Verdict.TIME_LIMIT in pair for pair in pairs)


def _grading_key(result: TaskResult | None) -> object:
    if result is None:
        return None
    return (result.passed, round(result.fraction, 9), result.infra_error, tuple(t.verdict for t in result.tests))


def _reward(bundle: Bundle, grading: TaskResult | None) -> float | None:
    if bundle.trajectory.masked:
        return None
    breakdown = score(
        bundle.rubric, bundle.trajectory, grading, turns=bundle.turns, token_budget=bundle.episode.max_total_tokens
    )
    return total(breakdown)


def consistency(bundle: Bundle) -> tuple[list[Difference], list[str]]:
    """Checks of the bundle against itself (no sandbox needed)."""
    out: list[Difference] = []
    notes: list[str] = []
    trajectory, kind = bundle.trajectory, kind_of(bundle.task)
    _diff(out, "task id", bundle.task.task_id, trajectory.task_id)
    calls = [m for m in trajectory.messages if m.is_tool_call]
    results = [m for m in trajectory.messages if m.role == "tool"]
    result_events = [e for e in trajectory.events if e.kind == "result"]
    _diff(out, "number of tool calls", len(bundle.tool_calls), len(calls))
    for record, message in zip(bundle.tool_calls, calls):
        _diff(
            out,
            f"tool call {record.index} in the trajectory",
            (record.recipient, record.arguments),
            (message.recipient, message.content),
        )
    observed = [r for r in bundle.tool_calls if r.outcome.submitted is None]
    _diff(out, "number of tool results", len(observed), len(results))
    for record, message, event in zip(observed, results, result_events):
        field = f"tool_calls.{record.index}.outcome.output"
        _diff(
            out,
            f"tool call {record.index} result in the trajectory",
            *bundle.comparable(field, record.outcome.output, message.content),
        )
        _diff(out, f"tool call {record.index} failure in the trajectory", record.outcome.failure, event.failure)
    if bundle.answer_source == "final":
        finals = [m for m in trajectory.messages if m.is_final]
        final = finals[-1].content if finals else None
        if final is not None:  # CP: its code block; math: the whole message
            final = kind.final_answer(bundle.task, final)
        _diff(out, "answer (final channel)", *bundle.comparable("answer", bundle.answer, final))
    elif bundle.answer_source == "submit" and kind.answer != "repository":  # SWE: the answer is the diff
        submitted = [r for r in bundle.tool_calls if r.outcome.submitted is not None]
        last = submitted[-1] if submitted else None
        _diff(
            out,
            "answer (submitted)",
            *bundle.comparable(
                "answer",
                bundle.answer,
                None if last is None else last.outcome.submitted,
                None if last is None else f"tool_calls.{last.index}.outcome.submitted",
            ),
        )
    _diff(out, "reward for the recorded grading", trajectory.reward, _reward(bundle, bundle.grading))
    if any(e.kind == "parse_error" for e in trajectory.events):
        notes.append("token exactness not checked: the trajectory holds turns that did not parse")
        return out, notes
    try:
        tokenizer = load_tokenizer(bundle.tokenizer)
        # the trajectory's own chat format (a family's reads its template from the tokenizer's directory again)
        chat_format = load_chat_format(trajectory.chat_format, tokenizer, bundle.tokenizer)
        tools = Toolbox(bundle.tools, kind=kind.answer).specs()
        assert_token_exact(trajectory, trajectory.messages, tokenizer, chat_format.bind(tools))
    except (TokenizerError, ChatFormatError) as exc:
        notes.append(f"token exactness not checked: {exc}")
    except TrajectoryError as exc:
        out.append(Difference(what="token exactness", recorded="ids render the messages", replayed=_short(str(exc))))
    return out, notes


async def replay(bundle: Bundle, family: TaskFamily, *, path: str = "") -> ReplayReport:
    """Re-execute one bundle through its task family and report every difference (see the module docstring)."""
    differences, notes = consistency(bundle)
    task = bundle.task
    try:
        digest = await image_digest(family.pool_for(task))
    except InfraError as exc:
        digest = ""
        notes.append(f"no workspace image: {exc}")
    if bundle.image_digest and digest:
        _diff(differences, f"image digest of {bundle.image}", bundle.image_digest, digest)
    else:
        notes.append("image digest not compared (unknown on one side)")
    toolbox = Toolbox(bundle.tools, kind=family.kind.answer)  # the tools the episode was offered
    submitted: str | None = None
    timing: list[Difference] = []
    sink = differences  # from the first outcome that depends on timing on, every difference goes to ``timing``
    async with family.workspace(task, owner=f"replay:{task.task_id}") as ws:
        for record in bundle.tool_calls:
            outcome = await toolbox.call(ws, recorded_call(record))  # vetted when read
            if record.outcome.failure != outcome.failure and (
                FailureKind.TIMEOUT in (record.outcome.failure, outcome.failure)
            ):
                sink = timing
            _diff(
                sink,
                f"tool call {record.index} ({record.recipient}) output",
                *bundle.comparable(f"tool_calls.{record.index}.outcome.output", record.outcome.output, outcome.output),
            )
            _diff(
                sink,
                f"tool call {record.index} ({record.recipient}) failure",
                record.outcome.failure,
                outcome.failure,
            )
            _diff(
                sink,
                f"tool call {record.index} ({record.recipient}) submitted program",
                *bundle.comparable(
                    f"tool_calls.{record.index}.outcome.submitted", record.outcome.submitted, outcome.submitted
                ),
            )
            submitted = outcome.submitted if outcome.submitted is not None else submitted
        handed_in = submitted if bundle.answer_source == "submit" else bundle.answer
        answer = None
        if handed_in is not None:
            try:  # SWE: the diff of the replayed repository, recomputed
                answer = await family.answer(task, ws, handed_in)
            except ValueError as exc:
                notes.append(f"no answer to grade: {exc}")
    _diff(
        sink,
        "answer",
        *bundle.comparable("answer", bundle.answer, None if answer is None else printable(answer)),
    )
    grading = None
    if answer is not None and bundle.grading is not None:
        grading = await family.grade(task, answer)
    if _timing_only(bundle.grading, grading):
        sink = timing
    _diff(
        sink,
        "grading (passed, fraction, infra_error, verdicts)",
        _grading_key(bundle.grading),
        _grading_key(grading),
    )
    reward = _reward(bundle, grading)
    _diff(sink, "reward", bundle.trajectory.reward, reward)
    return ReplayReport(
        bundle=path,
        task_id=bundle.task.task_id,
        tool_calls=len(bundle.tool_calls),
        reward_recorded=bundle.trajectory.reward,
        reward_replayed=reward,
        differences=tuple(differences),
        notes=tuple(notes),
        truncated=tuple(f"{cut.field} ({cut.bytes} bytes, sha256 {cut.sha256[:16]})" for cut in bundle.cuts),
        timing=tuple(timing),
    )


def read_for_replay(paths: Sequence[Path], *, trust: bool = False) -> list[tuple[Bundle, tuple[str, ...]]]:
    """Every bundle read and vetted (``gym.replay_limits.vet``) before any is replayed: each as it may run here,
    with its notes. A bundle that is malformed or asks for more than the limits is a ``BundleError`` of one line;
    when several are, each is logged in its line and the error names the first and counts them. Nothing has
    started then."""
    vetted: list[tuple[Bundle, tuple[str, ...]]] = []
    refused: list[BundleError] = []
    for path in paths:
        try:
            vetted.append(vet(read_bundle(path), path, trust=trust))
        except BundleError as exc:
            refused.append(exc)
    if len(refused) > 1:
        for exc in refused:
            log.error("%s", exc)
        raise BundleError(f"{refused[0]} ({len(refused)} bundles refused, each logged above)")
    if refused:
        raise refused[0]
    return vetted


def replay_files(paths: Sequence[Path], concurrency: int = 4, *, trust_sandbox: bool = False) -> list[ReplayReport]:
    """Replay bundle files (a pool per distinct sandbox configuration); reports in input order.

    Every bundle is vetted first (``read_for_replay``): the engine is this machine's, never the bundle's, and a
    bundle asking for more than the hardened limits is refused (``BundleError``); ``trust_sandbox``
    (``gym replay --trust-bundle-sandbox``) lets its sandbox-side fields through, never its host-side ones.
    """
    vetted = read_for_replay(paths, trust=trust_sandbox)
    bundles = [bundle for bundle, _ in vetted]
    groups: dict[str, list[int]] = {}
    for i, bundle in enumerate(bundles):
        groups.setdefault(bundle.sandbox.model_dump_json(), []).append(i)
    reports: list[ReplayReport | None] = [None] * len(bundles)
    limiter = trio.CapacityLimiter(concurrency)

    def failed(i: int, exc: BaseException) -> ReplayReport:
        bundle = bundles[i]
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:600]
        log.error("cannot replay %s: %s", paths[i], why)
        return ReplayReport(
            bundle=str(paths[i]),
            task_id=bundle.task.task_id,
            tool_calls=0,
            reward_recorded=bundle.trajectory.reward,
            reward_replayed=None,
            differences=(),
            notes=vetted[i][1],
            failed=why,
        )

    async def one(pool: WorkspacePool | FleetPool, i: int) -> None:
        async with limiter:
            bundle = bundles[i]
            task = bundle.task
            try:  # the family as the bundle recorded it (SWE: the instance's own image, built when the episode ran)
                kind = kind_of(task)
                resources = FamilyResources(pool, Grader(pool, bundle.grader), bundle.sandbox, kind.settings_of(bundle))
                family = kind.replay_family(task, resources, bundle.image)
                async with family.opened():
                    report = await replay(bundle, family, path=str(paths[i]))
            except (SandboxError, OSError) as exc:  # this bundle cannot be replayed here: said, the others go on
                reports[i] = failed(i, exc)
                return
            reports[i] = done = report.model_copy(update={"notes": vetted[i][1] + report.notes})
            verdict = (
                "identical"
                if done.identical
                else "DIFFERENT"
                if done.differences
                else "TIMING-DEPENDENT"
                if done.timing
                else "TRUNCATED"
            )
            log.info("replayed %s: %s", paths[i], verdict)

    async def main() -> None:
        for indices in groups.values():
            sandbox = bundles[indices[0]].sandbox
            config = sandbox.model_copy(
                update={"pool": sandbox.pool.model_copy(update={"size": min(sandbox.pool.size, concurrency)})}
            )
            try:
                async with open_pool(config) as pool, trio.open_nursery() as nursery:
                    for i in indices:
                        nursery.start_soon(one, pool, i)
            except (SandboxError, OSError) as exc:  # the group's pool did not open here (its image missing)
                for i in indices:
                    reports[i] = reports[i] or failed(i, exc)

    trio.run(main)
    return [r for r in reports if r is not None]
