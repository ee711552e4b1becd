"""Typed access to dataset-row fields: every failure names the field and becomes a `MalformedRow`."""

from __future__ import annotations

import json
import re
from typing import Any

from tasks.errors import MalformedRow

_MISSING = object()


def get(row: dict[str, Any], path: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
    """The value at dotted ``path`` (``a.b.0.c``), checked to be of ``kind``."""
    value: Any = row
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            if default is not _MISSING:
                return default
            raise MalformedRow(f"missing field {path!r}")
    if value is None and default is not _MISSING:
        return default
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise MalformedRow(f"field {path!r} is a {type(value).__name__}, expected {names}")
    return value


# Re-exports sometimes JSON-encode a field that already was a JSON string ("\"{\\\"inputs\\\": ...}\""):
# a decoded string that is itself a JSON object or array is decoded again, this many times at most.
_MAX_ENCODINGS = 3


def decoded(value: Any, path: str) -> Any:
    """A field that datasets publish either as a JSON string (once or twice encoded) or as the decoded value."""
    for _ in range(_MAX_ENCODINGS):
        if not isinstance(value, str):
            return value
        try:
            inner = json.loads(value)
        except json.JSONDecodeError as err:
            raise MalformedRow(f"field {path!r} is not valid JSON: {err}") from err
        if not (isinstance(inner, str) and inner.lstrip()[:1] in ("{", "[")):
            return inner
        value = inner
    raise MalformedRow(f"field {path!r} is JSON-encoded more than {_MAX_ENCODINGS} times")


def text(value: Any, path: str) -> str:
    """A test input/output given as a string or as a list of lines (a bare number is refused: is 2.50 "2.5"?)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value) + ("\n" if value else "")
    raise MalformedRow(f"{path} is a {type(value).__name__}, expected a string or a list of lines")


def string_list(value: Any, path: str) -> list[str]:
    """A list of strings, given as such or as a JSON string of one."""
    value = decoded(value, path)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedRow(f"field {path!r} must be a list of strings")
    return value


def text_list(value: Any, path: str) -> list[str]:
    """Test inputs or outputs: a list (or a JSON string of one) whose items `text` reads."""
    value = decoded(value, path)
    if not isinstance(value, list):
        raise MalformedRow(f"field {path!r} must be a list of strings")
    return [text(item, f"{path}[{n}]") for n, item in enumerate(value)]


def task_id(row: dict[str, Any], keys: tuple[str, ...], index: int) -> str:
    """The row's own id from the first present key, else its index."""
    for key in keys:
        value = get(row, key, (str, int, float), None)
        if isinstance(value, bool):
            raise MalformedRow(f"field {key!r} is a bool, expected a str or int id")
        if isinstance(value, float):  # a numeric id read back through a float column (pandas, parquet with nulls)
            if not value.is_integer():
                raise MalformedRow(f"field {key!r} = {value!r} is not a usable id")
            value = int(value)
        if value is not None and str(value) != "":
            return str(value)
    return str(index)


def number(value: Any, path: str) -> float:
    """A number given as a JSON number or a numeric string (``"2"``); never a bool."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise MalformedRow(f"field {path!r} = {value!r} is not a number") from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value
        in (
            float("inf"),
            float("-inf"),
        )
    ):
        raise MalformedRow(f"field {path!r} = {value!r} is not a finite number")
    return value


_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)")
_SECONDS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "millisecond": 1e-3,
    "milliseconds": 1e-3,
}
_BYTES = {
    "": 1 << 20,
    "mb": 1 << 20,
    "megabyte": 1 << 20,
    "megabytes": 1 << 20,
    "mib": 1 << 20,
    "kb": 1 << 10,
    "kilobytes": 1 << 10,
    "gb": 1 << 30,
    "gigabyte": 1 << 30,
    "gigabytes": 1 << 30,
    "bytes": 1,
    "byte": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
}


def seconds(value: Any, path: str) -> float | None:
    """A time limit given as a number of seconds or a phrase like ``"2 seconds"``; None if absent."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bool):
        raise MalformedRow(f"field {path!r} is a bool, expected a time limit")
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        unit = match.group(2).lower() if match else None
        if match and unit in _SECONDS:
            result = float(match.group(1)) * _SECONDS[unit]
            return result if result > 0 else None
    raise MalformedRow(f"field {path!r} = {value!r} is not a time limit")


def memory_bytes(value: Any, path: str, bare_unit: int = 1 << 20) -> int | None:
    """A memory limit as bytes (int) or a phrase like ``"256 megabytes"``; None if absent.

    A string without a unit (``"256"``) counts in ``bare_unit``: megabytes for a ``memory_limit``,
    bytes for a field whose name says bytes (``memory_limit_bytes``)."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bool):
        raise MalformedRow(f"field {path!r} is a bool, expected a memory limit")
    if isinstance(value, float) and value.is_integer():  # a float column
        value = int(value)
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        unit = match.group(2).lower() if match else None
        if match and unit in _BYTES:
            result = int(float(match.group(1)) * (_BYTES[unit] if unit else bare_unit))
            return result if result > 0 else None
    raise MalformedRow(f"field {path!r} = {value!r} is not a memory limit")
