"""Harmony messages as frozen models: what the renderer turns into tokens and the parser returns.

One ``Message`` type covers every turn. Header fields are single words (no
whitespace) so that every valid message renders to tokens that parse back to
the same message. Conventions (those of the Harmony spec):

- a tool call is an ``assistant`` message on ``commentary`` with
  ``recipient="functions.NAME"`` and ``content_type="json"``; its content is the
  JSON arguments text;
- a tool result has role ``tool``, ``name="functions.NAME"`` (rendered in place
  of the role), ``recipient="assistant"`` and channel ``commentary``;
- the answer is an ``assistant`` message on ``final``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "developer", "user", "assistant", "tool"]
Channel = Literal["analysis", "commentary", "final"]
CHANNELS: tuple[str, ...] = ("analysis", "commentary", "final")

# A header word: a tool or namespace name, a recipient, a content type.
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*\Z")


def _check_word(value: str | None, what: str) -> str | None:
    if value is not None and not _WORD.match(value):
        raise ValueError(f"{what} {value!r} is not a header word (letters, digits, _ - and dots, no spaces)")
    return value


class Message(BaseModel):
    """One Harmony message: ``<|start|>{role}...<|channel|>{channel}...<|message|>{content}<|end|>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role = Field(description="Author role; a tool's messages use role 'tool' and carry its name.")
    name: str | None = Field(None, description="For role 'tool' only: the tool's full name, e.g. 'functions.python'.")
    channel: Channel | None = Field(None, description="analysis, commentary or final; None for system/developer/user.")
    recipient: str | None = Field(None, description="'functions.NAME' for a tool call, 'assistant' for a tool result.")
    content_type: str | None = Field(None, description="e.g. 'json' for tool-call arguments.")
    content: str = Field(description="The message body as text.")

    @field_validator("name", "recipient", "content_type")
    @classmethod
    def _header_word(cls, value: str | None, info: Any) -> str | None:
        return _check_word(value, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> Message:
        if (self.role == "tool") != (self.name is not None):
            raise ValueError("a name is required for role 'tool' and allowed for no other role")
        if self.role in ("system", "developer", "user") and (self.channel or self.recipient):
            raise ValueError(f"a {self.role} message has no channel or recipient")
        if self.role == "assistant" and self.channel is None:
            raise ValueError("an assistant message needs a channel")
        if self.role == "assistant" and self.recipient is not None and self.channel != "commentary":
            raise ValueError("tool calls go to the commentary channel")
        return self

    # -- constructors ---------------------------------------------------

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", content=text)

    @classmethod
    def developer(cls, text: str) -> Message:
        return cls(role="developer", content=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=text)

    @classmethod
    def assistant(cls, channel: Channel, text: str) -> Message:
        return cls(role="assistant", channel=channel, content=text)

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any], namespace: str = "functions") -> Message:
        """A call with canonical JSON arguments (compact separators, key order kept, UTF-8 as is)."""
        raw = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        return cls(
            role="assistant", channel="commentary", recipient=f"{namespace}.{name}", content_type="json", content=raw
        )

    @classmethod
    def tool_result(cls, name: str, output: str, namespace: str = "functions") -> Message:
        return cls(role="tool", name=f"{namespace}.{name}", channel="commentary", recipient="assistant", content=output)

    # -- views ----------------------------------------------------------

    @property
    def is_tool_call(self) -> bool:
        return self.role == "assistant" and self.recipient is not None

    @property
    def is_final(self) -> bool:
        return self.role == "assistant" and self.channel == "final"


class ToolCall(BaseModel):
    """A parsed tool call: which tool, and its arguments as a JSON object."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(description="Tool namespace, 'functions' for the gym's tools.")
    name: str = Field(description="Tool name within the namespace, e.g. 'python'.")
    arguments: dict[str, Any] = Field(description="The parsed JSON arguments object.")
    raw: str = Field(description="The arguments text exactly as sampled.")

    @property
    def recipient(self) -> str:
        return f"{self.namespace}.{self.name}"

    @classmethod
    def from_message(cls, message: Message) -> ToolCall:
        """Parse a tool-call message's arguments; ValueError names what is wrong."""
        if not message.is_tool_call or message.recipient is None:
            raise ValueError("not a tool call (an assistant message with a recipient)")
        namespace, dot, name = message.recipient.rpartition(".")
        if not dot:
            raise ValueError(f"recipient {message.recipient!r} is not NAMESPACE.TOOL")
        try:
            arguments = json.loads(message.content)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON: {exc}") from None
        except RecursionError:  # sampled text nested past the interpreter's stack: data, never a crash
            raise ValueError("arguments are nested too deeply to parse") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        if json_depth(arguments) > MAX_ARGUMENT_DEPTH:
            raise ValueError(f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels")
        return cls(namespace=namespace, name=name, arguments=arguments, raw=message.content)


MAX_ARGUMENT_DEPTH = 32  # tool arguments are flat; deeper values would only strain validation and serialisation


def json_depth(value: object) -> int:
    """Nesting depth of a JSON value (iterative: a sampled value must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest
