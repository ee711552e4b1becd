"""Chat requests with tools: what the server hands a chat format, and the OpenAI message it makes of a reply.

The server renders chats in the model family's own chat format (`ChatRenderer`; `python -m gym serve` builds it
with `gym.format.openai_chat`, the format the environment's ``chat_format: auto`` would choose for the same
tokenizer). The request is handed over as plain OpenAI-style dicts (`conversation`, `tool_schemas`), and the
format parses the sampled ids back into a `Reply`: content, or one tool call. `assistant_turn` makes the
response's message of it with OpenAI's rules:

- a call to a function the request offered: ``message.tool_calls`` (a fresh id, type function, the name, the
  arguments as a JSON string), ``content`` the text before the call or null, finish_reason ``tool_calls``;
- a valid answer turn: its answer's text (Harmony's final channel; a family's decoded answer);
- anything else (no call, a malformed call, a call to a function not offered, a turn cut by a stop string or
  the length): plain ``content``, the decoded text (never an error).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from policies.protocol import AssistantMessage, CalledFunction, ChatCompletionRequest, ToolCallOut


@dataclass(frozen=True)
class Reply:
    """A sampled turn as a chat format reads it."""

    content: str | None  # the text (before a call: the note, or None)
    call_name: str | None = None
    call_arguments: str | None = None  # the JSON arguments object as text
    error: str | None = None  # why the turn is no valid call, when it tried to be one


class ChatRenderer(Protocol):
    """A chat format as the server uses it (`gym.format.openai_chat.OpenAIChat`)."""

    name: str
    """The format's name (qwen, llama3, deepseek, harmony)."""
    tools_only: bool
    """Whether it renders only chats with tools or tool messages (Harmony: the others are the server's own
    rendering, which opens the final channel)."""

    def stop_ids(self) -> list[int]:
        """Ids that end a sampled turn."""
        ...

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """The prompt ids for OpenAI-style messages and function schemas; ValueError names what cannot be
        rendered (the server's 400)."""
        ...

    def parse(self, ids: list[int]) -> Reply:
        """The turn's content or call; never raises."""
        ...


def conversation(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The request's messages as OpenAI-style dicts: role, content (text), and ``tool_calls`` (id, name,
    arguments text) or ``tool_call_id`` where given."""
    out = []
    for message in req.messages:
        item: dict[str, Any] = {"role": message.role, "content": message.text}
        if message.tool_calls:
            item["tool_calls"] = [
                {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        out.append(item)
    return out


def tool_schemas(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The offered tools (`ChatCompletionRequest.offered_tools`) as chat templates take them."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.function.name,
                "description": tool.function.description,
                "parameters": tool.function.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in req.offered_tools
    ]


def schema_characters(tools: list[dict[str, Any]]) -> int:
    """Characters of the tools as JSON: what rendering them into the prompt writes, about."""
    return len(json.dumps(tools, ensure_ascii=False)) if tools else 0


def assistant_turn(
    reply: Reply | None, text: str, offered: set[str], reason: Literal["stop", "length"]
) -> tuple[AssistantMessage, Literal["stop", "length", "tool_calls"]]:
    """The response's message and finish reason: a tool call when ``reply`` is a call to one of ``offered``,
    else ``text`` as content (module docstring)."""
    if reply is not None and reply.call_name is None and reply.error is None and reply.content is not None:
        return AssistantMessage(content=reply.content), reason  # an answer turn, read by the format
    if reply is None or reply.call_name is None or reply.call_name not in offered:
        return AssistantMessage(content=text), reason
    call = ToolCallOut(
        id=f"call_{uuid.uuid4().hex[:24]}",
        function=CalledFunction(name=reply.call_name, arguments=reply.call_arguments or "{}"),
    )
    return AssistantMessage(content=reply.content or None, tool_calls=[call]), "tool_calls"
