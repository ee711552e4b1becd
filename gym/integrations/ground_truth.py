"""A verl-style sample (``data_source``, response, ``ground_truth``, ``extra_info``) as the task and the answer a
`Scorer` grades; the verl and TRL adapters share it.

* The kind comes from ``data_source`` as verl routes it (`tasks.formats.verl.kind_of`), else from
  ``extra_info["ability"]``, else from the caller's ``sources`` table; a source none of them names is
  `UnknownDataSource`, a configuration error raised to the caller (a dataset's sources are fixed: scoring its
  every row 0 would train on nothing, silently).
* Code: the ground truth is TACO's ``input_output`` (`tasks.formats.verl.code_task`); the response is the
  program, or a model answer whose last Python block is (`tasks.submission.extract_code`, in the grader).
* Math: the gold is the ground truth; the answer is what the response boxes (``\\boxed{..}``, ``\\fbox{..}``),
  else what follows ``####`` (GSM8K), else the whole response (`final_answer`). Every box counts, not the last
  alone: two boxes with different values are a hedge, wrong (``\\boxed{71} ... \\boxed{72}``).
* A response or ground truth past its bound, and a malformed ground truth, are refused: scored 0 with the reason
  (`tasks.formats.verl` checks a ground truth's length before decoding it).
"""

from __future__ import annotations

import re
from typing import Any

from gym.integrations.scorer import Score, ScorerConfig, ScorerError, refused
from tasks.errors import MalformedRow
from tasks.families import kind_of
from tasks.formats import verl
from tasks.math.family import MATH
from tasks.math.problem import MathTask
from tasks.task import Task

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####[ \t]*([^\n]*)")


class UnknownDataSource(ScorerError, ValueError):
    """A ``data_source`` that is neither code nor math for this adapter (route it with ``sources``)."""


def boxed(text: str) -> list[str]:
    """The contents of the outermost complete boxes of ``text``, in order (an unclosed box, a truncated reply's, is
    not an answer)."""
    found, start = [], 0
    while match := _BOX.search(text, start):
        depth, end = 0, None
        for i in range(match.end() - 1, len(text)):
            if text[i] == "{" and text[i - 1] != "\\":
                depth += 1
            elif text[i] == "}" and text[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        if end is None:
            break
        found.append(text[match.end() : end])
        start = end + 1
    return found


def final_answer(response: str) -> str:
    """What the math check reads of a whole response (see the module docstring): distinct answers joined by ``;``,
    which the check takes as separate candidates (different values: a hedge)."""
    stated = [box.strip() for box in boxed(response) if box.strip()]
    stated = stated or [mark.strip() for mark in _HASHES.findall(response) if mark.strip()]
    return "; ".join(dict.fromkeys(stated)) if stated else response


def task_of(
    data_source: Any,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    sources: dict[str, verl.Kind] | None = None,
    limit: int = verl.MAX_GROUND_TRUTH_CHARS,
) -> Task | MathTask:
    """The task a sample's ground truth defines; `UnknownDataSource`, or `MalformedRow` for a bad ground truth."""
    extra = extra_info if isinstance(extra_info, dict) else {}
    kind = verl.kind_of(data_source, extra.get("ability"), sources) if isinstance(data_source, str) else None
    if kind is None:
        raise UnknownDataSource(
            f"data_source {str(data_source)[:100]!r} is neither code nor math here: verl's code sources "
            f"{sorted(verl.CODE_SOURCES)} and math sources ({sorted(verl.MATH_SOURCES)[:4]}..., aime*) are; "
            "name others with sources={NAME: 'code' | 'math'} or put ability 'code'/'math' in extra_info"
        )
    task_id = str(extra.get("index", "sample"))[:100]
    if kind == "code":
        return verl.code_task(task_id, "", ground_truth, limit)
    return verl.math_task(task_id, "-", ground_truth, limit)


def sample(
    data_source: Any,
    response: Any,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    config: ScorerConfig,
    sources: dict[str, verl.Kind] | None = None,
) -> tuple[Task | MathTask, str] | Score:
    """``(task, answer)`` to grade, or the refused `Score` of a sample that cannot be graded (0, with the reason)."""
    if not isinstance(response, str):
        return refused(f"response is a {type(response).__name__}, not text")
    if len(response) > config.max_response_chars:
        return refused(f"response of {len(response)} characters (at most {config.max_response_chars} are read)")
    try:
        task = task_of(data_source, ground_truth, extra_info, sources=sources, limit=config.max_ground_truth_chars)
    except MalformedRow as err:
        return refused(str(err))
    except (ValueError, TypeError, RecursionError, MemoryError) as err:  # pydantic validation of odd values
        if isinstance(err, UnknownDataSource):
            raise
        return refused(f"ground_truth: {type(err).__name__}: {err}".splitlines()[0])
    return task, final_answer(response) if kind_of(task) is MATH else response
