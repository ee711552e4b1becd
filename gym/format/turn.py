"""What parsing a sampled turn gives back, in every chat format: a `ParsedTurn` or a `ParseError`.

A chat format (`gym.format.chat_format`) parses the token ids a policy sampled after its generation prompt
into one of these two, never raising: structure is read from token ids, and a turn that is not valid in the
format is a `ParseError` with the offending token span, which the episode records as ``parse_error`` data.
The messages of a parsed turn use the gym's one message model (`gym.format.message.Message`) whatever the
format: a tool call is an assistant message to ``functions.NAME`` with JSON arguments, an answer is an
assistant message on the ``final`` channel, text before a call is an ``analysis`` message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.format.message import Message, ToolCall
from sandbox.failure import FailureKind

Stop = Literal["call", "return", "end"]


class ParseError(BaseModel):
    """Why sampled tokens are not a valid turn, and where: ids[start:end]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(description="What is wrong, in words.")
    start: int = Field(ge=0, description="First offending token (index into the parsed ids).")
    end: int = Field(ge=0, description="One past the last offending token.")

    @property
    def failure(self) -> FailureKind:
        return FailureKind.PARSE_ERROR


class ParsedTurn(BaseModel):
    """The messages of a valid sampled turn, with their token spans."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: tuple[Message, ...] = Field(description="In order; the last one decides the action.")
    spans: tuple[tuple[int, int], ...] = Field(description="[start, end) of each message in the parsed ids.")
    stop: Stop = Field(description="How the turn ended: a tool call, an answer, or an <|end|> (Harmony only).")
    canonical: bool = Field(description="Whether the ids equal the canonical rendering of the messages.")
    tool_call: ToolCall | None = Field(None, description="Set when the turn ends with a tool call.")

    @property
    def final(self) -> str | None:
        """The final answer's text when the turn ends with one."""
        last = self.messages[-1]
        return last.content if last.is_final else None
