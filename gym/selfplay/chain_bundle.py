"""Self-play chain bundles: one JSON file per sampled accepted chain, re-checked offline by `gym replay`.

A chain bundle (``"kind": "selfplay_chain"``) holds the problem (gold included), the tokenizer spec, the
role prompts and parser bounds, the math check's configuration, the chain (each role's token-exact
trajectory, finish reason, parsed output or failure; the check's verdict; the decision) and the verifier
row it gave. It is not an episode bundle (`gym.bundle.Bundle`): three roles, no workspace, no tools.
`gym replay` tells the two apart by ``kind`` (`is_chain_bundle`) and reports both alike
(`gym.replay.ReplayReport`).

`replay_chain` checks, without Docker and without the policy:

A bundle whose tokenizer cannot be loaded here is a difference, not a note: without it no role's prompt,
parsing or output can be re-derived, so an edited decision or row would otherwise replay as identical.

1. **prompts**: each role's prompt, rendered again from the bundle's prompts and the chain's own inputs
   (the problem; the verifier's user message from the re-parsed solution; the meta-verifier's from the
   re-parsed verdict), has the recorded messages and token ids;
2. **parsing**: each role's sampled ids, parsed again (Harmony, then the role's parser), give the recorded
   output or failure, and the rebuilt trajectory (ids, messages, events, failures) is the recorded one;
   a turn that parsed is token-exact (`assert_token_exact`);
3. **tool returns**: roles are offered no tools, so every trajectory has no tool call and no tool result;
4. **grading**: the generator's answer is checked again with math-verify (the recorded math config) and
   gives the recorded verdict;
5. **acceptance**: the rule (`gym.selfplay.chain.decide`) over the replayed outputs and check gives the recorded
   decision, and the verifier row is the recorded one.

The report's reward is the check's fraction (1.0 right, 0.0 wrong), recorded and replayed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym.bundle import BundleError, read_bundle_text
from gym.format.harmony import Harmony
from gym.format.tokenizer import TokenizerError, load_tokenizer
from gym.replay import Difference, ReplayReport, _short
from gym.replay import _diff as _compare  # the episode replay's difference recorder, shared
from gym.replay_limits import vet
from gym.run_dir import write_atomic
from gym.selfplay.chain import Chain, decide, verifier_row
from gym.selfplay.roles import (
    ROLES,
    MetaVerdict,
    RolePrompts,
    Solution,
    Verdict,
    parse_role,
    role_messages,
    role_user_text,
)
from gym.trajectory import TrajectoryBuilder, TrajectoryError, assert_token_exact
from tasks.math.grader import MathGrader, MathGraderConfig
from tasks.result import TaskResult

KIND = "selfplay_chain"


class ChainBundle(BaseModel):
    """One self-play chain, replayable offline (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["selfplay_chain"] = Field(KIND, description="Tells a chain bundle from an episode bundle.")
    format_version: Literal[1] = Field(1, description="Bumped when the layout changes.")
    environment: str = Field(description="Environment the problem came from.")
    tokenizer: str = Field(description="Tokenizer spec the trajectories' ids belong to.")
    prompts: RolePrompts = Field(description="Role prompts and parser bounds the chain ran with.")
    math: MathGraderConfig = Field(description="Bounds of the math check.")
    chain: Chain = Field(description="The roles, the check and the decision.")
    row: dict | None = Field(description="The verifier row the chain gave (gym.selfplay.chain.verifier_row), or None.")


def write_chain_bundle(path: Path, bundle: ChainBundle) -> Path:
    return write_atomic(path, bundle.model_dump_json(indent=1))


def is_chain_bundle(path: Path) -> bool:
    """Whether ``path`` holds a JSON object of kind ``selfplay_chain`` (anything unreadable, too large or nested
    too deeply: False, so the episode-bundle reader reports it in one line)."""
    try:
        data = json.loads(read_bundle_text(path))
    except (BundleError, ValueError, RecursionError):  # ValueError: bad JSON, and integers past 4,300 digits
        return False
    return isinstance(data, dict) and data.get("kind") == KIND


def read_chain_bundle(path: Path) -> ChainBundle:
    """A chain bundle file, validated (``BundleError`` names the first wrong field); what it may ask of this
    machine is checked apart, by ``gym.replay_limits.vet`` (``replay_chain_files``)."""
    try:
        return ChainBundle.model_validate_json(read_bundle_text(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        why = " ".join(first["msg"].split())[:200]
        raise BundleError(f"{path}: not a chain bundle: {where}: {why} ({exc.error_count()} errors)") from None


def _check_key(grading: TaskResult | None) -> object:
    if grading is None:
        return None
    return grading.passed, grading.infra_error, tuple(str(t.verdict) for t in grading.tests)


def _fraction(grading: TaskResult | None) -> float | None:
    return None if grading is None or grading.infra_error else grading.fraction


def replay_roles(bundle: ChainBundle, harmony: Harmony, out: list[Difference], notes: list[str]) -> list:
    """Checks 1-3 of the module docstring; returns the replayed outputs (None where a role failed)."""
    chain, prompts = bundle.chain, bundle.prompts
    _compare(out, "role order", [r.role for r in chain.roles], list(ROLES[: len(chain.roles)]))
    solution: Solution | None = None
    verdict: Verdict | None = None
    outputs: list = []
    for record in chain.roles:
        role, recorded = record.role, record.trajectory
        try:
            user = role_user_text(role, chain.task.problem, solution, verdict)
        except ValueError as exc:  # a role recorded after one whose output did not replay
            out.append(Difference(what=f"{role} prompt", recorded="rendered", replayed=str(exc)))
            outputs.append(None)
            continue
        messages = role_messages(prompts, role, user)
        builder = TrajectoryBuilder.from_messages(harmony, messages, task_id=recorded.task_id, seeds=recorded.seeds)
        _compare(out, f"{role} prompt messages", list(recorded.messages[: len(messages)]), messages)
        _compare(out, f"{role} prompt ids", list(recorded.prompt_ids), builder.context())
        completion = list(recorded.completion_ids)
        if record.failure is not None and record.failure.kind == "context_full":
            _compare(out, f"{role} sampled ids", completion, [])
            replayed = record.failure
        else:
            sampled = [lp for lp in recorded.logprobs[len(recorded.prompt_ids) :] if lp is not None]
            turn = builder.add_sampled(completion, sampled) if len(sampled) == len(completion) else None
            if turn is None:
                out.append(Difference(what=f"{role} logprobs", recorded="one per sampled id", replayed="misaligned"))
                outputs.append(None)
                continue
            replayed = parse_role(role, turn, prompts, solution)
            rebuilt = builder.build()
            for name in ("ids", "sampled", "messages", "events", "failures"):
                _compare(out, f"{role} trajectory {name}", getattr(recorded, name), getattr(rebuilt, name))
        output = replayed if isinstance(replayed, Solution | Verdict | MetaVerdict) else None
        _compare(out, f"{role} parsed output", record.output, output)
        _compare(out, f"{role} failure", record.failure, None if output is not None else replayed)
        calls = [e.kind for e in recorded.events if e.kind in ("call", "result")]
        _compare(out, f"{role} tool calls and results", [], calls)
        if record.failure is None and output is not None:
            try:
                assert_token_exact(recorded, recorded.messages, harmony.tokenizer)
            except TrajectoryError as exc:
                out.append(Difference(what=f"{role} token exactness", recorded="exact", replayed=_short(str(exc))))
        solution = output if isinstance(output, Solution) else solution
        verdict = output if isinstance(output, Verdict) else verdict
        outputs.append(output)
    return outputs


async def replay_chain(bundle: ChainBundle, *, path: str = "", grader: MathGrader | None = None) -> ReplayReport:
    """Every check of the module docstring, as differences (empty: identical); ``grader``: the math check
    (default: a `MathGrader` with the bundle's configuration)."""
    grader = grader or MathGrader(bundle.math)
    out: list[Difference] = []
    notes: list[str] = []
    chain = bundle.chain
    outputs: list = []
    try:
        harmony = Harmony(load_tokenizer(bundle.tokenizer))
    except TokenizerError as exc:  # nothing of the roles can be re-derived: an edited chain must not pass unseen
        out.append(Difference(what="tokenizer", recorded=bundle.tokenizer, replayed=_short(f"cannot load: {exc}")))
    else:
        fingerprints = {r.trajectory.tokenizer for r in chain.roles}
        _compare(out, "tokenizer fingerprint", fingerprints, {harmony.tokenizer.fingerprint})
        outputs = replay_roles(bundle, harmony, out, notes)
    if not outputs:  # the tokenizer is missing: the rule and the row are still re-applied to what was recorded
        outputs = [chain.output(role) for role in ROLES[: len(chain.roles)]]
    replayed = {role: output for role, output in zip(ROLES, outputs)}
    solution = replayed.get("generator")
    grading = await grader.grade(chain.task, solution.answer) if isinstance(solution, Solution) else None
    _compare(out, "math check (passed, infra_error, verdicts)", _check_key(chain.grading), _check_key(grading))
    verdict, meta = replayed.get("verifier"), replayed.get("meta_verifier")
    decision = decide(
        solution if isinstance(solution, Solution) else None,
        grading,
        verdict if isinstance(verdict, Verdict) else None,
        meta if isinstance(meta, MetaVerdict) else None,
    )
    _compare(out, "decision", chain.decision, decision)
    again = chain.model_copy(update={"grading": grading, "decision": decision})
    _compare(out, "verifier row", bundle.row, verifier_row(again))
    return ReplayReport(
        bundle=path,
        task_id=chain.task.task_id,
        tool_calls=0,
        reward_recorded=_fraction(chain.grading),
        reward_replayed=_fraction(grading),
        differences=tuple(out),
        notes=tuple(notes),
    )


def replay_chain_files(paths: Sequence[Path]) -> list[ReplayReport]:
    """Replay chain bundle files one after another (each check is a child process at most). Each is read and
    vetted first, as episode bundles are (``gym.replay_limits.vet``: the math check runs on this host, so its
    bounds are never looser than the defaults): the first refused one is a ``BundleError`` and nothing runs."""
    bundles = [vet(read_chain_bundle(path), path)[0] for path in paths]

    async def main() -> list[ReplayReport]:
        return [await replay_chain(bundle, path=str(path)) for path, bundle in zip(paths, bundles)]

    return trio.run(main)
