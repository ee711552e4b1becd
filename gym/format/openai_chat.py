"""OpenAI chat messages and tools in a model family's chat format: what the policy server renders and parses.

`python -m gym serve` renders a chat request with the format the environment's ``chat_format: auto`` picks for
the same tokenizer (`gym.format.chat_format.detect_chat_format`: the tokenizer directory's chat template), so a
served model reads its tools and tool results as it was trained to and as the gym's episodes render them:

- a conversation in the agent's shape (system, developer and user messages, then assistant turns, each a text
  answer or one tool call, each call answered by its ``tool`` message) is rendered as the episodes render it:
  the prompt by the model's chat template with the tools' schemas, every later turn and tool result
  incrementally in the family's own pieces (token-exact with the template, `TemplateFamily.render`);
- any other conversation (a user message after an assistant turn) is rendered whole by the model's chat
  template, every content encoded as text;
- either way, special tokens come only from the template: a content that spells ``<|im_end|>`` or
  ``<tool_call>`` stays text, and tool schemas, names and arguments of the history (which templates write
  through ``tojson``, where a special token's text would become the token) are refused when they spell one.

A sampled turn is parsed by the family's own parser (`TemplateFamily.parse_completion`): a call becomes a
``Reply`` with its name and JSON arguments, anything else content; a malformed call is data, never an error.

Harmony (the project's policy; `HarmonyChat`) renders a chat with tools or tool messages as the environment
renders an episode: the gym's system message, the client's system and developer text as the developer message's
instructions with the tools' ``# Tools`` section, then every message by `Harmony.render_message` (contents as text,
a call on the commentary channel, a result from ``functions.NAME``), the assistant opened free to choose its
channel. A chat without tools is left to the server's own Harmony rendering, which opens the final channel
(``tools_only``). Tokenizers that lack one of Harmony's special tokens get no `HarmonyChat` (no tools).

This module builds no ``policies`` object: it returns plain values the server's `policies.chat_tools.ChatRenderer`
protocol names (``Reply`` has that module's fields).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.format.chat_format import ChatFormatError, detect_chat_format, load_chat_format
from gym.format.families.family import TemplateFamily, split_conversation
from gym.format.harmony import Harmony
from gym.format.message import Message
from gym.format.prompt import SystemPrompt, ToolSpec, developer_message, system_message
from gym.format.tokenizer import HARMONY_SPECIALS, load_tokenizer_json, read_tokenizer_file
from gym.format.turn import ParsedTurn, ParseError


@dataclass(frozen=True)
class Reply:
    """A sampled turn: content, or one tool call (`policies.chat_tools.Reply`'s fields)."""

    content: str | None
    call_name: str | None = None
    call_arguments: str | None = None
    error: str | None = None


def load_openai_chat(tokenizer_file: Path, name: str = "auto") -> OpenAIChat | HarmonyChat | None:
    """The chat format ``name`` (``auto``: the one the tokenizer's directory's chat template speaks) for a
    served tokenizer.json; for Harmony, `HarmonyChat` when the tokenizer has every Harmony special token, else
    None (the server renders chats itself, without tools). ChatFormatError names what is wrong (no template for
    a family, markers the tokenizer lacks, a template that writes turns otherwise)."""
    spec = f"hf:{tokenizer_file}"
    if name == "auto":
        name = detect_chat_format(spec)
    if name == "harmony":
        backend = read_tokenizer_file(Path(tokenizer_file))
        if any(backend.token_to_id(text) is None for text in HARMONY_SPECIALS.values()):
            return None  # a model never trained on the missing ones: no tool calls through it
        return HarmonyChat(Harmony(load_tokenizer_json(str(tokenizer_file))))
    chat = load_chat_format(name, load_tokenizer_json(str(tokenizer_file)), spec)
    if not isinstance(chat, TemplateFamily):
        raise ChatFormatError(f"chat format {name!r} is not a model family's template format")
    return OpenAIChat(chat)


class OpenAIChat:
    """One model family's format speaking OpenAI's chat messages (module docstring)."""

    tools_only = False  # renders every chat

    def __init__(self, family: TemplateFamily) -> None:
        self.family = family
        self.name = family.name
        specials = sorted(family.text.specials, key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None

    def stop_ids(self) -> list[int]:
        return self.family.stop_ids()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """Prompt ids for OpenAI-style ``messages`` (role, content, ``tool_calls`` of {id, name, arguments},
        ``tool_call_id``) and ``tools`` (OpenAI function schemas); ValueError names what cannot be rendered."""
        self._refuse_specials(json.dumps(tools, ensure_ascii=False), "tools")
        family = self.family.bind([_tool_spec(tool["function"]) for tool in tools])
        gym_messages = _gym_messages(messages, family.notes_with_calls)
        for message in gym_messages:
            if message.is_tool_call:
                self._refuse_specials(message.recipient or "", "a tool call's name")
                self._refuse_specials(message.content, "a tool call's arguments")
        try:
            prompt, turns = split_conversation(gym_messages)
        except ValueError:  # not the agent's shape: the template renders the whole conversation
            return self._render_whole(family, gym_messages)
        try:
            ids = family.render(gym_messages)
            if turns:
                ids += family.generation_prompt() if turns[-1][1] is not None else family.resume(ids)
            elif not prompt:
                raise ValueError("no message to answer")
        except ChatFormatError as exc:
            raise ValueError(str(exc)) from None
        return ids

    def parse(self, ids: list[int]) -> Reply:
        return _reply(self.family.parse_completion(ids), note_is_content=True)

    def _render_whole(self, family: TemplateFamily, messages: list[Message]) -> list[int]:
        """The whole conversation through the model's chat template (contents as text, `TemplateText.render`)."""
        lead = 0
        while lead < len(messages) and messages[lead].role in ("system", "developer", "user"):
            lead += 1
        conversation = family.conversation(messages[:lead]) if lead else []
        for message in messages[lead:]:
            if message.is_tool_call:
                name = (message.recipient or "").rpartition(".")[2]
                arguments = family.template_arguments(json.loads(message.content))
                call = {"type": "function", "function": {"name": name, "arguments": arguments}}
                conversation.append({"role": "assistant", "content": "", "tool_calls": [call]})
            elif message.role == "assistant":
                conversation.append({"role": "assistant", "content": message.content})
            elif message.role == "tool":
                conversation.append({"role": "tool", "content": message.content})
            else:  # a later system or user message: trimmed as the family trims prompt messages
                content = family.conversation([Message(role=message.role, content=message.content)])[-1]["content"]
                conversation.append(
                    {"role": "system" if message.role == "developer" else message.role, "content": content}
                )
        try:
            pieces = family.text.render(
                family.template,
                conversation,
                tools=family.tool_schemas(),
                add_generation_prompt=True,
                **family.template_variables,
            )
        except ChatFormatError as exc:
            raise ValueError(str(exc)) from None
        return family.text.encode(pieces)

    def _refuse_specials(self, text: str, what: str) -> None:
        match = self._specials.search(text) if self._specials else None
        if match:
            raise ValueError(
                f"{what} hold the text of the special token {match.group()!r}: the chat template writes them "
                "verbatim, where it would become the token"
            )


class HarmonyChat:
    """Harmony speaking OpenAI's chat messages with tools (module docstring)."""

    name = "harmony"
    tools_only = True  # a chat without tools or tool messages is the server's own rendering

    def __init__(self, harmony: Harmony) -> None:
        self.harmony = harmony

    def stop_ids(self) -> list[int]:
        return self.harmony.stop_ids()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        specs = [_tool_spec(tool["function"]) for tool in tools]
        instructions = "\n\n".join(m["content"] for m in messages if m["role"] in ("system", "developer"))
        rest = _gym_messages([m for m in messages if m["role"] not in ("system", "developer")], True)
        prompt = [system_message(SystemPrompt(), has_tools=bool(specs))]
        if instructions or specs:
            prompt.append(developer_message(instructions, specs))
        return self.harmony.render_prompt([*prompt, *rest])

    def parse(self, ids: list[int]) -> Reply:
        return _reply(self.harmony.parse_completion(ids), note_is_content=False)


def _reply(turn: ParsedTurn | ParseError, note_is_content: bool) -> Reply:
    """A parsed turn as a `Reply`: the call, with the text before it as content where the format writes that text
    for the reader (a family's note; Harmony's is analysis, not content), or the final answer's text."""
    if isinstance(turn, ParseError):
        return Reply(content=None, error=turn.reason)
    if turn.tool_call is None:
        return Reply(content=turn.final)
    note = turn.messages[0].content if note_is_content and len(turn.messages) > 1 else None
    arguments = json.dumps(turn.tool_call.arguments, ensure_ascii=False)
    return Reply(content=note, call_name=turn.tool_call.name, call_arguments=arguments)


def _tool_spec(function: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=function["name"], description=function.get("description") or "", parameters=function.get("parameters")
    )


def _gym_messages(messages: list[dict[str, Any]], notes_with_calls: bool) -> list[Message]:
    """The gym's messages for OpenAI-style ones; ValueError names one the formats cannot write. The text of an
    assistant message with a call is dropped where the family writes none (Llama 3's template drops it too)."""
    names: dict[str, str] = {}  # tool_call_id -> the function it called
    out: list[Message] = []
    for index, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role in ("system", "developer", "user"):
            out.append(Message(role=role, content=content))
        elif role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            if len(calls) > 1:
                raise ValueError(f"messages[{index}]: {len(calls)} tool calls in one turn; the chat formats write one")
            call = calls[0]
            arguments = _arguments(call["arguments"], index)
            names[call["id"]] = call["name"]
            if content and notes_with_calls:
                out.append(Message.assistant("analysis", content))
            out.append(Message.tool_call(call["name"], arguments))
        elif role == "assistant":
            out.append(Message.assistant("final", content))
        else:
            name = names.get(message.get("tool_call_id") or "")
            if name is None:
                raise ValueError(f"messages[{index}]: a tool message answers a call of an earlier assistant message "
                                 "(its tool_call_id)")  # fmt: skip
            out.append(Message.tool_result(name, content))
    return out


def _arguments(text: str, index: int) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"messages[{index}]: a tool call's arguments are not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"messages[{index}]: a tool call's arguments are a JSON object")
    return value
