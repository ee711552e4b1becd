"""The server's bounded JSON parser: a body's shape is measured in its raw bytes before any Python object is built.

`json.loads` builds the whole tree before anyone can look at it, and the tree costs many times the bytes it came
from: a 6 MB body of small arrays is 2 million lists (+647 MiB in an outside review). So `parse` first measures,
with a few vectorised passes over the bytes (numpy; no object per token), what parsing would build:

- values: arrays, objects, strings, numbers and literals, counted as the commas and openers outside strings;
- depth: the deepest nesting of arrays and objects;
- the longest string and the longest number (Python's `int` of a long digit run costs time quadratic in it);

and refuses a body past `JsonBounds` (413 for too many values, 400 for the rest) before parsing it. Only a body
within every bound is decoded (strict UTF-8: `json.loads` would also read UTF-16 and UTF-32 bytes) and parsed,
refusing objects of more than `max_object_members` members (each unknown one would become an error record),
duplicate object keys (parsers disagree on which one wins) and the non-JSON constants NaN and Infinity.
The scan's own temporaries (`scan_bytes`) are freed when it returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

SCAN_BYTES_PER_BYTE, SCAN_BYTES_PER_VALUE = 8, 32
"""Peak temporaries of `measure`: a handful of byte-sized masks of the body at once, and 8-byte positions of its
quotes (two a string) and of its numbers' ends (two a number), each bounded by the values (tracemalloc: 2.0-7.0x
the body for bodies up to 8 MiB, 15x for one of a million one-digit numbers)."""

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_NESTING = np.zeros(256, np.int8)  # +1 opens an array or object, -1 closes one
_NESTING[[ord("["), ord("{")]] = 1
_NESTING[[ord("]"), ord("}")]] = -1
_NUMBER = np.zeros(256, np.bool_)  # the characters of a JSON number (and of the letters of true/false: runs of 1)
_NUMBER[list(b"-+.0123456789eE")] = True
_DEPTH_CHUNK = 1 << 20  # nesting steps summed at a time (int64): 8 MiB of temporaries at most


class BodyRefused(Exception):
    """A body the server refuses before (or while) parsing it: HTTP ``status`` with this message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class JsonBounds:
    """What one JSON request body may hold (`policies.serve_config.ServerOptions` sets them)."""

    max_values: int
    max_depth: int
    max_string_bytes: int
    max_number_chars: int
    max_object_members: int


@dataclass(frozen=True)
class BodyShape:
    """What a body holds, measured in its bytes (`measure`)."""

    size: int  # bytes
    values: int  # an upper bound: commas + array and object openers outside strings, + 1
    depth: int
    strings: int
    longest_string: int  # bytes between its quotes, escapes as written
    longest_number: int  # characters


def measure(body: bytes, bounds: JsonBounds) -> BodyShape:
    """The shape of ``body``; `BodyRefused` as soon as one of ``bounds`` is passed (or a string is not closed)."""
    quote_count = body.count(b'"')  # escaped ones too: bounds the quote array below before it is built
    if quote_count > 2 * bounds.max_values:
        raise BodyRefused(
            413, f"body holds {quote_count} quote characters: more than 2 x max_json_values={bounds.max_values}"
        )
    data = np.frombuffer(body, np.uint8)
    quotes = np.flatnonzero(data == _QUOTE)
    if quotes.size and body.find(b'\\"') >= 0:
        quotes = quotes[~_escaped(data, quotes)]
    if quotes.size % 2:
        raise BodyRefused(400, f"body is not valid JSON: the string opened at byte {int(quotes[-1])} is not closed")
    longest_string = int((quotes[1::2] - quotes[0::2]).max()) - 1 if quotes.size else 0
    outside = np.zeros(data.size, np.uint8)  # 0 outside strings (their quotes count as inside)
    outside[quotes] = 1
    np.bitwise_xor.accumulate(outside, out=outside)
    outside = outside == 0
    values = 1 + sum(int(np.count_nonzero((data == ord(c)) & outside)) for c in ",[{")
    if values > bounds.max_values:
        raise BodyRefused(
            413,
            f"body holds up to {values} JSON values (commas and brackets outside strings): more than "
            f"max_json_values={bounds.max_values}",
        )
    if longest_string > bounds.max_string_bytes:
        raise BodyRefused(
            413,
            f"body holds a string of {longest_string} bytes: more than max_json_string_bytes={bounds.max_string_bytes}",
        )
    depth = _depth(data, outside, bounds.max_depth)
    if depth > bounds.max_depth:
        raise BodyRefused(400, f"body nests arrays and objects deeper than max_json_depth={bounds.max_depth}")
    longest_number = _longest_run(_NUMBER[data] & outside)
    if longest_number > bounds.max_number_chars:
        raise BodyRefused(
            400,
            f"body holds a number of {longest_number} characters: more than max_json_number_chars="
            f"{bounds.max_number_chars}",
        )
    return BodyShape(len(body), values, depth, quotes.size // 2, longest_string, longest_number)


def scan_bytes(size: int, bounds: JsonBounds) -> int:
    """The most memory `measure` holds at once for a body of ``size`` bytes (a value takes at least one)."""
    return SCAN_BYTES_PER_BYTE * size + SCAN_BYTES_PER_VALUE * min(size, bounds.max_values)


def _escaped(data: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which of the ``quotes`` (positions of '"') are escaped: preceded by an odd run of backslashes."""
    backslash = data == _BACKSLASH
    follows = np.zeros(quotes.size, np.bool_)
    after = quotes > 0
    follows[after] = backslash[quotes[after] - 1]
    if not follows.any():
        return follows
    previous = np.empty_like(backslash)
    previous[0] = False
    previous[1:] = backslash[:-1]
    run_starts = np.flatnonzero(backslash & ~previous)
    del previous
    ends = quotes[follows]  # each run of backslashes ends right before its quote
    runs = ends - run_starts[np.searchsorted(run_starts, ends - 1, side="right") - 1]
    escaped = np.zeros(quotes.size, np.bool_)
    escaped[follows] = runs % 2 == 1
    return escaped


def _depth(data: np.ndarray, outside: np.ndarray, bound: int) -> int:
    """The deepest nesting of arrays and objects (outside strings); stops counting once past ``bound``."""
    steps = _NESTING[data]
    steps = steps[(steps != 0) & outside]
    if steps.size <= bound:
        return int(max(0, np.cumsum(steps, dtype=np.int64).max(initial=0)))
    deepest = level = 0
    for start in range(0, steps.size, _DEPTH_CHUNK):
        levels = np.cumsum(steps[start : start + _DEPTH_CHUNK], dtype=np.int64) + level
        deepest, level = max(deepest, int(levels.max())), int(levels[-1])
        if deepest > bound:
            break
    return deepest


def _longest_run(mask: np.ndarray) -> int:
    """The longest run of True in ``mask``."""
    if not mask.any():
        return 0
    edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    return int((np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).max())


def parse(body: bytes, bounds: JsonBounds) -> tuple[object, BodyShape]:
    """The JSON value of ``body`` and its shape; `BodyRefused` (400/413) for a body past ``bounds`` (before parsing
    it) or that is not strict JSON in UTF-8 (duplicate keys, NaN and Infinity included)."""
    shape = measure(body, bounds)
    return load(body, bounds), shape


def load(body: bytes, bounds: JsonBounds) -> object:
    """The JSON value of a body `measure` found within ``bounds``: strict UTF-8, no duplicate keys, no NaN or
    Infinity, at most ``bounds.max_object_members`` members an object (`BodyRefused` 400)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRefused(400, f"body is not UTF-8: byte {exc.start} ({body[exc.start : exc.start + 1]!r})") from None
    try:
        value = json.loads(text, object_pairs_hook=_members(bounds.max_object_members), parse_constant=_no_constant)
    except _TooManyMembers as exc:
        raise BodyRefused(400, str(exc)) from None
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise BodyRefused(400, f"body is not valid JSON: {type(exc).__name__}: {exc}") from None
    return value


class _TooManyMembers(ValueError):
    pass


def _members(bound: int):
    """The parser's hook for each object: at most ``bound`` members (each unknown one would be an error record of
    the request model's), no key twice."""

    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        if len(pairs) > bound:
            raise _TooManyMembers(
                f"an object of the body has {len(pairs)} members: more than max_json_object_members={bound}"
            )
        return _unique_keys(pairs)

    return hook


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object's members, refusing a key given twice (`json.loads` keeps the last, other parsers the first)."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"key {twice[:100]!r} is given twice in one object")
    return members


def _no_constant(name: str) -> float:
    """Python's json reads NaN and Infinity, which JSON has not: `temperature: Infinity` is refused, not sampled."""
    raise ValueError(f"{name} is not a JSON value")
