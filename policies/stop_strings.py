"""A completion's text as its tokens arrive: decoded incrementally, cut at a `stop` string, released in pieces.

`TextWatch` sees one sampled token at a time (on the engine's thread while a row decodes, or after the fact for
an engine that hands whole completions) and keeps three things right at every step:

- the text: each token's text is the difference between decoding a short window of recent tokens with and
  without it (TGI's and vLLM's incremental detokenizer), so a character split over several byte tokens appears
  once it is whole, and decoding costs a few tokens a step, not the whole completion;
- the stop: once the text holds a `stop` string, the completion ends at that token (``stopped``), the text is
  cut before the string (OpenAI's rule), the token ids keep every sampled token (the one that completed the
  string included, as vLLM returns them);
- the pieces a stream may send: text that could still be the beginning of a stop string is held back until the
  next token says it is not (no partial stop string ever reaches a client), and tokens the chat format ends a
  turn with (``silent``) add no text.

Each released `Piece` holds its tokens, their logprobs and the text they made final; the pieces joined are the
whole completion, text and tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WINDOW = 6  # tokens decoded before the new one: enough context for a tokenizer's spacing rules
MAX_PENDING = 8
"""Tokens a character may stay split over (UTF-8 has at most 4 bytes a character): past it the text is taken with
its replacement character, so bytes that never form a character cannot make every step decode a growing window."""

Decode = Callable[[Sequence[int]], str]


@dataclass
class Piece:
    """What one step made final: its tokens (with their logprobs) and the text they released."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""


class TextWatch:
    """Watches one row's tokens (module docstring). ``sink`` receives each released `Piece` (on the caller's
    thread); `__call__` says whether the row must stop there."""

    def __init__(
        self,
        decode: Decode,
        stops: Sequence[str] = (),
        silent: frozenset[int] = frozenset(),
        sink: Callable[[Piece], None] | None = None,
    ) -> None:
        self.decode = decode
        self.stops = tuple(stops)
        self.longest = max(map(len, self.stops), default=0)
        self._firsts = frozenset(stop[0] for stop in self.stops)  # where a held-back tail can start
        self.silent = silent
        self.sink = sink
        self.tokens: list[int] = []
        self.text = ""  # decoded so far (cut before the stop string once stopped)
        self.released = 0  # characters of `text` handed to the sink
        self.stopped_at: int | None = None  # index of the token that completed a stop string
        self.stop_reason: str | None = None  # that stop string
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens whose text is in `text`
        self._pending = Piece()

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    def __call__(self, token: int, logprob: float = 0.0) -> bool:
        """Take the next sampled token; True when a stop string is complete (the row ends with this token).
        Tokens after a stop are ignored."""
        if self.stopped:
            return True
        self.tokens.append(token)
        self._pending.tokens.append(token)
        self._pending.logprobs.append(logprob)
        if token not in self.silent:
            self._decode_new()
        if self.stops:
            self._find_stop()
        self._release(final=self.stopped)
        return self.stopped

    def finish(self) -> None:
        """The row ended (stop token, length): decode and release everything held back."""
        if not self.stopped and self._read < len(self.tokens):
            window = [t for t in self.tokens[self._prefix :] if t not in self.silent]
            before = [t for t in self.tokens[self._prefix : self._read] if t not in self.silent]
            self.text += _after(self.decode(window), self.decode(before))
            self._prefix = self._read = len(self.tokens)
        self._release(final=True)

    def _decode_new(self) -> None:
        window = [t for t in self.tokens[self._prefix :] if t not in self.silent]
        before = [t for t in self.tokens[self._prefix : self._read] if t not in self.silent]
        new, old = self.decode(window), self.decode(before)
        whole = not new.endswith("\ufffd") or len(self.tokens) - self._read > MAX_PENDING
        if len(new) > len(old) and whole:  # a character still split over tokens waits
            self.text += _after(new, old)
            self._read = len(self.tokens)
            self._prefix = max(0, self._read - WINDOW)

    def _find_stop(self) -> None:
        # only a string ending in the text this token added can be new: look at the tail that could hold one
        tail_start = max(0, self.released - self.longest)
        found = [(at, stop) for stop in self.stops if (at := self.text.find(stop, tail_start)) >= 0]
        if found:
            at, stop = min(found)
            self.text = self.text[:at]
            self.stopped_at = len(self.tokens) - 1
            self.stop_reason = stop

    def _release(self, final: bool) -> None:
        """Hand the sink the tokens taken since the last piece and the text that can no longer be the start of a
        stop string (all of it when ``final``)."""
        safe = len(self.text) if final else len(self.text) - self._held_back()
        piece, self._pending = self._pending, Piece()
        piece.text = self.text[self.released : max(safe, self.released)]
        self.released = max(safe, self.released)
        if self.sink is not None and (piece.tokens or piece.text):
            self.sink(piece)

    def _held_back(self) -> int:
        """Characters at the end of the text that begin some stop string (they wait for the next token); only the
        positions holding a stop's first character are tried (a step costs a few comparisons, not 255 of them)."""
        tail = self.text[len(self.text) - min(self.longest - 1, len(self.text)) :]
        for start, character in enumerate(tail):
            if character in self._firsts and any(stop.startswith(tail[start:]) for stop in self.stops):
                return len(tail) - start
        return 0


def _after(new: str, old: str) -> str:
    """The text ``new`` adds to ``old`` (a decode of the same tokens plus more)."""
    return new[len(old) :] if new.startswith(old) else new[len(_common(new, old)) :]


def _common(a: str, b: str) -> str:
    size = 0
    for x, y in zip(a, b):
        if x != y:
            break
        size += 1
    return a[:size]
