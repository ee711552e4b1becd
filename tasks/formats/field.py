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


def decoded(value: Any, path: str) -> Any:
    """A field that datasets publish either as a JSON string or as the decoded value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise MalformedRow(f"field {path!r} is not valid JSON: {err}") from err
    return value


def text(value: Any, path: str) -> str:
    """A test input/output given as a string or as a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value) + ("\n" if value else "")
    raise MalformedRow(f"{path} is a {type(value).__name__}, expected a string or a list of lines")


def string_list(value: Any, path: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedRow(f"field {path!r} must be a list of strings")
    return value


def task_id(row: dict[str, Any], keys: tuple[str, ...], index: int) -> str:
    """The row's own id from the first present key, else its index."""
    for key in keys:
        value = get(row, key, (str, int), None)
        if value is not None and str(value) != "":
            return str(value)
    return str(index)


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


def memory_bytes(value: Any, path: str) -> int | None:
    """A memory limit as bytes (int) or a phrase like ``"256 megabytes"``; None if absent."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bool):
        raise MalformedRow(f"field {path!r} is a bool, expected a memory limit")
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        unit = match.group(2).lower() if match else None
        if match and unit in _BYTES:
            result = int(float(match.group(1)) * _BYTES[unit])
            return result if result > 0 else None
    raise MalformedRow(f"field {path!r} = {value!r} is not a memory limit")
