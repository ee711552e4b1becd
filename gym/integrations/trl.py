"""A TRL reward function over the gym's graders: ``GRPOTrainer(reward_funcs=[GymReward()], ...)``.

TRL calls a reward function with ``prompts``, ``completions`` (strings, or lists of chat messages for a
conversational dataset) and every other dataset column as a keyword argument, one value per completion, and
reads back one float per completion, or None for a completion it cannot score. Two ways to name the task:

* verl's columns, as a verl parquet file loads with ``datasets``: ``data_source`` and ``reward_model``
  (``{"ground_truth": ...}``; or a plain ``ground_truth`` column), ``extra_info`` optional. Routed and read as
  `gym.integrations.ground_truth` says.
* a ``task_id`` column naming a task of ``GymReward(tasks=FILE)``, loaded by the gym's loaders in any format they
  read (`tasks.loader`): the hidden tests stay out of the dataset.

Scores: 1.0 / 0.0 (or the fraction passed, `ScorerConfig.reward`); 0.0 for a malformed ground truth or an oversized
completion (logged); None for a sample the sandbox or host failed to grade (TRL gives it no advantage: masked, never
a 0). An unknown ``data_source`` or ``task_id``, or rows without either, raise: the dataset does not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.integrations.ground_truth import final_answer, sample
from gym.integrations.scorer import Score, Scorer, ScorerConfig, ScorerError, refused
from tasks.families import kind_of
from tasks.formats.verl import Kind
from tasks.loader import load_tasks
from tasks.math.family import MATH
from tasks.math.problem import MathTask
from tasks.task import Task


class DatasetMismatch(ScorerError, ValueError):
    """Dataset rows that name no task this reward function knows."""


def completion_text(completion: Any) -> str | None:
    """The text of a completion: a string, or the content of a conversational completion's last message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        return content if isinstance(content, str) else None
    return None


class GymReward:
    """``(prompts, completions, **columns) -> list[float | None]`` for `trl.GRPOTrainer` (see the module docstring)."""

    def __init__(
        self,
        tasks: str | Path | None = None,
        *,
        config: ScorerConfig | None = None,
        scorer: Scorer | None = None,
        sources: dict[str, Kind] | None = None,
    ) -> None:
        self.__name__ = "code_rl_gym"  # TRL logs each reward function's mean under its name
        self.scorer = scorer or Scorer(config)
        self.sources = sources
        self.tasks: dict[str, Task | MathTask] = {}
        if tasks is not None:
            self.tasks = {task.task_id: task for task in load_tasks(Path(tasks)).tasks}
        self.last: list[Score] = []  # the scores of the last call, for logging and tests

    def __call__(self, prompts: list, completions: list, **columns: Any) -> list[float | None]:
        config = self.scorer.config
        planned: list[tuple[Task | MathTask, str] | Score] = []
        for i, completion in enumerate(completions):
            text = completion_text(completion)
            if text is None:
                planned.append(refused(f"completion is a {type(completion).__name__} without text"))
            elif "task_id" in columns and self.tasks:
                planned.append(self._named(str(columns["task_id"][i]), text))
            else:
                truth = self._ground_truth(columns, i)
                extra = columns.get("extra_info", [None] * len(completions))[i]
                source = columns["data_source"][i]
                planned.append(sample(source, text, truth, extra, config=config, sources=self.sources))
        pairs = [(i, p) for i, p in enumerate(planned) if not isinstance(p, Score)]
        scores = list(planned)
        for (i, _), score in zip(pairs, self.scorer.score_many([p for _, p in pairs])):
            scores[i] = score
        self.last = scores
        return [score.reward for score in scores]

    def _named(self, task_id: str, text: str) -> tuple[Task | MathTask, str]:
        task = self.tasks.get(task_id)
        if task is None:
            raise DatasetMismatch(
                f"task_id {task_id[:100]!r} is not a task of the tasks file ({len(self.tasks)} tasks)"
            )
        return task, final_answer(text) if kind_of(task) is MATH else text

    @staticmethod
    def _ground_truth(columns: dict[str, Any], i: int) -> Any:
        if "data_source" not in columns:
            raise DatasetMismatch(
                f"the dataset has no data_source column (columns: {sorted(columns)[:12]}): "
                "give it verl's columns, or a task_id column and GymReward(tasks=FILE)"
            )
        if "ground_truth" in columns:
            return columns["ground_truth"][i]
        model = columns.get("reward_model", [None] * (i + 1))[i]
        if not isinstance(model, dict) or "ground_truth" not in model:
            raise DatasetMismatch("a row has neither a ground_truth column nor reward_model.ground_truth")
        return model["ground_truth"]
