"""verl reward functions over the gym's graders: ``compute_score`` and its batch form ``compute_score_batch``.

verl calls them as it calls ``verl.utils.reward_score.default_compute_score`` (its naive reward loop, one sample a
call, from executor threads) and as its ``batch`` reward manager calls a batch function (lists of
``data_sources, solution_strs, ground_truths, extra_infos``)::

    reward:
      custom_reward_function:
        path: pkg://gym.integrations.verl          # or the file: gym/integrations/verl.py
        name: compute_score                        # compute_score_batch with reward_manager.name=batch
        reward_kwargs: {config: scorer.yaml, sources: {my_code_set: code}}   # both optional

Each sample is routed and read as `gym.integrations.ground_truth` says (code in a fresh Docker sandbox, math by
the math check) and scored as a dict: ``score`` (the reward), ``acc`` (1.0 passed, else 0.0), ``fraction`` (of
tests passed), ``masked``, ``verdict`` and ``reason``; verl keeps every key in ``reward_extra_info``.

What verl gets, case by case:

* a wrong, forged or hedged answer, a malformed ground truth, an oversized response or ground truth: ``score`` 0.0
  with the reason (logged), never an exception;
* a ``data_source`` neither verl's routing, ``extra_info["ability"]`` nor ``sources`` names: `UnknownDataSource`
  (a ValueError) on the first batch, as verl's own ``default_compute_score`` raises NotImplementedError;
* a sample the sandbox or host failed to grade, ``infra_retries`` times over (`ScorerConfig`): verl has no
  per-sample mask a reward function can set, and a 0 would teach the policy that its answer was wrong, so by
  default (``on_infra_error: raise``) the call raises `SandboxUnavailable` naming the samples and the cause, and
  the step stops (resume from its checkpoint). ``on_infra_error: zero`` scores them 0.0 with ``masked`` True
  instead, for runs that would rather go on; count them in ``reward_extra_info``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from gym.integrations.ground_truth import sample
from gym.integrations.scorer import SandboxUnavailable, Score, shared_scorer
from tasks.formats.verl import Kind

log = logging.getLogger(__name__)

InfraPolicy = Literal["raise", "zero"]
# verl's reward loop adds these when a reward model router is configured; nothing here reads them.
VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

scorer = shared_scorer  # the process's scorer for a config path (tests put a fake here)


def compute_score(
    data_source: Any,
    solution_str: Any,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    config: str | Path | None = None,
    sources: dict[str, Kind] | None = None,
    on_infra_error: InfraPolicy = "raise",
    **kwargs: Any,
) -> dict[str, Any]:
    """The score of one sample (see the module docstring)."""
    return compute_score_batch(
        [data_source], [solution_str], [ground_truth], [extra_info],
        config=config, sources=sources, on_infra_error=on_infra_error, **kwargs,
    )[0]  # fmt: skip


def compute_score_batch(
    data_sources: Any,
    solution_strs: Any,
    ground_truths: Any,
    extra_infos: Any = None,
    *,
    config: str | Path | None = None,
    sources: dict[str, Kind] | None = None,
    on_infra_error: InfraPolicy = "raise",
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The scores of a batch, in order; its programs graded concurrently, ``concurrency`` sandboxes at once."""
    unknown = set(kwargs) - VERL_KWARGS
    if unknown:
        raise TypeError(f"compute_score got unknown keyword arguments {sorted(unknown)} (reward_kwargs?)")
    if on_infra_error not in ("raise", "zero"):
        raise ValueError(f"on_infra_error must be 'raise' or 'zero', not {on_infra_error!r}")
    service = scorer(config)
    n = len(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * n
    if not len(data_sources) == len(ground_truths) == len(extras) == n:
        raise ValueError(
            f"batch lists differ in length: {len(data_sources)} data_sources, {n} solution_strs, "
            f"{len(ground_truths)} ground_truths, {len(extras)} extra_infos"
        )
    samples = [
        sample(source, response, truth, extra, config=service.config, sources=sources)
        for source, response, truth, extra in zip(data_sources, solution_strs, ground_truths, extras)
    ]
    pairs = [(i, s) for i, s in enumerate(samples) if not isinstance(s, Score)]
    graded = service.score_many([pair for _, pair in pairs])
    scores = list(samples)
    for (i, _), score in zip(pairs, graded):
        scores[i] = score
    masked = [i for i, score in enumerate(scores) if score.masked]
    if masked and on_infra_error == "raise":
        first = scores[masked[0]]
        raise SandboxUnavailable(
            f"{len(masked)} of {n} samples could not be graded (the sandbox or host failed, "
            f"{service.config.infra_retries} retries each; on_infra_error='zero' scores them 0.0 instead): "
            f"sample {masked[0]}: {first.reason}"
        )
    return [as_verl(score) for score in scores]


def as_verl(score: Score) -> dict[str, Any]:
    """A `Score` as verl's reward managers read a dict result: ``score`` is the reward, every key is extra info."""
    return {
        "score": 0.0 if score.masked else score.reward,
        "acc": float(score.passed),
        "fraction": score.fraction,
        "masked": score.masked,
        "verdict": score.verdict,
        "reason": score.reason,
    }
