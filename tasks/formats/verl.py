"""verl's RL parquet rows (code and math), and the routing of a verl ``data_source`` to a task kind.

Row shape, as verl's ``examples/data_preprocess`` scripts and PRIME-style code sets write it::

    {"data_source": "openai/gsm8k", "ability": "math",
     "prompt": [{"role": "user", "content": "..."}],
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {"split": "train", "index": 0, ...}}

The ground truth of a code row is a JSON string (or the decoded object) ``{"inputs": [...], "outputs":
[...], "fn_name"?: str}``: TACO/APPS ``input_output`` (`tasks.formats.taco` reads it, so stdin and call tasks and
APPS's wrapped outputs behave the same); that of a math row is the gold answer (``72``, ``\\frac{1}{2}``).
Which it is comes from ``data_source`` as verl's ``default_compute_score`` routes it (`kind_of`), else from
``ability``. The reward adapter (`gym.integrations.verl`) builds its tasks with `code_task` and `math_task`,
so a row graded in a rollout and a sample graded through verl's reward hook are the same task.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from tasks.errors import MalformedRow
from tasks.formats import field, taco
from tasks.math import problem
from tasks.math.problem import MathTask
from tasks.task import Task

Kind = Literal["code", "math"]

# verl's default_compute_score: these sources are math (gsm8k's #### answers, MATH's boxed ones, DAPO, PRIME's numina
# sets); ``aime*`` too.
MATH_SOURCES = frozenset(
    {
        "openai/gsm8k",
        "gsm8k",
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "HuggingFaceH4/MATH-500",
        "math_dapo",
        "math",
        "math_dapo_reasoning",
        "numina_aops_forum",
        "numina_synthetic_math",
        "numina_amc_aime",
        "numina_synthetic_amc",
        "numina_cn_k12",
        "numina_olympiads",
    }
)
# verl routes these to prime_code / sandbox_fusion with a TACO-style ground truth.
CODE_SOURCES = frozenset({"codecontests", "apps", "codeforces", "taco"})
MATH_PREFIXES = ("aime",)

# A ground truth longer than this is refused before it is decoded: decoding builds Python objects several
# times its size. TACO's largest published test sets are a few MB.
MAX_GROUND_TRUTH_CHARS = 32 << 20


def kind_of(data_source: str, ability: object = None, sources: dict[str, Kind] | None = None) -> Kind | None:
    """``code`` or ``math`` for a row of ``data_source`` (``sources`` first, then verl's routing), else by its
    ``ability``; None when neither says."""
    if sources and data_source in sources:
        return sources[data_source]
    if data_source in MATH_SOURCES or data_source.startswith(MATH_PREFIXES):
        return "math"
    if data_source in CODE_SOURCES:
        return "code"
    if ability in ("code", "math"):
        return ability
    return None


def looks_like(row: dict[str, Any]) -> bool:
    return "data_source" in row and "reward_model" in row and "prompt" in row


def code_task(task_id: str, prompt: str, ground_truth: Any, limit: int = MAX_GROUND_TRUTH_CHARS) -> Task:
    """The code task of a ground truth ``{"inputs", "outputs", "fn_name"?}`` (JSON text or decoded)."""
    tests = _decoded(ground_truth, limit)
    if not isinstance(tests, dict):
        raise MalformedRow(f"ground_truth is a {type(tests).__name__}, expected an object with inputs and outputs")
    if "inputs" not in tests or "outputs" not in tests:
        raise MalformedRow(f"ground_truth has no inputs/outputs (keys: {sorted(map(str, tests))[:8]})")
    try:
        task = taco.parse(0, {"question": prompt, "input_output": tests, "task_id": task_id}, "taco")
    except MalformedRow as err:
        raise MalformedRow(f"ground_truth: {err}") from None
    return task.model_copy(update={"source_format": "verl"})


def math_task(task_id: str, prompt: str, ground_truth: Any, limit: int = MAX_GROUND_TRUTH_CHARS) -> MathTask:
    """The math task whose gold is ``ground_truth`` (a string or a number, as written)."""
    if isinstance(ground_truth, str) and len(ground_truth) > limit:
        raise MalformedRow(f"ground_truth of {len(ground_truth)} characters (at most {limit})")
    if not isinstance(ground_truth, (str, int, float)):
        raise MalformedRow(f"ground_truth is a {type(ground_truth).__name__}, expected the gold answer")
    try:
        return problem.parse(0, {"problem": prompt, "answer": ground_truth, "id": task_id}, "plain")
    except MalformedRow as err:
        raise MalformedRow(f"ground_truth: {err}") from None


def prompt_text(prompt: Any) -> str:
    """The text of a row's ``prompt``: a string, or the system and user messages of a chat, in order."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list):
        raise MalformedRow(f"prompt is a {type(prompt).__name__}, expected a list of chat messages")
    texts = [
        message.get("content")
        for message in prompt
        if isinstance(message, dict) and message.get("role", "user") in ("system", "user")
    ]
    if not texts or not all(isinstance(text, str) for text in texts):
        raise MalformedRow("prompt has no system or user message with text content")
    return "\n\n".join(texts)


def parse(index: int, row: dict[str, Any], name: str = "verl") -> Task | MathTask:
    data_source = field.get(row, "data_source", str)
    ability = row.get("ability")
    kind = kind_of(data_source, ability)
    if kind is None:
        raise MalformedRow(
            f"data_source {data_source[:100]!r} (ability {str(ability)[:40]!r}) is neither a code nor a math source: "
            f"known code sources {sorted(CODE_SOURCES)}, math sources as verl routes them, or ability code/math"
        )
    ground_truth = field.get(row, "reward_model.ground_truth", (str, int, float, dict))
    task_id = field.task_id(row, ("task_id", "id", "extra_info.index"), index)
    prompt = prompt_text(row.get("prompt"))
    if kind == "code":
        return code_task(task_id, prompt, ground_truth)
    return math_task(task_id, prompt, ground_truth)


def _decoded(ground_truth: Any, limit: int) -> Any:
    """A code ground truth decoded once, its length checked before anything is built from it."""
    if isinstance(ground_truth, (dict, list)):
        return ground_truth
    if not isinstance(ground_truth, str):
        raise MalformedRow(f"ground_truth is a {type(ground_truth).__name__}, expected JSON text")
    if len(ground_truth) > limit:
        raise MalformedRow(f"ground_truth of {len(ground_truth)} characters (at most {limit})")
    try:
        return json.loads(ground_truth)
    except json.JSONDecodeError as err:
        raise MalformedRow(f"ground_truth is not valid JSON: {err}") from None
    except RecursionError:
        raise MalformedRow("ground_truth is nested too deeply") from None
