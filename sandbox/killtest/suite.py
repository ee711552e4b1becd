"""Run the kill-test suite: the posture snapshot, then every attack in fresh workspaces, judged inside and from the host.

Attacks without a neighbour probe run concurrently (``concurrency`` at a
time, each in its own workspace from a warm pool); bombs and hogs with a
probe run afterwards one at a time, so the neighbour's latency measures them
alone (against itself with the attacker frozen: ``sandbox.killtest.neighbour``).
A CPU attack's verdict rests on its container's own CPU time against its limit
(``sandbox.killtest.cpu_account``). Every attack ends with the host checks of ``sandbox.killtest.hostcheck``.
One attack that cannot be run becomes an ``error`` row, never an aborted suite.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import trio
from pydantic import BaseModel, ConfigDict, Field

from sandbox.config import PoolConfig, SandboxConfig
from sandbox.docker_engine import Engine
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.killtest import posture as posture_mod
from sandbox.killtest.attack import Attack, Program, ToolStep
from sandbox.killtest.cpu_account import CpuAccount
from sandbox.killtest.hostcheck import HostChecks, file_states, files_unchanged, rootfs_unchanged
from sandbox.killtest.judge import AttackResult, Check, Observation, bounds, canary, judge, observe, parse_report
from sandbox.killtest.listener import GatewayListener, gateway_listener
from sandbox.killtest.neighbour import NeighbourProbe
from sandbox.killtest.report import SuiteReport
from sandbox.labels import Labels, current_owner
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from sandbox.workspace import Workspace

log = logging.getLogger(__name__)
PRELUDE = Path(__file__).with_name("prelude.py").read_text()
BASH_PRELUDE = Path(__file__).with_name("prelude.sh").read_text()
CANARY_ENV = "KILLTEST_HOST_SECRET"
LEFTOVER_WAIT_S = 20.0
# Host files checked around every attack, on top of the paths each attack targets.
HOST_PATHS = ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/hosts", "/etc/resolv.conf")


class SuiteOptions(BaseModel):
    """How the suite runs (not what it attacks: that is the sandbox config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(3, ge=1, le=16, description="attacks without a neighbour probe run this many at a time")
    expected_posture: Path | None = Field(
        posture_mod.EXPECTED_PATH, description="expected posture file; None skips the posture snapshot"
    )
    record_posture: Path | None = Field(
        None, description="write the observed posture here (to update the expected file)"
    )


def argv_of(program: Program) -> list[str]:
    if program.lang == "python":
        return ["python3", "-c", PRELUDE + program.source]
    return ["bash", "-c", BASH_PRELUDE + program.source]


@dataclass
class Run:
    """What one attack collected: observations, host checks, every output (for the canary), its containers."""

    observations: list[Observation] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    outputs: list[bytes] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)


class Suite:
    """One run against one pool; ``attack`` runs and judges one catalog entry."""

    def __init__(self, pool: WorkspacePool, listener: GatewayListener, secret: str):
        self.pool = pool
        self.host = HostChecks(pool.engine)
        self.listener = listener
        self.secret = secret
        self.output_limit = pool.config.calls.output_limit_bytes
        self.grace_s = pool.config.calls.grace_s

    # ------------------------------------------------------------ one attack

    async def attack(self, attack: Attack) -> AttackResult:
        started = time.monotonic()
        log.info("attack %s (%s): %s", attack.name, attack.group, attack.goal)
        try:
            observations, checks = await self._attack(attack)
        except Exception as exc:  # one attack that cannot run is an error row; the suite goes on
            log.exception("attack %s could not be run", attack.name)
            return judge(attack, [], [], time.monotonic() - started, error=f"{type(exc).__name__}: {exc}")
        result = judge(attack, observations, checks, time.monotonic() - started)
        log.info("attack %s: %s (%s) in %.1fs", attack.name, result.verdict.value, result.observed, result.seconds)
        return result

    async def _attack(self, attack: Attack) -> tuple[list[Observation], list[Check]]:
        facts = {"attack": attack.name, "gateway_host": self.listener.host, "gateway_port": str(self.listener.port)}
        facts["canary_name"] = "kt_neighbour_" + os.urandom(6).hex()
        watched = HOST_PATHS + attack.targets
        before = file_states(watched)
        run = Run()
        async with self.pool.acquire(f"killtest:{attack.name}") as ws:
            run.containers.append(ws.id)
            baseline = await self.host.rootfs_changes(ws.id)
            if attack.program is not None:
                await self._first(ws, attack, facts, run)
            for step in attack.steps:
                run.observations.append(await self._step(ws, step, run))
            if attack.after is not None:
                await self._program(ws, "after", attack.after, facts, run)
            run.checks.append(rootfs_unchanged(baseline, await self.host.rootfs_changes(ws.id)))
        if attack.fresh is not None:
            async with self.pool.acquire(f"killtest:{attack.name}:fresh") as fresh:
                run.containers.append(fresh.id)
                await self._program(fresh, "fresh workspace", attack.fresh, facts, run)
        for container_id in run.containers:
            run.checks.append(await self.host.removed(container_id))
        run.checks.append(files_unchanged(before, file_states(watched)))
        run.checks.append(await self.host.daemon())
        run.checks.append(canary(run.outputs, self.secret))
        if self.listener.listening:
            peers = self.listener.seen.get(attack.name, [])
            detail = f"host listener {self.listener.host}:{self.listener.port} " + (
                f"accepted connections from {', '.join(peers)}" if peers else "saw no connection"
            )
            run.checks.append(Check(name="gateway_listener", passed=not peers, detail=detail))
        return run.observations, run.checks

    async def _first(self, ws: Workspace, attack: Attack, facts: dict[str, str], run: Run) -> None:
        """The main program, with its neighbour workspace when the attack has one."""
        if attack.neighbour == "none":
            await self._main(ws, attack, facts, run, None)
            return
        async with self.pool.acquire(f"killtest:{attack.name}:neighbour") as neighbour:
            run.containers.append(neighbour.id)
            if attack.neighbour == "plant":
                planted = await neighbour.write_file(facts["canary_name"], self.secret.encode())
                if planted.failure != FailureKind.OK:
                    raise InfraError(f"could not plant the neighbour canary: {planted.detail}")
                await self._main(ws, attack, facts, run, None)
                return
            probe = NeighbourProbe(neighbour, self.pool.engine)
            await probe.warm()
            await self._main(ws, attack, facts, run, probe)
            run.checks.append(probe.check())

    async def _main(
        self, ws: Workspace, attack: Attack, facts: dict[str, str], run: Run, probe: NeighbourProbe | None
    ) -> None:
        """The program, sampled by ``probe`` while it runs, inside the CPU account's window when it has one."""
        account = CpuAccount(self.pool.engine, ws.id) if attack.accounting == "cpu" else None
        if account is not None:
            await account.start()  # before the call is sent: every CPU second of the attack falls inside
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            if probe is not None:
                nursery.start_soon(probe.measure_until, ws.id, done)
            try:
                await self._program(ws, "program", attack.program, facts, run)
            finally:
                done.set()
        if account is not None:
            await account.stop()  # after the call and the host's sweep: a process outliving the call is charged
            frozen_s, thaws = (probe.frozen_s, probe.thaws) if probe is not None else (0.0, 0)
            run.checks.append(account.check(frozen_s, thaws))

    async def _program(self, ws: Workspace, stage: str, program: Program, facts: dict[str, str], run: Run) -> None:
        env = {key: value.format(**facts) for key, value in program.env.items()}
        request = ExecRequest(argv=argv_of(program), timeout_s=program.timeout_s, env=env)
        started = time.monotonic()
        result = await ws.exec(request)
        host_wall = time.monotonic() - started
        survivors = await self.host.survivors(ws.id)
        run.outputs.append(result.stdout + result.stderr)
        run.observations.append(observe(stage, program, result, survivors, runner_lost_escapes=stage == "after"))
        run.checks.append(bounds(stage, program, result, self.output_limit, host_wall, self.grace_s))
        detail = f"{stage}: " + ("; ".join(survivors) if survivors else "only init and the runner after the call")
        run.checks.append(Check(name="processes", passed=not survivors, detail=detail))

    async def _step(self, ws: Workspace, step: ToolStep, run: Run) -> Observation:
        detail = ""
        if step.op == "exec_cwd":
            result = await ws.exec(ExecRequest(argv=["pwd"], cwd=step.path, timeout_s=5))
            failure, detail = result.failure, result.detail or result.stdout_text.strip()
        elif step.op == "read_file":
            read = await ws.read_file(step.path)
            failure, detail = read.failure, read.detail
            run.outputs.append(read.data)
        elif step.op == "write_file":
            written = await ws.write_file(step.path, b"killtest\n")
            failure, detail = written.failure, written.detail
        elif step.op == "list_dir":
            listed = await ws.list_dir(step.path)
            failure, detail = listed.failure, listed.detail or f"{len(listed.entries)} entries"
        elif step.op == "put_archive":
            put = await ws.put_archive(step.path, step.archive())
            failure, detail = put.failure, put.detail
        else:
            try:
                run.outputs.append(await ws.get_archive(step.path))
                failure = FailureKind.OK
            except ValueError as exc:  # "get_archive PATH: KIND: detail"
                detail = str(exc)
                failure = FailureKind(detail.split(": ")[1]) if detail.count(": ") >= 2 else FailureKind.TOOL_ERROR
            except InfraError as exc:  # the runner died serving the attacker's data: the attack's doing
                failure, detail = FailureKind.INFRA_ERROR, str(exc)
        expected = tuple(kind.value for kind in step.expect)
        return Observation(stage=f"tool {step.label}", observed=failure.value, expected=expected, evidence=detail)

    # ------------------------------------------------------------ posture

    async def posture(self) -> dict[str, Any]:
        async with self.pool.acquire("killtest:posture") as ws:
            result = await ws.exec(ExecRequest(argv=["python3", "-c", PRELUDE + posture_mod.PROGRAM], timeout_s=30))
        report = parse_report(result.stdout)
        if not report or "posture" not in report:
            raise InfraError(f"posture program gave no report ({result.failure.value}): {result.stderr_text[-300:]}")
        return posture_mod.normalise(report["posture"], posture_mod.host_namespaces())


async def run_suite(
    config: SandboxConfig, attacks: tuple[Attack, ...], options: SuiteOptions | None = None
) -> SuiteReport:
    """Run ``attacks`` against ``config``; see the module docstring."""
    options = options or SuiteOptions()
    # The pool size is how many workspaces are kept warm, not part of what is attacked. Every attack's container
    # is destroyed after it (recycle_uses and disjoint_uses 0): the host checks that it is gone with nothing of it
    # left on the host; what a recycled container keeps is attacked by tests/integration/test_sandbox_recycling*.py.
    pool = config.pool.model_dump() | {"recycle_uses": 0, "disjoint_uses": 0}
    warm = config.model_copy(update={"pool": PoolConfig(**{**pool, "size": options.concurrency})})
    # Latency probes run on a cold pool: a warm pool's background container starts would load the host mid-probe.
    cold = config.model_copy(update={"pool": PoolConfig(**{**pool, "size": 0})})
    secret = "kt-secret-" + os.urandom(16).hex()
    previous = os.environ.get(CANARY_ENV)
    os.environ[CANARY_ENV] = secret  # a host secret the sandbox must never show
    started = time.monotonic()
    try:
        async with WorkspacePool(warm) as pool:
            image_before = await _image_id(pool)
            async with gateway_listener(pool.engine) as listener:
                suite = Suite(pool, listener, secret)
                posture = await _posture(suite, options)
                results = await _concurrently(
                    suite, [a for a in attacks if a.neighbour != "probe"], options.concurrency
                )
                async with WorkspacePool(cold, gc_at_start=False) as cold_pool:
                    alone = Suite(cold_pool, listener, secret)
                    for attack in [a for a in attacks if a.neighbour == "probe"]:
                        results[attack.name] = await alone.attack(attack)
            image_after = await _image_id(pool)
        checks = [
            Check(
                name="image",
                passed=image_before == image_after,
                detail=f"{config.image} {image_before[:19]} -> {image_after[:19]}",
            ),
            await _leftovers(warm),
        ]
    finally:
        if previous is None:
            os.environ.pop(CANARY_ENV, None)
        else:
            os.environ[CANARY_ENV] = previous
    return SuiteReport(
        attacks=[results[a.name] for a in attacks],
        posture=posture,
        checks=checks,
        seconds=round(time.monotonic() - started, 1),
        config={
            "image": config.image,
            "hardening": config.hardening.model_dump(),
            "budgets": config.budgets.model_dump(),
            "allowlist": config.allowlist,
        },
    )


async def _concurrently(suite: Suite, attacks: list[Attack], concurrency: int) -> dict[str, AttackResult]:
    results: dict[str, AttackResult] = {}
    limiter = trio.CapacityLimiter(concurrency)

    async def limited(attack: Attack) -> None:
        async with limiter:
            results[attack.name] = await suite.attack(attack)

    async with trio.open_nursery() as nursery:
        for attack in attacks:
            nursery.start_soon(limited, attack)
    return results


async def _posture(suite: Suite, options: SuiteOptions) -> str | list[dict[str, Any]]:
    if options.expected_posture is None and options.record_posture is None:
        return "skipped"
    observed = await suite.posture()
    if options.record_posture is not None:
        posture_mod.save(observed, options.record_posture)
        log.info("posture recorded to %s", options.record_posture)
    if options.expected_posture is None:
        return "skipped"
    drifted = posture_mod.drift(posture_mod.load(options.expected_posture), observed)
    return drifted or "ok"


async def _image_id(pool: WorkspacePool) -> str:
    try:
        image = await pool.engine.call("inspect image", pool.engine.client.api.inspect_image, pool.config.image)
    except docker.errors.NotFound:
        raise InfraError(f"image {pool.config.image} not found: run `python -m gym images build`") from None
    return image["Id"]


async def _leftovers(config: SandboxConfig) -> Check:
    """After the pool closed, no container of this run is left (removals in flight get LEFTOVER_WAIT_S)."""
    engine = Engine(config)
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    try:
        while True:
            mine = [c for c in await engine.labelled() if Labels.parse(c.get("Labels") or {}).owner == current_owner()]
            if not mine or time.monotonic() > deadline:
                break
            await trio.sleep(0.2)
    finally:
        engine.close()
    names = ", ".join(c["Names"][0] for c in mine)
    return Check(name="leftover_containers", passed=not mine, detail=names or "none of this run's containers left")
