"""Nemotron-RL / NeMo-Gym coding rows (stdin/stdout).

Row shape::

    {"responses_create_params": {"input": [{"role": "user", "content": PROMPT}, ...]},
     "verifier_metadata": {"unit_tests": {"inputs": [str, ...], "outputs": [str, ...]}},
     "hash_id": ..., "dataset": ..., "source": ...}

``content`` may also be a list of content parts (``{"type": "input_text",
"text": ...}``); ``unit_tests`` may be a JSON string. The format carries no
limits and no reference solutions.
"""

from __future__ import annotations

from typing import Any

from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import StdinTest, Task


def looks_like(row: dict[str, Any]) -> bool:
    return "responses_create_params" in row and "verifier_metadata" in row


def _text(content: Any, path: str) -> str:
    if isinstance(content, str):
        return content
    parts = [part.get("text") for part in content if isinstance(part, dict)] if isinstance(content, list) else []
    if not parts or not all(isinstance(part, str) for part in parts):
        raise MalformedRow(f"{path} has no text parts")
    return "\n".join(parts)


def _prompt(row: dict[str, Any]) -> str:
    """The statement: ``input`` as one string (the Responses API allows it), or the text of its system,
    developer and user messages in order (a system message first must not stand in for the problem)."""
    given = field.get(row, "responses_create_params.input", (str, list))
    if isinstance(given, str):
        return given
    texts = [
        _text(message.get("content"), f"responses_create_params.input.{n}.content")
        for n, message in enumerate(given)
        if isinstance(message, dict) and message.get("role", "user") in ("system", "developer", "user")
    ]
    if not texts:
        raise MalformedRow("responses_create_params.input has no system or user message")
    return "\n\n".join(texts)


def parse(index: int, row: dict[str, Any], name: str = "nemotron") -> Task:
    unit_tests = field.decoded(field.get(row, "verifier_metadata.unit_tests", (dict, str)), "unit_tests")
    if not isinstance(unit_tests, dict):
        raise MalformedRow("verifier_metadata.unit_tests is not an object")
    inputs = field.text_list(unit_tests.get("inputs"), "unit_tests.inputs")
    outputs = field.text_list(unit_tests.get("outputs"), "unit_tests.outputs")
    if len(inputs) != len(outputs):
        raise MalformedRow(f"unit_tests has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise MalformedRow("unit_tests is empty")
    return Task(
        task_id=field.task_id(row, ("task_id", "id", "hash_id", "verifier_metadata.problem_id"), index),
        source_format="nemotron",
        kind="stdin",
        prompt=_prompt(row),
        tests=tuple(StdinTest(input=i, output=o) for i, o in zip(inputs, outputs)),
    )
