"""Comparing a candidate's output with the expected output, on the host.

* stdout (`outputs_match`): whitespace-normalised token compare. An integer
  expected token needs an integer token, compared exactly as digits (any
  length: no conversion, so no digit limit; an answer's `+7` and `007` match
  an expected `7`, `-0` and `0` match each other); an expected integer
  written with leading zeros or a plus sign (`0011`, `+5`: a code, a binary
  string) is text, matched only by itself; `1000000020.0` never passes for `1000000007`. When the
  expected token is a decimal/exponent number, an integer or decimal answer
  is read as a float and compared with the absolute/relative tolerance;
  anything else compares as text, case-sensitive. A task graded with a
  float tolerance (`graded_as_floats`: one of its expected outputs holds a
  decimal number) compares numbers as numbers everywhere (`Tolerance.numbers`):
  an expected `1` then accepts `1.0` or `0.9999999`, as a tolerant checker
  does; two integer tokens still compare exactly as digits.
* numbers past a float: a float reading holds a token only inside the float
  range. When either token's reading is lost (past ~1.8e308 it is `inf`,
  below ~2.2e-308 it is 0 or subnormal), both are compared by exact decimal
  value, `|a - e| <= max(abs_tol, rel_tol * |e|)` with the tolerances' exact
  values: `1e999` is no answer for a 401-digit `1000...0.5`, and `1e-400`
  is not `2e-400` when `abs_tol` is 0. The exact comparison is bounded
  before any arithmetic: a token whose exponent has more than
  `_EXPONENT_DIGITS` digits matches only as the same text, and when the two
  tokens' digits span more than `_EXACT_DIGITS` decimal places only the same
  value matches (`1.50e400` and `15e399` are one value). `inf` and `nan`
  are words, not numbers: they match only as text.
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
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, Overflow, Underflow
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Possessive quantifiers: the candidate writes the token, and backtracking `\d+\.?\d*` is quadratic in a digit
# run that ends in a letter (20,000 digits: seconds); these match in one pass.
_INTEGER = re.compile(r"[+-]?+\d++\Z")
_DECIMAL = re.compile(r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+\Z")
_EXPONENT_DIGITS = 15  # longest exponent read as a number: Decimal holds exponents up to 10**18
_EXACT_DIGITS = 100_000  # widest exact comparison, in decimal places: a few milliseconds of Decimal arithmetic


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
    if _INTEGER.match(expected) and _integer_digits(expected)[1] != expected.lstrip("-"):
        return False  # an expected integer written otherwise than canonically ("0011", "+5") is text: a code or a
        # binary string, whose leading zeros the answer must write too (a canonical "7" still accepts "007")
    if _INTEGER.match(expected) and (
        _INTEGER.match(actual) or not tolerance.numbers or math.isinf(float(expected))  # past a float: digits only
    ):
        return bool(_INTEGER.match(actual)) and _integer_digits(actual) == _integer_digits(expected)
    if _DECIMAL.match(actual) and _DECIMAL.match(expected):
        return _decimals_close(actual, expected, tolerance)
    return False


@dataclass(frozen=True)
class _Exact:
    """A decimal token's exact value, ``(-1)**negative * int(digits) * 10**exponent``, written one way only:
    ``digits`` has no leading or trailing zero (zero is ``("", 0)``, never negative)."""

    negative: bool
    digits: str
    exponent: int

    @classmethod
    def read(cls, token: str) -> _Exact | None:
        """The value of a `_DECIMAL` token, or None when its exponent is too long to read (`_EXPONENT_DIGITS`)."""
        mantissa, _, exponent_text = token.replace("E", "e").partition("e")
        whole, _, fraction = mantissa.lstrip("+-").partition(".")
        significant = (whole + fraction).lstrip("0")
        digits = significant.rstrip("0")
        if not digits:
            return cls(False, "", 0)
        exponent_digits = exponent_text.lstrip("+-").lstrip("0")
        if len(exponent_digits) > _EXPONENT_DIGITS:  # bounded before int(): the text may be a megabyte long
            return None
        exponent = int(exponent_digits or "0") * (-1 if exponent_text.startswith("-") else 1)
        return cls(mantissa.startswith("-"), digits, exponent - len(fraction) + len(significant) - len(digits))

    def decimal(self) -> Decimal:
        return Decimal(f"{'-' if self.negative else ''}{self.digits or '0'}E{self.exponent}")


def _span(*values: _Exact) -> int:
    """Decimal places from the highest digit of ``values`` to the lowest: the precision exact sums of them need."""
    nonzero = [v for v in values if v.digits]
    if not nonzero:
        return 0
    return max(v.exponent + len(v.digits) for v in nonzero) - min(v.exponent for v in nonzero)


def _in_float_range(reading: float, token: str) -> bool:
    """Whether ``float(token)`` kept the token's magnitude: finite, and normal unless the token is zero."""
    if math.isinf(reading):
        return False
    return abs(reading) >= sys.float_info.min or _Exact.read(token) == _Exact(False, "", 0)


def _decimals_close(actual: str, expected: str, tolerance: Tolerance) -> bool:
    """Two number tokens within tolerance: as floats inside the float range, by exact value outside it."""
    a, e = float(actual), float(expected)  # float() of text never raises: inf past the range, 0 below it
    if _in_float_range(a, actual) and _in_float_range(e, expected):
        return tolerance.close(a, e)
    exact_a, exact_e = _Exact.read(actual), _Exact.read(expected)
    if exact_a is None or exact_e is None:
        return False  # identical text matched already
    span = _span(exact_a, exact_e)
    if span > _EXACT_DIGITS:
        return exact_a == exact_e
    rel_tol, abs_tol = Decimal(tolerance.rel_tol), Decimal(tolerance.abs_tol)  # a float's exact value
    # Precision enough for the difference (span + 1 for a carry) and the product rel_tol * |e|: nothing rounds,
    # and Inexact traps if it did. Exponents stay within 10**15 plus a token's length, far inside Decimal's 10**18.
    digits = span + len(rel_tol.as_tuple().digits) + 2
    context = Context(prec=digits, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Overflow, Underflow])
    value_a, value_e = exact_a.decimal(), exact_e.decimal()
    bound = max(abs_tol, context.multiply(rel_tol, value_e.copy_abs()))
    return context.subtract(value_a, value_e).copy_abs() <= bound  # Decimal comparisons are exact


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
