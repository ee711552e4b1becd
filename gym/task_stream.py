"""Task pools and the task stream: the tasks of a pool's sources, and the order an environment draws them in.

The task stream (``TaskStream``) is a deterministic sequence of tasks: draw
``i`` picks a source with probability proportional to its weight from a
generator seeded by ``(seed, i)``, then takes that source's next task (file
order, or a seeded permutation per epoch with ``shuffle: true``). Worker ``w``
of ``n`` takes the draws ``i`` with ``i % n == w``, so shards are disjoint and
together are the whole stream; the cursor (``position``) is one integer, and
``seek(position)`` resumes exactly where a run stopped.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gym.environment_config import (
    AnyPool,
    EnvironmentConfig,
    EnvironmentConfigError,
    GeneratedPool,
    MixturePool,
    TaskPoolConfig,
)
from tasks.errors import TaskError
from tasks.families import AnyTask, usable
from tasks.family import Finding
from tasks.loader import load_tasks
from tasks.swe.instance import load_instances
from tasks.task import Task
from tasks.task_ids import prefixed


def leaf_pools(config: TaskPoolConfig) -> tuple[list[AnyPool], list[float]]:
    """The file pools of a task pool and their weights."""
    if isinstance(config, MixturePool):
        return [source.pool for source in config.sources], [source.weight for source in config.sources]
    return [config], [1.0]


def load_pool(
    pool: AnyPool, config: EnvironmentConfig | None = None, unread: list[Finding] | None = None
) -> list[AnyTask]:
    """The tasks of one pool (rows of a file that do not parse are logged and skipped by the loader; so are tasks
    their family cannot grade, with ``config``'s settings of the family, each appended to ``unread``: math tasks whose
    gold the check cannot grade against, `tasks.math.golds`)."""
    if isinstance(pool, GeneratedPool):
        return generated_tasks(pool)
    reader = "datasets" if pool.type == "hf" else "plain"
    if pool.format == "swe":
        if pool.id_prefix:
            raise EnvironmentConfigError(f"task pool {pool.path}: id_prefix is not supported for swe pools")
        try:
            loaded = load_instances(pool.path, reader)
        except TaskError as exc:
            raise EnvironmentConfigError(f"task pool {pool.path}: {exc}") from None
        instances = list(loaded.instances[: pool.limit])
        if not instances:
            raise EnvironmentConfigError(
                f"task pool {pool.path}: no usable instance ({len(loaded.errors)} rows skipped)"
            )
        return instances
    report = load_tasks(pool.path, pool.format, reader=reader)
    tasks: list[AnyTask] = list(report.tasks[: pool.limit])
    tasks, found = usable(tasks, lambda kind: kind.settings_of(config), str(pool.path))
    if unread is not None:
        unread += prefixed(found, pool.id_prefix)
    if not tasks:
        unreadable = f", {len(found)} golds the math check cannot read" if found else ""
        raise EnvironmentConfigError(
            f"task pool {pool.path}: no usable task ({len(report.errors)} rows skipped{unreadable})"
        )
    return prefixed(tasks, pool.id_prefix)


def generated_tasks(pool: GeneratedPool) -> list[Task]:
    """The generated family's tasks for a pool, parsed as the CodeContests rows they are (references included)."""
    from tasks import generator
    from tasks.formats import codecontests

    try:
        specs = generator.draw(pool.split, pool.count, pool.seed, pool.levels, pool.templates)
    except generator.GeneratorError as exc:
        raise EnvironmentConfigError(f"task pool {pool.path}: {exc}") from None
    tasks = [
        codecontests.parse(i, generator.render(spec, pool.seed, pool.params_in).row) for i, spec in enumerate(specs)
    ]
    return prefixed(tasks, pool.id_prefix)


class TaskStream:
    """The deterministic, shardable, resumable sequence of tasks of a pool (see the module docstring)."""

    def __init__(
        self,
        sources: Sequence[Sequence[Task]],
        weights: Sequence[float],
        *,
        seed: int = 0,
        shuffle: Sequence[bool] | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        index, count = shard
        if not 0 <= index < count:
            raise ValueError(f"shard {index} of {count}: need 0 <= index < count")
        if len(sources) != len(weights) or not sources or any(not s for s in sources):
            raise ValueError("need one non-empty task list per weight")
        self.sources = [list(s) for s in sources]
        self.weights = list(weights)
        self.shuffle = list(shuffle or [False] * len(self.sources))
        self.seed, self.shard = seed, shard
        self.position = 0
        self._taken = [0] * len(self.sources)
        self._orders: dict[int, tuple[int, list[int]]] = {}

    def _source(self, position: int) -> int:
        if len(self.sources) == 1:
            return 0
        return random.Random(f"{self.seed}:source:{position}").choices(range(len(self.sources)), self.weights)[0]

    def _task(self, source: int, k: int) -> Task:
        tasks = self.sources[source]
        epoch, j = divmod(k, len(tasks))
        if not self.shuffle[source]:
            return tasks[j]
        cached = self._orders.get(source)
        if cached is None or cached[0] != epoch:  # only each source's current epoch is kept
            order = list(range(len(tasks)))
            random.Random(f"{self.seed}:order:{source}:{epoch}").shuffle(order)
            cached = self._orders[source] = (epoch, order)
        return tasks[cached[1][j]]

    def next(self) -> tuple[int, Task]:
        """``(position, task)`` of this shard's next draw."""
        index, count = self.shard
        while True:
            position, source = self.position, self._source(self.position)
            k = self._taken[source]
            self._taken[source] += 1
            self.position += 1
            if position % count == index:
                return position, self._task(source, k)

    def take(self, n: int) -> list[tuple[int, Task]]:
        return [self.next() for _ in range(n)]

    def seek(self, position: int) -> None:
        """Resume at a cursor saved from ``position`` (replays the cheap source draws before it)."""
        self.position, self._taken, self._orders = 0, [0] * len(self.sources), {}
        for i in range(position):
            self._taken[self._source(i)] += 1
        self.position = position
