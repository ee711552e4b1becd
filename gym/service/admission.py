"""What the sandbox service lets in: a budget of requests and memory, bodies read within bounds, and JSON measured
in its bytes before it is parsed.

* `Admission`: every request reserves, before its first byte is read, an estimate of the most memory it can
  hold (its body at most, the objects of its parsed JSON, its reply at most) and one of ``max_requests`` slots;
  past either total it is a 503 (retry later). The reservation is given back when the answer is built.
* `read_body`: a Content-Length past ``max_body_bytes`` is a 413 before anything is read; a body without one is
  read up to that bound (413 past it) within ``read_timeout_s`` (408: a byte a minute holds nothing for long).
* `check_shape`: ``json.loads`` or pydantic's parser builds every value of a body before anyone can look at it,
  and a value costs ~150 bytes against its 2 on the wire (an 11 MiB body of ``[]`` pairs grew a parse by 581 MiB
  here), so the values and the nesting are counted in the raw bytes first, strings skipped whole (413 past
  ``max_values``, 400 past ``max_depth``, 400 for a string that never closes), in one pass: linear in the body's
  size whatever it holds.

The policy server has the same guards, fitted to token requests (policies/admission.py, policies/request_bounds.py);
the gym may not import the policy layer (STYLE.md rule 1, tests/unit/test_layers.py), and this service's
requests are flat objects whose worst case is known from the config, so one reservation per request suffices.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

MIB = 1 << 20
BODY_COPIES = 8
"""Copies of a body a request may hold at once: the bytes read, the strings parsed from them (up to 4 bytes a
character), code and stdin encoded again, files decoded, and the runner frame that carries them (base64)."""
VALUE_BYTES = 160
"""Python objects per JSON value once parsed and validated (measured: 145 B for 4 million empty lists through
pydantic's JSON parser)."""

_QUOTE, _BACKSLASH, _COMMA = b'"\\,'
_OPEN_ARRAY, _OPEN_OBJECT, _CLOSE_ARRAY, _CLOSE_OBJECT = b"[{]}"


class Refused(Exception):
    """A request the service will not take: HTTP ``status`` (400, 408, 413, 503) with this message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Admission:
    """Requests in flight and the memory they may hold, against two totals; thread-safe."""

    def __init__(self, max_requests: int, total_bytes: int) -> None:
        self.max_requests = max_requests
        self.total_bytes = total_bytes
        self.requests = 0
        self.reserved = 0
        self.refused_busy = 0
        self._lock = threading.Lock()

    @contextmanager
    def enter(self, nbytes: int, what: str) -> Iterator[None]:
        """Hold a slot and ``nbytes`` for the block; `Refused` 503 when either total would be passed."""
        with self._lock:
            if self.requests >= self.max_requests:
                self.refused_busy += 1
                raise Refused(503, f"server busy: {self.requests} requests in flight (max_requests); retry later")
            if self.reserved + nbytes > self.total_bytes:
                self.refused_busy += 1
                raise Refused(
                    503,
                    f"server busy: {what} may hold {nbytes / MIB:.1f} MiB and requests in flight hold "
                    f"{self.reserved / MIB:.1f} of {self.total_bytes / MIB:.1f} MiB (max_inflight_memory_bytes); "
                    "retry later",
                )
            self.requests += 1
            self.reserved += nbytes
        try:
            yield
        finally:
            with self._lock:
                self.requests -= 1
                self.reserved -= nbytes

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "reserved_mib": -(-self.reserved // MIB),
                "refused_busy": self.refused_busy,
            }


def declared_size(request: web.Request, limit: int) -> int:
    """The body's size as the client declares it (``limit`` when it does not, or sends it compressed); `Refused`
    413 when that is past ``limit``, before anything is read."""
    length = request.content_length
    encoded = request.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity")
    if length is not None and length > limit:
        raise Refused(413, f"request body of {length} bytes: more than max_body_bytes={limit}")
    return limit if length is None or encoded else length


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The body, at most ``limit`` bytes (413 past it), arriving within ``timeout_s`` (408); 400 when it ends
    before its Content-Length (the client went away)."""
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            while len(body) <= limit:
                chunk = await request.content.read(limit + 1 - len(body))
                if not chunk:
                    break
                body += chunk
    except TimeoutError:
        raise Refused(408, f"request body not received within read_timeout_s={timeout_s:g}") from None
    if len(body) > limit:
        raise Refused(413, f"request body larger than max_body_bytes={limit}")
    plain = request.headers.get("Content-Encoding", "identity").strip().lower() in ("", "identity")
    if plain and request.content_length and len(body) < request.content_length:
        raise Refused(400, f"body ended after {len(body)} of its Content-Length {request.content_length} bytes")
    return bytes(body)


def check_shape(body: bytes, max_values: int, max_depth: int) -> None:
    """`Refused` for a body holding more than ``max_values`` JSON values (413) or nesting arrays and objects deeper
    than ``max_depth`` (400), counted outside strings without parsing it, in time linear in ``len(body)``. A body
    counted byte by byte that ends inside a string is refused too (400: it is not JSON, and what follows its last
    quote cannot be told apart from string); one within both bounds before counting is left to the parser."""
    structural = body.count(b",") + body.count(b"[") + body.count(b"{")
    if structural < max_values and body.count(b"[") + body.count(b"{") <= max_depth:
        return  # even counting the characters inside strings, the body is within both bounds
    # Hand-written, one look at each byte and no going back: a token regex that tries a whole string at each quote
    # rescans the rest of the body from every quote of a string that never closes, O(n^2) (64 kB of \" pairs is
    # 12 s of CPU that way). This loop costs the same per byte whatever the body holds (measured: 1.7 s of CPU for
    # 32 MiB of its slowest byte, `]`; 0.5 s for 32 MiB of \" pairs).
    values, depth = 1, 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte == _OPEN_ARRAY or byte == _OPEN_OBJECT:
            values, depth = values + 1, depth + 1
            if depth > max_depth:
                raise Refused(400, f"body nests arrays and objects deeper than max_json_depth={max_depth}")
            if values > max_values:
                raise Refused(413, f"body holds more than max_json_values={max_values} JSON values")
        elif byte == _CLOSE_ARRAY or byte == _CLOSE_OBJECT:
            depth -= 1
        elif byte == _COMMA:
            values += 1
            if values > max_values:
                raise Refused(413, f"body holds more than max_json_values={max_values} JSON values")
    if in_string:
        raise Refused(400, "body ends inside a string that never closes: it is not JSON")
