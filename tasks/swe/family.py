"""SWE instances as a task family (`tasks.family`): agents fix a real repository in the gym.

* **Workspace**: a container of the instance's image (built on demand when the
  family opens, cached by input hash, `tasks.swe.images`) with the repository at
  ``/workspace/repo`` and the issue in ``/workspace/PROBLEM_STATEMENT.md``
  (`tasks.swe.workspace.prepare`); budgets from ``SweFamilyConfig.budgets``
  (a repository needs more memory and disk than a CP task).
* **Answer**: the diff of the agent's ``/workspace/repo`` against base_commit,
  taken in a fresh container of the same image by the pristine git directory
  (`tasks.swe.workspace.workspace_diff`): the agent's ``.git`` plays no part.
  Whatever ``submit`` was given, the repository's state is the answer.
* **Grade**: `tasks.swe.grader.SweGrader` in another fresh container, turned into
  a ``TaskResult`` (`task_result`): one test per FAIL_TO_PASS then PASS_TO_PASS
  id, ``passed`` = resolved, ``fraction`` = F2P-weighted share of passing tests.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from sandbox.config import SandboxConfig, WorkspaceBudgets
from sandbox.errors import InfraError
from sandbox.failure import Verdict
from sandbox.fleet import FleetPool, open_pool
from sandbox.pool import WorkspacePool
from sandbox.workspace import Workspace
from tasks.family import BaseFamily, FamilyKind, FamilyResources
from tasks.result import TaskResult, TestResult
from tasks.swe.grader import SweGrader, SweGraderConfig, grading_budgets, instance_sandbox
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import InstanceResult
from tasks.swe.workspace import PROBLEM_FILE, REPO, prepare, workspace_diff

log = logging.getLogger(__name__)

# What the shipped instances and typical SWE-Gym repositories need (a checkout plus its test run).
SWE_BUDGETS = WorkspaceBudgets(memory_mb=2048, pids=256, workspace_mb=1024, workspace_inodes=262144, tmp_mb=256)


class SweFamilyConfig(BaseModel):
    """Workspaces and grading of SWE episodes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budgets: WorkspaceBudgets = Field(
        SWE_BUDGETS, description="sandbox budgets of SWE workspaces and grading containers"
    )
    grader: SweGraderConfig = Field(default_factory=SweGraderConfig, description="deadlines and bounds of grading")
    f2p_weight: float = Field(2.0, gt=0, description="weight of the FAIL_TO_PASS share in the fraction (P2P: 1)")


def task_result(result: InstanceResult, f2p: tuple[str, ...], p2p: tuple[str, ...], f2p_weight: float) -> TaskResult:
    """An SWE grade as a ``TaskResult``: one test per F2P then P2P id (passed, or ``wrong_answer``; every one
    ``tampered`` when the candidate's code reached into the test run).

    ``fraction`` = (w * F2P share + P2P share) / (w + 1) with w = ``f2p_weight``, 0 unless the
    run was valid (resolved or unresolved); ``passed`` = resolved.
    """
    passing = set(result.f2p.success) | set(result.p2p.success)
    failing = Verdict.TAMPERED if result.status == "tampered" else Verdict.WRONG_ANSWER
    tests = tuple(
        TestResult(index=i, verdict=Verdict.PASSED if test_id in passing else failing, detail=f"{group} {test_id}")
        for i, (group, test_id) in enumerate([("FAIL_TO_PASS", t) for t in f2p] + [("PASS_TO_PASS", t) for t in p2p])
    )
    valid = result.status in ("resolved", "unresolved")
    fraction = (f2p_weight * result.f2p.fraction + result.p2p.fraction) / (f2p_weight + 1) if valid else 0.0
    stripped = "; ".join(f"{s.path} ({s.reason})" for s in result.stripped)
    detail = " | ".join(
        part
        for part in (result.status, result.detail.strip()[:1500], f"stripped: {stripped}" if stripped else "")
        if part
    )
    detail = detail.encode("utf-8", errors="replace").decode("utf-8")  # paths of the candidate's making: any bytes
    return TaskResult(
        task_id=result.instance_id,
        passed=result.resolved,
        fraction=round(fraction, 6),
        infra_error=result.infra_error,
        tests=tests,
        detail=detail,
        wall_s=result.wall_s,
    )


class SweKind(FamilyKind):
    """SWE instances: the repository's diff is the answer."""

    name = "swe"
    task_types = (SweInstance,)
    answer = "repository"
    instructions = "swe_instructions"
    settings = "swe"
    takes_solutions = False  # an instance's reference is its gold patch
    # final_answer: a final message's code block is handed in, but the repository's diff is what is graded

    def task_text(self, task: SweInstance) -> str:
        """Where the repository is, then the issue."""
        return (
            f"The repository {task.repo} is checked out at {REPO} (the issue is also in {PROBLEM_FILE}). "
            "Change its code so that the issue below is fixed; hidden tests judge the result.\n\n"
            f"{task.problem_statement.rstrip()}"
        )

    def describe(self, task: SweInstance) -> str:
        return f"swe, {task.repo}"

    def reference(self, task: SweInstance, completion: str | None) -> str:
        """The gold patch."""
        return task.patch

    def family(self, tasks: Sequence[SweInstance], resources: FamilyResources) -> SweFamily | None:
        """A family for the pool's instances, their images built when it opens; none when there are none."""
        if not tasks:
            return None
        repos_dirs = {task.instance_id: resources.repos_dirs.get(task.task_id) for task in tasks}
        return SweFamily(resources.sandbox, resources.settings or SweFamilyConfig(), list(tasks), repos_dirs)

    def replay_family(self, task: SweInstance, resources: FamilyResources, image: str) -> SweFamily:
        """The instance on its own image, the one the bundle names (built when the episode ran)."""
        if not image:
            raise InfraError("the episode had no workspace image (it was masked before it ran)")
        config = resources.settings or SweFamilyConfig()
        return SweFamily(resources.sandbox, config, [task], {}, {task.instance_id: image})


SWE = SweKind()


class SweFamily(BaseFamily):
    """SWE instances end to end (see the module docstring)."""

    kind = SWE

    def __init__(
        self,
        sandbox: SandboxConfig,
        config: SweFamilyConfig,
        instances: list[SweInstance],
        repos_dirs: dict[str, Path | None],
        images: dict[str, str] | None = None,
    ) -> None:
        self.sandbox = sandbox.model_copy(update={"budgets": config.budgets})
        self.config = config
        self.instances = {i.instance_id: i for i in instances}
        self.repos_dirs = repos_dirs
        self.grader = SweGrader(config.grader)
        self.images: dict[str, str] = dict(images or {})  # instance id -> image tag (given ones are not built)
        self.build_errors: dict[str, str] = {}
        self._pools: dict[
            str, WorkspacePool | FleetPool
        ] = {}  # the agent's workspaces (the environment's episode budgets)
        self._graders: dict[
            str, WorkspacePool | FleetPool
        ] = {}  # fresh containers for the diff and the tests (grading budgets)

    async def build(self) -> None:
        """Images of every instance not built yet (cached by input hash; a no-op once built)."""
        by_dir: dict[Path | None, list[SweInstance]] = {}
        for instance_id, instance in self.instances.items():
            if instance_id not in self.images:
                by_dir.setdefault(self.repos_dirs.get(instance_id), []).append(instance)
        for repos_dir, instances in by_dir.items():
            log.info("swe: images of %d instances (built on demand, cached by input hash)", len(instances))
            from tasks.swe.images import build_images  # docker's client, imported when an image is wanted

            images, errors = await trio.to_thread.run_sync(build_images, instances, repos_dir)
            self.images.update(images)
            self.build_errors.update(errors)
            for instance_id, error in errors.items():
                log.error("swe: no image for %s: %s", instance_id, error.splitlines()[0][:300] if error else "")

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        await self.build()
        grading = grading_budgets(self.sandbox)
        async with AsyncExitStack() as stack:
            for instance_id, tag in self.images.items():
                agent = open_pool(instance_sandbox(self.sandbox, tag), gc_at_start=False)
                self._pools[instance_id] = await stack.enter_async_context(agent)
                grader = open_pool(instance_sandbox(grading, tag), gc_at_start=False)
                self._graders[instance_id] = await stack.enter_async_context(grader)
            try:
                yield
            finally:
                self._pools, self._graders = {}, {}

    def pool_for(self, task: SweInstance) -> WorkspacePool | FleetPool:
        return self._pool(task)

    def _pool(self, instance: SweInstance, grading: bool = False) -> WorkspacePool | FleetPool:
        pool = (self._graders if grading else self._pools).get(instance.instance_id)
        if pool is None:
            why = self.build_errors.get(instance.instance_id) or "the family is not open (use Families.opened())"
            raise InfraError(f"no workspace image for {instance.instance_id}: {why[:500]}")
        return pool

    @asynccontextmanager
    async def workspace(self, task: SweInstance, owner: str) -> AsyncIterator[Workspace]:
        async with self._pool(task).acquire(owner=owner) as ws:
            await prepare(ws, task)
            yield ws

    async def answer(self, task: SweInstance, ws: Workspace, submitted: str | None) -> str | None:
        return await workspace_diff(ws, self._pool(task, grading=True))

    async def grade(self, task: SweInstance, answer: str) -> TaskResult:
        try:
            pool = self._pool(task, grading=True)
        except InfraError as err:
            result = InstanceResult(instance_id=task.instance_id, resolved=False, status="infra_error", detail=str(err))
        else:
            result = await self.grader.grade(pool, task, answer)
        return task_result(result, task.fail_to_pass, task.pass_to_pass, self.config.f2p_weight)
