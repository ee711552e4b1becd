"""The tagged value encoding between the in-container driver and the host.

The driver (`tasks/driver.py`) serialises a candidate's value as JSON where
every value is a tagged list, so types JSON would blur survive the trip and
nothing but builtin plain types can be rebuilt on the host::

    ["n"]  None          ["b", true]  bool       ["i", 5]  int       ["f", 1.5 | "nan" | "inf" | "-inf"]  float
    ["ix", "-1f"]  an int past ~4,200 decimal digits, in hexadecimal (decimal text is refused there)
    ["s", "x"]  str      ["y", base64]  bytes    ["c", [re, im]]  complex
    ["l", [..]]  list    ["t", [..]]  tuple      ["S", [..]]  set    ["F", [..]]  frozenset
    ["d", [[k, v], ..]]  dict
    ["I", [..]]  an iterator (a generator, ``map``, ...): the items it yielded, rebuilt as an iterator
    ["T", "int"]  a builtin type
    ["o", true]  split asserts only: a value that is not plain data, of which only its truth value
                 crossed (an `Opaque`: ``assert f(x)`` and ``assert not f(x)`` judge it as Python
                 would; compared, it equals only itself)

The driver refuses every other type (and subclasses of these), so an object
with a rigged ``__eq__`` cannot cross; the exact types ``collections.Counter``,
``OrderedDict`` and ``defaultdict`` cross as the plain dict of their items. The driver's result line is
``<nonce> <json>`` on stdout; the nonce is random per run and passed on
stdin, so stray prints are never taken for the result, and a second line
bearing the nonce means the candidate forged one (the test fails).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any

_HEX = re.compile(r"-?[0-9a-f]+")
_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_TYPES = {
    t.__name__: t
    for t in (type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict, type, object)
}
_TYPES.update({"bytearray": bytearray, "range": range})


class Opaque:
    """A candidate's value that is not plain data (a ``re.Match``, an object with a rigged ``__eq__``): only its
    truth value crossed, which ``return True`` gives as well; it equals nothing but itself."""

    __slots__ = ("truth",)

    def __init__(self, truth: bool) -> None:
        self.truth = truth

    def __bool__(self) -> bool:
        return self.truth

    def __repr__(self) -> str:
        return f"<object that is not plain data, {'truthy' if self.truth else 'falsy'}>"


class EncodingError(Exception):
    """The driver's output is not a well-formed tagged value (forged or corrupted)."""


def _items(payload: Any, tag: str, depth: int) -> list[Any]:
    if not isinstance(payload, list):
        raise EncodingError(f"{tag!r} payload must be a list")
    return [decode(item, depth + 1) for item in payload]


def decode(value: Any, depth: int = 0) -> Any:
    """Rebuild a plain Python value from its tagged form; raises `EncodingError`."""
    if depth > 200:
        raise EncodingError("value nested deeper than 200 levels")
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise EncodingError(f"not a tagged value: {str(value)[:80]}")
    tag, rest = value[0], value[1:]
    if tag == "n" and not rest:
        return None
    if len(rest) != 1:
        raise EncodingError(f"tag {tag!r} needs exactly one payload")
    payload = rest[0]
    if tag == "b" and isinstance(payload, bool):
        return payload
    if tag == "i" and type(payload) is int:
        return payload
    if tag == "ix" and isinstance(payload, str) and _HEX.fullmatch(payload):
        return int(payload, 16)  # linear in its length, which the reply's own bound caps
    if tag == "f" and (type(payload) in (int, float) or payload in _FLOAT_WORDS):
        return _FLOAT_WORDS[payload] if isinstance(payload, str) else float(payload)
    if tag == "s" and isinstance(payload, str):
        return payload
    if tag == "y" and isinstance(payload, str):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as err:
            raise EncodingError("bad base64 in bytes value") from err
    if tag == "c" and isinstance(payload, list) and len(payload) == 2:
        real, imag = (decode(["f", part], depth + 1) for part in payload)
        return complex(real, imag)
    if tag == "l":
        return _items(payload, tag, depth)
    if tag == "I":
        return iter(_items(payload, tag, depth))
    if tag == "T" and isinstance(payload, str) and payload in _TYPES:
        return _TYPES[payload]
    if tag == "o" and isinstance(payload, bool):
        return Opaque(payload)
    if tag == "t":
        return tuple(_items(payload, tag, depth))
    try:
        if tag == "S":
            return set(_items(payload, tag, depth))
        if tag == "F":
            return frozenset(_items(payload, tag, depth))
        if tag == "d" and isinstance(payload, list):
            pairs = [_items(pair, "pair", depth) for pair in payload]
            if any(len(pair) != 2 for pair in pairs):
                raise EncodingError("dict entries must be [key, value] pairs")
            return {k: v for k, v in pairs}
    except TypeError as err:  # an unhashable set element or dict key
        raise EncodingError(f"unhashable element in {tag!r}: {err}") from err
    raise EncodingError(f"unknown tag or bad payload for tag {tag!r}")


@dataclass(frozen=True)
class DriverReport:
    """What the driver reported: a value, several values, completion, an error, or an unserialisable type."""

    kind: str  # "value" | "values" | "error" | "unserialisable" | "verdict" (the checker's)
    payload: Any = None  # decoded value / list of values / error text / type name / {"outcome", "detail"}


def parse_report(stdout: bytes, nonce: str) -> DriverReport | None:
    """The driver's report in ``stdout``, or None when no line carries the nonce.

    Raises `EncodingError` when the report is malformed or more than one line
    carries the nonce (the candidate found it and forged one).
    """
    marker = nonce.encode() + b" "
    lines = [line for line in stdout.split(b"\n") if line.startswith(marker)]
    if not lines:
        return None
    if len(lines) > 1:
        raise EncodingError(f"{len(lines)} result lines carry the nonce: one was forged")
    try:
        report = json.loads(lines[0][len(marker) :])
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise EncodingError(f"result line is not JSON: {err}") from err
    if not isinstance(report, dict) or len(report) != 1:
        raise EncodingError("result must be an object with one key")
    ((kind, payload),) = report.items()
    try:
        if kind == "value":
            return DriverReport("value", decode(payload))
        if kind == "values" and isinstance(payload, list):
            return DriverReport("values", [decode(item) for item in payload])
    except RecursionError as err:
        raise EncodingError("value nested too deeply") from err
    if kind in ("error", "unserialisable") and isinstance(payload, str):
        return DriverReport(kind, payload)
    if kind == "verdict" and isinstance(payload, dict) and isinstance(payload.get("outcome"), str):
        return DriverReport(kind, payload)
    raise EncodingError(f"unknown result kind {kind!r}")
