"""What every model family's chat format shares: the prompt from the model's own chat template, every later
token rendered incrementally, the template checked at load, and sampled turns parsed into the gym's messages.

A family (`qwen`, `llama3`, `deepseek`) names its marker tokens and writes four things as pieces (token ids
and text, `gym.format.template.Piece`): a tool-call turn and an answer turn as a policy samples them
(`call_pieces`, `answer_pieces`), a tool result (`observation_pieces`) and what precedes the next turn
(`generation_pieces`); and it reads a sampled turn's body (`read_body`). Everything else is here:

- the prompt is the template's rendering of the system and user messages with the tools' JSON schemas and
  the generation prompt, encoded so that no content writes a special token (`TemplateText.render`);
- a sampled turn is parsed from its token ids: it must end with one of the family's terminators (else
  ``truncated``), may hold no special token but the family's own call markers, and never a marker of a
  tool result or a turn boundary (checked on the ids: text that merely looks like one stays text);
- at load, the incremental rendering of a probe conversation (a call, its result, an answer) must equal the
  template's rendering of the whole conversation, token for token: a template that writes turns another
  way than the family is refused with the first differing tokens.

Parsed turns use the gym's messages: the text before a call is an ``analysis`` message, the call an
assistant message to ``functions.NAME`` with JSON arguments, the answer a ``final`` message. One tool
call per turn: the episode runs calls one at a time, so a turn with several is a ``parse_error``.
"""

from __future__ import annotations

import abc
import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gym.format.chat_format import ChatFormatError
from gym.format.message import MAX_ARGUMENT_DEPTH, Message, ToolCall, json_depth
from gym.format.prompt import ToolSpec
from gym.format.template import ChatTemplate, Piece, TemplateText
from gym.format.tokenizer import Tokenizer, TokenizersTokenizer
from gym.format.turn import ParsedTurn, ParseError

NAMESPACE = "functions"  # the gym's tools (gym.tools.NAMESPACE): a family's bare tool names live in it
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PROBE_TOOL = ToolSpec(
    name="probe",
    description="Echo a text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


class Failure(Exception):
    """Aborts a parse; `TemplateFamily.parse_completion` returns its ParseError (ids[start:end] at fault)."""

    def __init__(self, reason: str, start: int, end: int) -> None:
        super().__init__(reason)
        self.error = ParseError(reason=reason, start=start, end=max(end, start + 1))


@dataclass(frozen=True)
class Body:
    """What a family read in a turn's ids (terminator excluded): a note, then a call or an answer from ``split``."""

    note: str  # text before the call, or the reasoning before an answer ('' when none)
    split: int  # index of the first token after the note
    name: str = ""  # the call's tool
    arguments: dict[str, Any] | None = None  # the call's arguments; None for an answer
    answer: str | None = None  # the answer's text; None for a call


class TemplateFamily(abc.ABC):
    """A model family's chat format (`gym.format.chat_format.ChatFormat`) for one tokenizer and chat template."""

    name: ClassVar[str]
    markers: ClassVar[dict[str, str]]  # short name -> token text; each must be one token of the tokenizer
    terminators: ClassVar[tuple[str, ...]]  # markers that end a turn; canonical turns end with the first
    allowed: ClassVar[tuple[str, ...]]  # markers that may stand inside a turn (the call's own)
    forbidden: ClassVar[tuple[str, ...]]  # markers a policy never writes (results, turn boundaries), special or not
    notes_with_calls: ClassVar[bool] = True  # whether a call turn may carry text before the call
    notes_with_answers: ClassVar[bool] = False  # whether an answer turn may carry reasoning before the answer
    template_variables: ClassVar[dict[str, Any]] = {}  # passed to the template (keeps prompts reproducible)

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate, tools: Sequence[ToolSpec] = ()) -> None:
        if not isinstance(tokenizer, TokenizersTokenizer):
            raise ChatFormatError(
                f"chat format {self.name!r} needs a Hugging Face tokenizer (tokenizer: hf:DIR), not {tokenizer.name}"
            )
        self.tokenizer, self.template, self.tools = tokenizer, template, tuple(tools)
        self.text = TemplateText(tokenizer)
        missing = [text for text in self.markers.values() if tokenizer.token_id(text) is None]
        if missing:
            raise ChatFormatError(
                f"{tokenizer.name}: chat format {self.name!r} reads its markers as single tokens, and the tokenizer "
                f"has no token {missing[0]!r}: choose the chat format this model speaks"
            )
        self.ids: dict[str, int] = {key: tokenizer.token_id(text) for key, text in self.markers.items()}  # type: ignore[misc]
        self._terminators = {self.ids[key] for key in self.terminators}
        self._allowed = {self.ids[key] for key in self.allowed}
        self._forbidden = {self.ids[key] for key in self.forbidden}
        self._check_template()

    def bind(self, tools: Sequence[ToolSpec]) -> TemplateFamily:
        """This format with ``tools`` rendered into its prompts (a task's toolbox)."""
        bound = copy.copy(self)
        bound.tools = tuple(tools)
        return bound

    # -- what a family writes and reads (its own module) ----------------------------------------------------

    @abc.abstractmethod
    def call_pieces(self, note: str, name: str, arguments: dict[str, Any]) -> list[Piece]:
        """A tool-call turn as sampled, terminator included."""

    @abc.abstractmethod
    def answer_pieces(self, note: str, answer: str) -> list[Piece]:
        """An answer turn as sampled, terminator included."""

    @abc.abstractmethod
    def observation_pieces(self, output: str) -> list[Piece]:
        """A tool result, appended right after the sampled turn that called the tool."""

    @abc.abstractmethod
    def generation_pieces(self) -> list[Piece]:
        """What precedes a sampled turn after a tool result."""

    def resume_pieces(self) -> list[Piece]:
        """What precedes a sampled turn after a closed turn that led to no tool result (a parse error)."""
        return self.generation_pieces()

    @abc.abstractmethod
    def read_body(self, body: list[int]) -> Body:
        """The note and the call or answer of a turn's ids (terminator excluded); raises Failure."""

    def conversation(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """Prompt messages as the template takes them: a developer message joins the system message."""
        out: list[dict[str, Any]] = []
        for message in messages:
            role = "system" if message.role == "developer" else message.role
            if role not in ("system", "user"):
                raise ValueError(f"a prompt holds system, developer and user messages, not {message.role!r}")
            if out and role == "system" == out[-1]["role"]:
                out[-1] = {"role": "system", "content": out[-1]["content"] + "\n\n" + message.content}
            else:
                out.append({"role": role, "content": message.content})
        return out

    def template_arguments(self, arguments: dict[str, Any]) -> Any:
        """A call's arguments as the template's ``tool_calls`` take them (a dict; some templates want JSON text)."""
        return arguments

    def answer_content(self, note: str, answer: str) -> str:
        """An answer turn's ``content`` for the template."""
        return answer

    # -- the ChatFormat interface --------------------------------------------------------------------------

    def stop_ids(self) -> list[int]:
        return [self.ids[key] for key in self.terminators]

    def generation_prompt(self) -> list[int]:
        return self.text.encode(self.generation_pieces())

    def resume(self, sampled: Sequence[int]) -> list[int]:
        """The next turn's opening; a turn cut before its terminator (the token budget) is closed first."""
        closed = bool(sampled) and sampled[-1] in self._terminators
        return ([] if closed else [self.ids[self.terminators[0]]]) + self.text.encode(self.resume_pieces())

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The tools as chat templates take them (OpenAI's function schema); None without tools."""
        if not self.tools:
            return None
        empty = {"type": "object", "properties": {}}
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters or empty},
            }
            for t in self.tools
        ]

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        pieces = self.text.render(
            self.template,
            self.conversation(messages),
            tools=self.tool_schemas(),
            add_generation_prompt=True,
            **self.template_variables,
        )
        return self.text.encode(pieces)

    def render_observation(self, message: Message) -> list[int]:
        if message.role != "tool":
            raise ValueError(f"only a tool result follows a sampled turn, not a {message.role} message")
        return self.text.encode(self.observation_pieces(message.content))

    def render_completion(self, messages: Sequence[Message]) -> list[int]:
        note, last = self._turn(messages)
        if last.is_tool_call:
            name = (last.recipient or "").rpartition(".")[2]
            return self.text.encode(self.call_pieces(note, name, json.loads(last.content)))
        return self.text.encode(self.answer_pieces(note, last.content))

    def render(self, messages: Sequence[Message]) -> list[int]:
        prompt, turns = split_conversation(messages)
        ids = self.render_prompt(prompt)
        for index, (turn, result) in enumerate(turns):
            sampled = self.render_completion(turn)
            ids += sampled
            more = index + 1 < len(turns)
            if result is not None:
                ids += self.render_observation(result) + (self.generation_prompt() if more else [])
            elif more:
                ids += self.resume(sampled)
        return ids

    def fit_turn(self, messages: Sequence[Message]) -> list[Message]:
        """A turn of messages as this format can write it: the notes it has no place for are dropped (a scripted
        policy's analysis line before an answer, or before a Llama call)."""
        *notes, last = messages
        keep = self.notes_with_calls if last.is_tool_call else self.notes_with_answers
        return [*(notes[-1:] if keep else []), last]

    def template_conversation(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """A whole conversation as the model's template takes it (OpenAI-style dicts with ``tool_calls``)."""
        prompt, turns = split_conversation(messages)
        out = self.conversation(prompt)
        for turn, result in turns:
            note, last = self._turn(turn)
            if last.is_tool_call:
                name = (last.recipient or "").rpartition(".")[2]
                arguments = self.template_arguments(json.loads(last.content))
                call = {"type": "function", "function": {"name": name, "arguments": arguments}}
                out.append({"role": "assistant", "content": note, "tool_calls": [call]})
            else:
                out.append({"role": "assistant", "content": self.answer_content(note, last.content)})
            if result is not None:
                out.append({"role": "tool", "content": result.content})
        return out

    def parse_completion(self, ids: Sequence[int]) -> ParsedTurn | ParseError:
        """Strictly parse one sampled turn (see the module docstring); never raises."""
        ids = list(ids)
        try:
            body = self._body(ids)
            read = self.read_body(body)
        except Failure as failure:
            return failure.error
        messages: list[Message] = []
        spans: list[tuple[int, int]] = []
        if read.note:
            messages.append(Message.assistant("analysis", read.note))
            spans.append((0, read.split))
        call = None
        if read.arguments is not None:
            messages.append(Message.tool_call(read.name, read.arguments, NAMESPACE))
            call = ToolCall(namespace=NAMESPACE, name=read.name, arguments=read.arguments, raw=messages[-1].content)
        else:
            messages.append(Message.assistant("final", read.answer or ""))
        spans.append((read.split, len(ids)))
        try:
            canonical = self.render_completion(messages) == ids
        except ValueError:  # a note this format writes nowhere (text before a Llama call): never canonical
            canonical = False
        return ParsedTurn(
            messages=tuple(messages),
            spans=tuple(spans),
            stop="call" if call is not None else "return",
            canonical=canonical,
            tool_call=call,
        )

    # -- internals ---------------------------------------------------------------------------------------

    def _body(self, ids: list[int]) -> list[int]:
        """The ids before the terminator, after checking every id a policy may write."""
        if not ids:
            raise Failure("empty completion", 0, 0)
        for position, token in enumerate(ids):
            if not 0 <= token < self.tokenizer.vocab_size:
                raise Failure(f"token id {token} outside the vocabulary", position, position + 1)
            if position == len(ids) - 1:
                break
            if token in self._terminators:
                raise Failure(f"tokens after {self.describe(token)}", position + 1, len(ids))
            if token in self._forbidden or (self.tokenizer.is_special(token) and token not in self._allowed):
                raise Failure(f"{self.describe(token)} inside a sampled turn", position, position + 1)
        if ids[-1] not in self._terminators:
            ends = " or ".join(self.markers[key] for key in self.terminators)
            raise Failure(f"truncated: the turn does not end with {ends}", 0, len(ids))
        return ids[:-1]

    def describe(self, token: int) -> str:
        return f"{self.tokenizer.decode([token])!r} (id {token})"

    def _turn(self, messages: Sequence[Message]) -> tuple[str, Message]:
        """A turn's note text and its last message (the call or the answer); ValueError when it is not one."""
        if not messages:
            raise ValueError("an empty turn")
        *notes, last = messages
        if not (last.is_tool_call or last.is_final):
            raise ValueError("a turn ends with a tool call or a final answer")
        if len(notes) > 1 or any(n.role != "assistant" or n.is_tool_call or n.is_final for n in notes):
            raise ValueError("a turn holds at most one analysis or commentary message before its call or answer")
        note = notes[0].content if notes else ""
        if note and not (self.notes_with_calls if last.is_tool_call else self.notes_with_answers):
            what = "a tool call" if last.is_tool_call else "an answer"
            raise ValueError(f"the {self.name} format writes no text before {what}")
        return note, last

    def _check_template(self) -> None:
        """Refuse a template whose rendering of a whole honest conversation differs from the incremental one."""
        probe = self.bind([PROBE_TOOL])
        turn = self.fit_turn(
            [Message.assistant("analysis", "I will echo it."), Message.tool_call("probe", {"text": "hi"})]
        )
        messages = [
            Message.system("You echo texts."),
            Message.user("Echo hi."),
            *turn,
            Message.tool_result("probe", "hi"),
            Message.assistant("final", "Echoed."),
        ]
        incremental = probe.render(messages)
        text = self.template.render(
            probe.template_conversation(messages), tools=probe.tool_schemas(), **self.template_variables
        )
        whole = self.text.encode(self.text.split(text))
        # the template may write a separator after the last turn's terminator (ChatML's "\n"), never sampled
        if whole[: len(incremental)] == incremental and not self.tokenizer.decode(whole[len(incremental) :]).strip():
            return
        at = next((i for i, (a, b) in enumerate(zip(incremental, whole)) if a != b), min(len(incremental), len(whole)))
        decode = self.tokenizer.decode
        raise ChatFormatError(
            f"{self.template.source}: the chat template does not write turns as the {self.name!r} format does: after "
            f"{decode(whole[max(0, at - 12) : at])!r} the template has {decode(whole[at : at + 12])!r}, the format "
            f"{decode(incremental[at : at + 12])!r}; choose the chat format this template speaks"
        )


def split_conversation(messages: Sequence[Message]) -> tuple[list[Message], list[tuple[list[Message], Message | None]]]:
    """The prompt messages (system, developer, user), then each turn's messages with the tool result after it."""
    index = 0
    while index < len(messages) and messages[index].role in ("system", "developer", "user"):
        index += 1
    turns: list[tuple[list[Message], Message | None]] = []
    current: list[Message] = []
    for message in messages[index:]:
        if message.role == "tool":
            if current or not turns or turns[-1][1] is not None or not turns[-1][0][-1].is_tool_call:
                raise ValueError("a tool result follows the turn that called the tool")
            turns[-1] = (turns[-1][0], message)
            continue
        if message.role != "assistant":
            raise ValueError(f"a {message.role} message after the prompt")
        current.append(message)
        if message.is_tool_call or message.is_final:
            turns.append((current, None))
            current = []
    if current:
        raise ValueError("a turn ends with a tool call or a final answer")
    return messages[:index], turns


def read_call(text: str, argument_keys: tuple[str, ...], start: int, end: int) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments of a call written as one JSON object (``{"name": ..., KEY: {...}}``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failure(f"tool call is not valid JSON: {exc}", start, end) from None
    except RecursionError:  # sampled text nested past the interpreter's stack: data, never a crash
        raise Failure("tool call is nested too deeply to parse", start, end) from None
    return call_fields(value, argument_keys, start, end)


def call_fields(value: Any, argument_keys: tuple[str, ...], start: int, end: int) -> tuple[str, dict[str, Any]]:
    """Check a parsed call object: ``name`` a tool name, exactly one of ``argument_keys`` an object, nothing else."""
    if not isinstance(value, dict):
        raise Failure(f"a tool call is a JSON object, not {type(value).__name__}", start, end)
    keys = " or ".join(repr(key) for key in argument_keys)
    extra = sorted(set(value) - {"name", *argument_keys})
    if extra:
        raise Failure(f"unexpected key {extra[0]!r} in a tool call (it holds 'name' and {keys})", start, end)
    name = value.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise Failure(f"tool name {name!r} is not a name (letters, digits and _)", start, end)
    present = [key for key in argument_keys if key in value]
    if len(present) != 1:
        raise Failure(f"a tool call holds its arguments under one key, {keys}", start, end)
    arguments = value[present[0]]
    if not isinstance(arguments, dict):
        raise Failure(f"tool arguments must be a JSON object, not {type(arguments).__name__}", start, end)
    if json_depth(arguments) > MAX_ARGUMENT_DEPTH:
        raise Failure(f"tool arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels", start, end)
    return name, arguments


def dumps(value: Any) -> str:
    """JSON as chat templates' ``tojson`` writes it (transformers: ``json.dumps(ensure_ascii=False)``)."""
    return json.dumps(value, ensure_ascii=False)
