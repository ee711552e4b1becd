"""The shipped row formats: each name and the module that parses its rows (`tasks.loader` reads files with them;
`tasks.families` keeps a plugin from taking one of these names)."""

from __future__ import annotations

from typing import Literal

FormatChoice = Literal["auto", "nemotron", "taco", "apps", "codecontests", "lcb", "humaneval", "mbpp", "math", "verl"]

# format name -> module exposing looks_like(row) and parse(index, row, name)
FORMATS: dict[str, str] = {
    "nemotron": "tasks.formats.nemotron",
    "taco": "tasks.formats.taco",
    "apps": "tasks.formats.taco",
    "codecontests": "tasks.formats.codecontests",
    "lcb": "tasks.formats.livecodebench",
    "humaneval": "tasks.formats.humaneval",
    "mbpp": "tasks.formats.mbpp",
    "math": "tasks.math.problem",  # GSM8K, MATH and plain problem/answer rows: MathTask, not Task
    "verl": "tasks.formats.verl",  # verl RL parquet rows: code rows are Task, math rows MathTask
}
