"""Self-play: one policy generates a solution, verifies it and meta-verifies the verification; accepted chains
become verifier training rows and (a sampled share) replay bundles.

The loop, per problem drawn from a math environment's task stream (`gym.task_stream.TaskStream`)::

    generator turn ──Solution──▶ math check (math-verify on the host) ──▶ verifier turn ──Verdict──▶
    meta-verifier turn ──MetaVerdict──▶ decide (gym.selfplay.chain) ──▶ chains / accepted / verifier_rows / bundle

Each role is one sampled turn of the same engine (`gym.selfplay.roles`: prompts and strict parsers); a role whose
turn does not parse stops the chain there (a classified failure, counted). An engine that fails
(`EngineError`: an unreachable server) drops the chain as ``engine_error``, never as a role failure.
Problems run one at a time: the default policy runs on the CPU, where chains in parallel only share
the cores.

Output directory (`SelfplayOutput`), every line appended, flushed and fsynced as its chain ends, so an
interrupted run leaves whole lines: ``chains.jsonl`` (every chain: stages, failures, decision),
``accepted.jsonl`` (accepted chains), ``verifier_rows.jsonl`` (`gym.selfplay.chain.verifier_row`),
``bundles/*.json`` (`gym.selfplay.chain_bundle`, for the ``replay_rate`` share of accepted chains) and
``summary.json`` (`Tally`; rewritten atomically after every chain and at the end).

Policy specs (``policy`` in the config, or ``--policy``): ``local:SERVE_YAML`` builds that serve config's
policy in this process (default ``local:configs/policy_tiny.yaml``, the tiny RDEP MoE policy, random
init, CPU); ``http://HOST:PORT`` and ``checkpoint:DIR`` as `gym rollout --policy` takes them;
``scripted:selfplay``, ``scripted:selfplay-gullible`` and ``scripted:selfplay-contrarian``
(`gym.selfplay.scripted`) for tests.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gym.environment import Environment
from gym.environment_config import SamplingConfig
from gym.policy_client import InProcessEngine, PolicySpecError, load_engine
from gym.run_dir import write_atomic
from gym.selfplay.chain import Chain, RoleRecord, accepted_record, chain_summary, decide, verifier_row
from gym.selfplay.chain_bundle import ChainBundle, write_chain_bundle
from gym.selfplay.roles import (
    ROLES,
    MetaVerdict,
    Role,
    RoleFailure,
    RolePrompts,
    Solution,
    Verdict,
    parse_role,
    role_messages,
    role_user_text,
)
from gym.trajectory import Seeds, TrajectoryBuilder
from policies.sampling import EngineError, RolloutEngine, SamplingParams
from tasks.families import kind_of
from tasks.math.family import MATH
from tasks.math.grader import MathGrader
from tasks.math.problem import MathTask

log = logging.getLogger(__name__)

DEFAULT_POLICY = "local:configs/policy_tiny.yaml"
# spec scheme -> the module whose build_engine(ServeConfig) builds an in-process engine: a lazy registry
# like gym.policy_client.ENGINES (imported only when a `local:` spec is named; torch loads there)
LOCAL_BUILDER = "policies.serve_config"


class RoleTokens(BaseModel):
    """Most tokens each role may sample in its one turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator: int = Field(384, ge=1, description="The generator's turn (steps and answer).")
    verifier: int = Field(192, ge=1, description="The verifier's turn (a line per step and the verdict).")
    meta_verifier: int = Field(64, ge=1, description="The meta-verifier's turn.")


class SelfplayConfig(BaseModel):
    """A self-play run (configs/selfplay_tiny.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(description="A math environment: config file or registered name (its task pool).")
    policy: str = Field(DEFAULT_POLICY, description="Policy spec (module docstring); --policy overrides it.")
    seed: int = Field(0, ge=0, description="Seed of the role sampling seeds and of the bundle sampling.")
    replay_rate: float = Field(0.25, ge=0, le=1, description="Share of accepted chains written as replay bundles.")
    prompts: RolePrompts = Field(default_factory=RolePrompts, description="Role prompts and parser bounds.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Sampling of every role.")
    max_tokens: RoleTokens = Field(default_factory=RoleTokens, description="Token budget of each role's turn.")
    max_context_tokens: int = Field(4096, ge=16, description="Prompt plus completion at most (the policy's context).")


class SelfplayConfigError(ValueError):
    """A self-play config that cannot be used; the message names the file and the field."""


def load_config(path: Path, options: dict[str, Any] | None = None) -> SelfplayConfig:
    """The config in ``path`` with ``options`` (command-line values, None: not given) laid over its top-level
    keys; `SelfplayConfigError` names the file and every invalid field."""
    from sandbox.config_file import read_config, validate_config

    data = read_config(path, SelfplayConfigError)
    given = {key: value for key, value in (options or {}).items() if value is not None}
    if given and isinstance(data, dict):
        flags = ", ".join("--" + key.replace("_", "-") for key in given)
        data, source = {**data, **given}, f"{path} (with {flags})"
    else:
        source = str(path)
    return validate_config(SelfplayConfig, data, source, SelfplayConfigError)


def role_seed(seed: int, position: int, role: Role) -> int:
    """The sampling seed of one role turn (a hash: distinct per run, problem and role; reproducible)."""
    digest = hashlib.sha256(f"selfplay:{seed}:{position}:{role}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def sampled_for_replay(chain_id: str, rate: float, seed: int) -> bool:
    """Whether an accepted chain gets a bundle: a hash of the seed and the chain id below ``rate``."""
    digest = hashlib.sha256(f"replay:{seed}:{chain_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


# -- engines ------------------------------------------------------------------


def load_selfplay_engine(spec: str, env: Environment, prompts: RolePrompts) -> tuple[RolloutEngine, int | None]:
    """The engine a spec names (module docstring) and its context length when it tells one."""
    scheme, _, argument = spec.partition(":")
    if scheme == "scripted":
        from gym.selfplay.scripted import load_selfplay_scripted

        try:
            return load_selfplay_scripted(argument, env, prompts), None
        except ValueError as exc:
            raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None
    if scheme == "local":
        return _local_engine(argument, env)
    engine = load_engine(spec, env)
    inner = getattr(engine, "engine", None)
    return engine, getattr(inner, "context_length", None)


def _local_engine(path: str, env: Environment) -> tuple[RolloutEngine, int]:
    """The serve config's policy built in this process (torch loads here)."""
    if not path:
        raise PolicySpecError("local spec needs a serve YAML: local:configs/policy_tiny.yaml")
    serve = importlib.import_module(LOCAL_BUILDER)
    engine = serve.build_engine(serve.ServeConfig.load(path))
    if engine.vocab_size < env.tokenizer.vocab_size:
        raise PolicySpecError(
            f"the policy of {path} has {engine.vocab_size} token ids, the environment's tokenizer "
            f"{env.config.tokenizer!r} {env.tokenizer.vocab_size}: use a policy built for that tokenizer"
        )
    return InProcessEngine(engine), engine.context_length


# -- one chain --------------------------------------------------------------


class ChainRunner:
    """Runs the three roles over one problem (module docstring)."""

    def __init__(
        self, config: SelfplayConfig, env: Environment, engine: RolloutEngine, context_length: int | None = None
    ) -> None:
        self.config, self.env, self.engine = config, env, engine
        self.grader = MathGrader(env.config.math)
        self.max_context = min(config.max_context_tokens, context_length or config.max_context_tokens)
        self.check_seconds = 0.0

    async def run(self, task: MathTask, position: int) -> Chain:
        """The chain of one problem; raises EngineError when the engine fails."""
        records: list[RoleRecord] = []
        solution = verdict = meta = None
        grading = None
        record = await self.role("generator", task, position, None, None)
        records.append(record)
        if isinstance(record.output, Solution):
            solution = record.output
            started = time.monotonic()
            grading = await self.grader.grade(task, solution.answer)
            self.check_seconds += time.monotonic() - started
            if not grading.infra_error:
                record = await self.role("verifier", task, position, solution, None)
                records.append(record)
                verdict = record.output if isinstance(record.output, Verdict) else None
                if verdict is not None and verdict.correct == grading.passed:
                    record = await self.role("meta_verifier", task, position, solution, verdict)
                    records.append(record)
                    meta = record.output if isinstance(record.output, MetaVerdict) else None
        return Chain(
            chain_id=f"{self.config.seed}-{position}",
            task=task,
            position=position,
            roles=tuple(records),
            grading=grading,
            decision=decide(solution, grading, verdict, meta),
        )

    async def role(
        self, role: Role, task: MathTask, position: int, solution: Solution | None, verdict: Verdict | None
    ) -> RoleRecord:
        """One role turn: render its prompt, sample once, parse."""
        messages = role_messages(self.config.prompts, role, role_user_text(role, task.problem, solution, verdict))
        seed = role_seed(self.config.seed, position, role)
        seeds = Seeds(episode=seed, rollout=self.config.seed, position=position, member=ROLES.index(role))
        builder = TrajectoryBuilder.from_messages(self.env.harmony, messages, task_id=task.task_id, seeds=seeds)
        context = builder.context()
        room = self.max_context - len(context)
        if room < 1:
            failure = RoleFailure(kind="context_full", detail=f"prompt of {len(context)} tokens")
            return RoleRecord(
                role=role, trajectory=builder.build(), finish_reason=None, output=None, failure=failure, seconds=0.0
            )
        s = self.config.sampling
        params = SamplingParams(
            max_tokens=min(getattr(self.config.max_tokens, role), room),
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            stop_token_ids=tuple(self.env.harmony.stop_ids()),
            seed=seed,
        )
        started = time.monotonic()
        completion = (await self.engine.generate([context], params))[0]
        seconds = time.monotonic() - started
        turn = builder.add_sampled(completion.token_ids, completion.logprobs)
        parsed = parse_role(role, turn, self.config.prompts, solution)
        builder.policy_version = completion.weights_version
        failure = parsed if not isinstance(parsed, Solution | Verdict | MetaVerdict) else None
        return RoleRecord(
            role=role,
            trajectory=builder.build(),
            finish_reason=completion.finish_reason,
            output=None if failure is not None else parsed,
            failure=failure,
            seconds=round(seconds, 6),
        )


# -- the run ----------------------------------------------------------------


class Tally:
    """The counts ``summary.json`` reports (docs/selfplay.md lists every key)."""

    def __init__(self) -> None:
        self.problems = 0
        self.skipped_not_math = 0
        self.engine_errors = 0
        self.chains = 0
        self.ran: Counter[str] = Counter()
        self.parsed: Counter[str] = Counter()
        self.failures: dict[str, Counter[str]] = {role: Counter() for role in ROLES}
        self.check: Counter[str] = Counter()
        self.verifier_agrees = 0
        self.meta: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.accepted = 0
        self.rows: Counter[str] = Counter()
        self.bundles = 0
        self.seconds: Counter[str] = Counter()

    def add(self, chain: Chain, row: dict | None, bundled: bool) -> None:
        self.chains += 1
        for record in chain.roles:
            self.ran[record.role] += 1
            self.seconds[record.role] += record.seconds
            if record.failure is None:
                self.parsed[record.role] += 1
            else:
                self.failures[record.role][record.failure.kind] += 1
        if chain.grading is not None:
            self.check[
                "infra_error" if chain.grading.infra_error else "right" if chain.grading.passed else "wrong"
            ] += 1
        verdict, meta = chain.output("verifier"), chain.output("meta_verifier")
        if isinstance(verdict, Verdict) and chain.grading is not None and verdict.correct == chain.grading.passed:
            self.verifier_agrees += 1
        if isinstance(meta, MetaVerdict):
            self.meta["agree" if meta.agree else "disagree"] += 1
        if chain.decision.accepted:
            self.accepted += 1
        else:
            self.rejected[str(chain.decision.reason)] += 1
        if row is not None:
            self.rows[row["source"]] += 1
        self.bundles += bundled

    def summary(self, wall_s: float, check_s: float) -> dict[str, Any]:
        role_figures = {
            role: {
                "ran": self.ran[role],
                "parsed": self.parsed[role],
                "failures": dict(sorted(self.failures[role].items())),
                "policy_s": round(self.seconds[role], 3),
            }
            for role in ROLES
        }
        role_figures["verifier"]["agrees_with_check"] = self.verifier_agrees
        role_figures["meta_verifier"].update(agree=self.meta["agree"], disagree=self.meta["disagree"])
        return {
            "problems": self.problems,
            "skipped_not_math": self.skipped_not_math,
            "engine_errors": self.engine_errors,
            "chains": self.chains,
            **role_figures,
            "check": {key: self.check[key] for key in ("right", "wrong", "infra_error")},
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.chains, 4) if self.chains else None,
            "rejected": dict(sorted(self.rejected.items())),
            "parse_failures": sum(sum(c.values()) for c in self.failures.values()),
            "verifier_rows": sum(self.rows.values()),
            "verifier_rows_by_source": dict(sorted(self.rows.items())),
            "bundles": self.bundles,
            "check_s": round(check_s, 3),
            "wall_s": round(wall_s, 3),
            "chains_per_min": round(60 * self.chains / wall_s, 3) if wall_s > 0 else None,
        }


class JsonlFile:
    """Append-only JSON lines: each line written, flushed and fsynced before `append` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # closed by close()

    def append(self, record: dict) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


class SelfplayOutput:
    """The run directory's files (module docstring); one `add` per finished chain."""

    def __init__(self, out: Path, config: SelfplayConfig, env: Environment) -> None:
        self.out, self.config, self.env = out, config, env
        (out / "bundles").mkdir(parents=True, exist_ok=True)
        self.chains = JsonlFile(out / "chains.jsonl")
        self.accepted = JsonlFile(out / "accepted.jsonl")
        self.rows = JsonlFile(out / "verifier_rows.jsonl")
        self.tally = Tally()

    def add(self, chain: Chain) -> None:
        row = verifier_row(chain)
        bundle = None
        if chain.decision.accepted and sampled_for_replay(chain.chain_id, self.config.replay_rate, self.config.seed):
            bundle = self._bundle(chain, row)
        self.chains.append(chain_summary(chain))
        if chain.decision.accepted:
            self.accepted.append(accepted_record(chain, bundle))
        if row is not None:
            self.rows.append(row)
        self.tally.add(chain, row, bundle is not None)

    def _bundle(self, chain: Chain, row: dict | None) -> str | None:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in chain.task.task_id)[:60]
        path = self.out / "bundles" / f"{chain.position:06d}-{safe}.json"
        bundle = ChainBundle(
            environment=self.env.name,
            tokenizer=self.env.config.tokenizer,
            prompts=self.config.prompts,
            math=self.env.config.math,
            chain=chain,
            row=row,
        )
        try:
            write_chain_bundle(path, bundle)
        except (ValueError, UnicodeError, OSError) as exc:  # a bundle that cannot be written never ends the run
            log.error("chain %s: bundle not written: %s", chain.chain_id, str(exc)[:300])
            return None
        return str(path.relative_to(self.out))

    def engine_error(self, task: MathTask, position: int, exc: EngineError) -> None:
        self.tally.engine_errors += 1
        self.chains.append(
            {"chain_id": f"{self.config.seed}-{position}", "task_id": task.task_id, "engine_error": str(exc)[:500]}
        )

    def close(self) -> None:
        for sink in (self.chains, self.accepted, self.rows):
            sink.close()


async def run_selfplay(
    runner: ChainRunner, output: SelfplayOutput, max_problems: int, write_summary: Any = None
) -> None:
    """Draw ``max_problems`` problems from the environment's stream and run a chain on each math one."""
    stream = runner.env.stream()
    for position, task in stream.take(max_problems):
        output.tally.problems += 1
        if kind_of(task) is not MATH:  # a chain checks its problem's answers against a gold
            output.tally.skipped_not_math += 1
            log.warning("problem %d (%s) is not a math task: skipped", position, task.task_id)
            continue
        try:
            chain = await runner.run(task, position)
        except EngineError as exc:
            log.warning("problem %d (%s): the engine failed: %s", position, task.task_id, str(exc)[:300])
            output.engine_error(task, position, exc)
            continue
        output.add(chain)
        log.info(
            "chain %s (%s): %s",
            chain.chain_id,
            task.task_id,
            "accepted" if chain.decision.accepted else f"rejected ({chain.decision.reason})",
        )
        if write_summary is not None:
            write_summary()


def write_summary(path: Path, summary: dict) -> None:
    write_atomic(path, json.dumps(summary, indent=2) + "\n")
