"""The Harmony format at the token level: canonical rendering and strict parsing.

Rendering (one canonical token sequence per list of messages)::

    <|start|>{role}<|channel|>{channel}<|message|>{content}<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}<|call|>
    <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{output}<|end|>
    <|start|>assistant<|channel|>final<|message|>{answer}<|return|>

Choices, where Harmony leaves room:

- an assistant's recipient goes after the channel (as gpt-oss samples it);
  any other author's recipient goes after the role (``functions.x to=assistant``);
- a final answer ends with ``<|return|>`` when it is the last message of the
  conversation and with ``<|end|>`` before later messages (openai-harmony's
  rendering of a prior final in history; in a trajectory the final is last);
- text pieces are encoded separately: the role text, the header text after
  ``<|channel|>`` (channel, ``to=``, and the space before ``<|constrain|>``),
  the content type after ``<|constrain|>``, then the content. So the
  generation prompt ``<|start|>assistant`` is an exact prefix of the
  rendering of every assistant message.

Parsing reads token ids: structure comes only from special-token ids, and the
tokenizer never produces those from text, so text such as ``"<|call|>"`` in a
tool output or in sampled content stays text. ``parse_completion`` is strict
about what a policy samples after the generation prompt and returns a
:class:`ParsedTurn` or a :class:`ParseError` (with the offending token span),
never raising.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from gym.format.message import CHANNELS, Message, ToolCall
from gym.format.prompt import ToolSpec
from gym.format.tokenizer import HARMONY_SPECIALS, Tokenizer
from gym.format.turn import ParsedTurn, ParseError, Stop

__all__ = ["Harmony", "ParseError", "ParsedTurn", "Stop"]

_TERMINATORS = ("end", "call", "return")


class _Failure(Exception):
    """Internal: aborts a parse; converted to ParseError before leaving this module."""

    def __init__(self, reason: str, start: int, end: int) -> None:
        super().__init__(reason)
        self.error = ParseError(reason=reason, start=start, end=max(end, start + 1))


class Harmony:
    """Renders messages to token ids and parses token ids back, for one tokenizer (a `ChatFormat`)."""

    name = "harmony"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids = {name: tokenizer.special(name) for name in HARMONY_SPECIALS}
        self._names = {token: name for name, token in self.ids.items()}
        self._prompt = [self.ids["start"], *tokenizer.encode("assistant")]

    # -- rendering --------------------------------------------------------

    def generation_prompt(self) -> list[int]:
        """``<|start|>assistant``: what precedes every sampled assistant turn."""
        return list(self._prompt)

    def stop_ids(self) -> list[int]:
        """Ids that end sampling: ``<|call|>`` and ``<|return|>`` (sampling goes on past ``<|end|>``)."""
        return [self.ids["call"], self.ids["return"]]

    def bind(self, tools: Sequence[ToolSpec]) -> Harmony:
        """Itself: Harmony's tools are written into the developer message (`gym.format.prompt`), not bound."""
        return self

    def resume(self, sampled: Sequence[int]) -> list[int]:
        """What precedes the next sampled turn after ``sampled`` led to no tool result: ``<|start|>assistant``."""
        return list(self._prompt)

    def render_observation(self, message: Message) -> list[int]:
        """A tool result appended after a sampled turn (``<|end|>``-terminated, as in history)."""
        return self.render_message(message, last=False)

    def render_message(self, message: Message, *, last: bool = True) -> list[int]:
        """Canonical ids of one message; ``last`` picks ``<|return|>`` over ``<|end|>`` for a final."""
        encode, ids = self.tokenizer.encode, self.ids
        assistant = message.role == "assistant"
        role = message.name if message.role == "tool" else message.role
        if message.recipient and not assistant:
            role += f" to={message.recipient}"
        constrained = assistant and message.recipient is not None and message.content_type is not None
        out = [ids["start"], *encode(role)]
        if message.channel is not None:
            header = message.channel + (f" to={message.recipient}" if assistant and message.recipient else "")
            if message.content_type and not constrained:
                header += f" {message.content_type}"
            out += [ids["channel"], *encode(header + (" " if constrained else ""))]
        elif message.content_type:
            out += encode(f" {message.content_type}")
        if constrained:
            out += [ids["constrain"], *encode(message.content_type or "")]
        out += [ids["message"], *encode(message.content), ids[_terminator(message, last)]]
        return out

    def render(self, messages: Sequence[Message]) -> list[int]:
        """Canonical ids of a conversation (a final answer that is last ends with ``<|return|>``)."""
        out: list[int] = []
        for index, message in enumerate(messages):
            out += self.render_message(message, last=index == len(messages) - 1)
        return out

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        """The conversation followed by the generation prompt: what the policy continues."""
        return self.render(messages) + self._prompt

    def render_completion(self, messages: Sequence[Message]) -> list[int]:
        """The ids a policy samples for ``messages`` (assistant ones) after the generation prompt."""
        rendered = self.render(messages)
        if rendered[: len(self._prompt)] != self._prompt:
            raise ValueError("a completion starts with an assistant message")
        return rendered[len(self._prompt) :]

    # -- parsing ----------------------------------------------------------

    def parse_completion(self, ids: Sequence[int]) -> ParsedTurn | ParseError:
        """Strictly parse what a policy sampled after ``<|start|>assistant``.

        Valid: one or more assistant messages; every one but the first opens with
        ``<|start|>assistant``; a channel is required; a tool call ends with
        ``<|call|>``, a final answer with ``<|return|>``, others with ``<|end|>``;
        nothing follows ``<|call|>`` or ``<|return|>``. A tool call's arguments
        must be a JSON object.
        """
        try:
            messages, spans, stop = self._parse(list(ids), sampled=True)
            call = None
            if messages[-1].is_tool_call:
                try:
                    call = ToolCall.from_message(messages[-1])
                except ValueError as exc:
                    start, end = spans[-1]
                    raise _Failure(f"tool call: {exc}", start, end) from None
        except _Failure as failure:
            return failure.error
        canonical = self.render_completion(messages) == list(ids)
        return ParsedTurn(messages=tuple(messages), spans=tuple(spans), stop=stop, canonical=canonical, tool_call=call)

    def parse_conversation(self, ids: Sequence[int]) -> list[Message] | ParseError:
        """Parse a whole rendered conversation (any roles) back into messages."""
        try:
            return self._parse(list(ids), sampled=False)[0]
        except _Failure as failure:
            return failure.error

    def _parse(self, ids: list[int], *, sampled: bool) -> tuple[list[Message], list[tuple[int, int]], Stop]:
        if not ids:
            raise _Failure("empty completion", 0, 0)
        for position, token in enumerate(ids):
            if not 0 <= token < self.tokenizer.vocab_size:
                raise _Failure(f"token id {token} outside the vocabulary", position, position + 1)
        messages: list[Message] = []
        spans: list[tuple[int, int]] = []
        pos, stop = 0, "end"
        while pos < len(ids):
            if stop != "end" and sampled:
                raise _Failure(f"tokens after <|{stop}|>", pos, len(ids))
            start = pos
            continuation = sampled and not messages
            if not continuation:
                if ids[pos] != self.ids["start"]:
                    raise _Failure(f"expected <|start|>, got {self._describe(ids[pos])}", pos, pos + 1)
                pos += 1
            message, pos, stop = self._parse_message(ids, pos, start, continuation=continuation, sampled=sampled)
            messages.append(message)
            spans.append((start, pos))
        return messages, spans, stop

    def _parse_message(
        self, ids: list[int], pos: int, start: int, *, continuation: bool, sampled: bool
    ) -> tuple[Message, int, Stop]:
        pieces: dict[str, list[int]] = {"role": [], "channel": [], "constrain": []}
        section, seen = "role", set()
        while True:
            if pos >= len(ids):
                raise _Failure("truncated header: no <|message|>", start, len(ids))
            token = ids[pos]
            name = self._names.get(token)
            if name == "message":
                break
            if name in ("channel", "constrain") and name not in seen and (name == "channel" or "channel" in seen):
                section = name
                seen.add(name)
            elif self.tokenizer.is_special(token):
                raise _Failure(f"unexpected {self._describe(token)} in message header", pos, pos + 1)
            else:
                pieces[section].append(token)
            pos += 1
        header_end = pos
        pos += 1
        body_start = pos
        while pos < len(ids) and not self.tokenizer.is_special(ids[pos]):
            pos += 1
        if pos >= len(ids):
            raise _Failure("truncated message: no <|end|>, <|call|> or <|return|>", start, len(ids))
        terminator = self._names.get(ids[pos])
        if terminator not in _TERMINATORS:
            raise _Failure(f"unexpected {self._describe(ids[pos])} in message body", pos, pos + 1)
        decode = self.tokenizer.decode
        role_text = ("assistant" if continuation else "") + decode(pieces["role"])
        fields = _header_fields(
            role_text,
            decode(pieces["channel"]) if "channel" in seen else None,
            decode(pieces["constrain"]) if "constrain" in seen else None,
            sampled=sampled,
        )
        if isinstance(fields, str):
            raise _Failure(fields, start, header_end)
        try:
            message = Message(**fields, content=decode(ids[body_start:pos]))
        except ValidationError as exc:
            raise _Failure(f"invalid message: {exc.errors()[0]['msg']}", start, pos + 1) from None
        if terminator != _terminator(message, last=True) and (
            sampled or terminator != _terminator(message, last=False)
        ):
            raise _Failure(f"{_kind(message)} cannot end with <|{terminator}|>", pos, pos + 1)
        return message, pos + 1, terminator  # type: ignore[return-value]

    def _describe(self, token: int) -> str:
        name = self._names.get(token)
        return HARMONY_SPECIALS[name] if name else f"special token {token} ({self.tokenizer.decode([token])!r})"


def _terminator(message: Message, last: bool) -> str:
    if message.is_tool_call:
        return "call"
    if message.is_final and last:
        return "return"
    return "end"


def _kind(message: Message) -> str:
    if message.is_tool_call:
        return "a tool call"
    if message.is_final:
        return "a final answer"
    return f"a {message.role} message" + (f" on {message.channel}" if message.channel else "")


def _header_fields(
    role_text: str, channel_text: str | None, constrain_text: str | None, *, sampled: bool
) -> dict | str:
    """Message fields from the decoded header pieces, or the reason they are invalid."""
    words = role_text.split()
    if not words:
        return "missing role"
    role, fields = words[0], {}
    if role in ("system", "developer", "user", "assistant"):
        fields["role"] = role
    elif "." in role:
        fields.update(role="tool", name=role)
    else:
        return f"unknown role {role!r}"
    if sampled and role != "assistant":
        return f"a policy may only write assistant messages, not {role!r}"
    rest = words[1:]
    if channel_text is not None:
        channel_words = channel_text.split()
        if not channel_words or channel_words[0] not in CHANNELS:
            return f"unknown channel {channel_words[0] if channel_words else ''!r}; valid: {', '.join(CHANNELS)}"
        fields["channel"] = channel_words[0]
        rest += channel_words[1:]
    elif role == "assistant" or (sampled and role != "assistant"):
        return "missing <|channel|>: every assistant message names its channel"
    for word in rest:
        if word.startswith("to=") and "recipient" not in fields:
            fields["recipient"] = word[3:]
        elif not word.startswith("to=") and "content_type" not in fields:
            fields["content_type"] = word
        else:
            return f"unexpected header word {word!r}"
    if constrain_text is not None:
        if "content_type" in fields or len(constrain_text.split()) != 1:
            return f"bad content type after <|constrain|>: {constrain_text!r}"
        fields["content_type"] = constrain_text.strip()
    return fields
