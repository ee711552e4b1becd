"""Comparing a candidate's output with the expected output, on the host.

* stdout (`outputs_match`): whitespace-normalised token compare. An integer
  expected token needs an integer token, compared exactly as digits (any
  length: no conversion, so no digit limit; `+7`, `007` and `7` are equal,
  `-0` and `0` too); `1000000020.0` never passes for `1000000007`. When the
  expected token is a decimal/exponent number, an integer or decimal answer
  is read as a float and compared with the absolute/relative tolerance;
  anything else compares as text, case-sensitive. A task graded with a
  float tolerance (`graded_as_floats`: one of its expected outputs holds a
  decimal number) compares numbers as numbers everywhere (`Tolerance.numbers`):
  an expected `1` then accepts `1.0` or `0.9999999`, as a tolerant checker
  does; two integer tokens still compare exactly as digits.
* call results (`values_match`): decoded plain values against the dataset's
  JSON value, with type checks: a bool matches only a bool; an expected int
  needs an int (a float or a bool is wrong); an expected float accepts an int
  or a float within tolerance (NaN matches NaN); an expected list accepts a
  list or a tuple (JSON has no tuples); an expected dict needs a dict whose
  keys, written as JSON writes them, match; sets and other types never match
  a JSON value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_INTEGER = re.compile(r"[+-]?\d+\Z")
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


class Tolerance(BaseModel):
    """Float tolerance of output comparison: ``|a - e| <= max(abs_tol, rel_tol * |e|)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    abs_tol: float = Field(1e-6, ge=0, description="absolute tolerance")
    rel_tol: float = Field(1e-6, ge=0, description="relative tolerance (of the expected value)")
    numbers: bool = Field(
        False,
        description="an integer expected value accepts a decimal within tolerance too (set per task by the grader "
        "for a task graded with a float tolerance: see graded_as_floats)",
    )

    def close(self, actual: float, expected: float) -> bool:
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        if math.isinf(expected) or math.isinf(actual):
            return actual == expected
        return abs(actual - expected) <= max(self.abs_tol, self.rel_tol * abs(expected))


def _integer_digits(token: str) -> tuple[bool, str]:
    """``(negative, digits)`` of an integer token without leading zeros (``-0`` is ``0``)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return token.startswith("-") and digits != "0", digits


def _tokens_match(actual: str, expected: str, tolerance: Tolerance) -> bool:
    if actual == expected:
        return True
    if _INTEGER.match(expected) and (
        _INTEGER.match(actual) or not tolerance.numbers or math.isinf(float(expected))  # past a float: digits only
    ):
        return bool(_INTEGER.match(actual)) and _integer_digits(actual) == _integer_digits(expected)
    if _DECIMAL.match(actual) and _DECIMAL.match(expected):
        return tolerance.close(float(actual), float(expected))  # float() of text never raises: inf past the range
    return False


def _is_decimal(token: str) -> bool:
    return bool(_DECIMAL.match(token)) and not _INTEGER.match(token)


def _holds_float(value: Any, depth: int = 0) -> bool:
    if isinstance(value, float):
        return True
    if depth < 32 and isinstance(value, (list, tuple)):
        return any(_holds_float(v, depth + 1) for v in value)
    if depth < 32 and isinstance(value, dict):
        return any(_holds_float(v, depth + 1) for v in value.values())
    return False


def graded_as_floats(outputs: Iterable[str], values: Iterable[Any] = ()) -> bool:
    """Whether a task is graded with a float tolerance: one of its expected stdout outputs holds a decimal
    token, or one of its expected call results a float. Its integers are then compared as numbers too."""
    return any(_is_decimal(token) for output in outputs for token in output.split()) or any(
        _holds_float(value) for value in values
    )


def outputs_match(actual: str, expected: str, tolerance: Tolerance) -> bool:
    """Whether stdout ``actual`` matches ``expected`` token by token."""
    got, want = actual.split(), expected.split()
    return len(got) == len(want) and all(_tokens_match(a, e, tolerance) for a, e in zip(got, want))


def _json_key(key: Any) -> str | None:
    """The string JSON writes for a dict key, or None for a key JSON cannot hold."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return repr(key) if isinstance(key, float) else str(key)
    return None


def values_match(actual: Any, expected: Any, tolerance: Tolerance) -> bool:
    """Whether decoded call result ``actual`` equals JSON value ``expected`` (typed, see module doc)."""
    if isinstance(expected, bool) or expected is None:
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, int):
        if type(actual) is float and tolerance.numbers:  # a task graded with a float tolerance
            try:
                return tolerance.close(actual, float(expected))
            except OverflowError:
                return False
        return type(actual) is int and actual == expected
    if isinstance(expected, float):
        if type(actual) is int:
            try:
                actual = float(actual)
            except OverflowError:
                return False
        return type(actual) is float and tolerance.close(actual, expected)
    if isinstance(expected, str):
        return type(actual) is str and actual == expected
    if isinstance(expected, list):
        return (
            type(actual) in (list, tuple)
            and len(actual) == len(expected)
            and all(values_match(a, e, tolerance) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        if type(actual) is not dict or len(actual) != len(expected):
            return False
        keyed = {_json_key(k): v for k, v in actual.items()}
        if None in keyed or len(keyed) != len(actual) or keyed.keys() != expected.keys():
            return False
        return all(values_match(keyed[k], v, tolerance) for k, v in expected.items())
    return False
