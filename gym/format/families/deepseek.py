"""DeepSeek-V3 (and R1): tool calls and results between DeepSeek's own tool tokens.

As DeepSeek-V3's chat template writes them (the model continues after ``<｜Assistant｜>``, and right after a
tool result with no generation prompt at all)::

    {note}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>
    {answer}<｜end▁of▁sentence｜>
    <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{output}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>

What the template does that the family does not copy, and why:

- it renders no tools (``tools`` is never read): the family adds them to the system message, in the words
  of vLLM's DeepSeek-V3 tool template, whenever the template leaves them out;
- it never resets ``ns.is_first``, so it writes a second call turn as ``\\n<｜tool▁call▁begin｜>...`` straight
  after the previous result (no ``<｜tool▁outputs▁end｜>``, no ``<｜tool▁calls▁begin｜>``, the turn's text
  dropped): the family writes every turn like the first, as vLLM's fixed templates do; the load-time check
  covers one call turn, its result and the answer;
- R1's generation prompt opens a reasoning block (``<｜Assistant｜><think>\\n``), which its history drops: the
  prompt keeps what the template writes, and an answer's text up to the last ``</think>`` is reasoning (an
  ``analysis`` message), the rest the answer.

A call is read between the tool tokens (a ``<｜tool▁calls▁begin｜>`` token opens one wherever it stands); the
arguments follow the name in a ```json block. After a parse error the next turn opens with the template's
own generation prompt.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

from gym.format.families.family import Body, Failure, TemplateFamily, call_fields, dumps
from gym.format.message import Message
from gym.format.template import Piece

THINK_END = "</think>"
_FENCED = re.compile(r"([^\n]*)\n```(?:json)?\n(.*)\n```\s*\Z", re.DOTALL)


class DeepSeek(TemplateFamily):
    name = "deepseek"
    markers = {
        "begin": "<｜begin▁of▁sentence｜>",
        "end": "<｜end▁of▁sentence｜>",
        "user": "<｜User｜>",
        "assistant": "<｜Assistant｜>",
        "calls": "<｜tool▁calls▁begin｜>",
        "calls_end": "<｜tool▁calls▁end｜>",
        "call": "<｜tool▁call▁begin｜>",
        "call_end": "<｜tool▁call▁end｜>",
        "sep": "<｜tool▁sep｜>",
        "outputs": "<｜tool▁outputs▁begin｜>",
        "outputs_end": "<｜tool▁outputs▁end｜>",
        "output": "<｜tool▁output▁begin｜>",
        "output_end": "<｜tool▁output▁end｜>",
    }
    terminators = ("end",)
    allowed = ("calls", "calls_end", "call", "call_end", "sep")
    forbidden = ("begin", "user", "assistant", "outputs", "outputs_end", "output", "output_end")
    notes_with_answers = True  # reasoning, closed by </think>

    @functools.cached_property
    def opening(self) -> str:
        """What the template writes after a user message for the model to continue (``<｜Assistant｜>``, R1:
        ``<｜Assistant｜><think>\\n``)."""
        conversation = [{"role": "user", "content": "."}]
        plain = self.template.render(conversation)
        prompted = self.template.render(conversation, add_generation_prompt=True)
        return prompted[len(plain) :] if prompted.startswith(plain) else ""

    @functools.cached_property
    def renders_tools(self) -> bool:
        """Whether the template writes the tools it is given (DeepSeek-V3's does not)."""
        schema = {"type": "function", "function": {"name": "zq_probe_tool", "description": "", "parameters": {}}}
        return "zq_probe_tool" in self.template.render([{"role": "user", "content": "."}], tools=[schema])

    def conversation(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out = super().conversation(messages)
        if self.tools and not self.renders_tools:
            section = tools_section(self.tool_schemas() or [])
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + section}
            else:
                out.insert(0, {"role": "system", "content": section})
        return out

    def template_conversation(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """The template's history drops what its generation prompt opened (R1's ``<think>\\n``): the turn
        right after the user message gets it back at the head of its content."""
        out = super().template_conversation(messages)
        tail = self.opening.removeprefix(self.markers["assistant"])
        for index in range(1, len(out)):
            if out[index]["role"] == "assistant" and out[index - 1]["role"] == "user":
                out[index] = {**out[index], "content": tail + (out[index]["content"] or "")}
        return out

    def template_arguments(self, arguments: dict[str, Any]) -> Any:
        return dumps(arguments)  # the template concatenates the arguments: JSON text

    def answer_content(self, note: str, answer: str) -> str:
        return f"{note}{THINK_END}{answer}" if note else answer

    def call_pieces(self, note: str, name: str, arguments: dict[str, Any]) -> list[Piece]:
        ids = self.ids
        call = f"{name}\n```json\n{dumps(arguments)}\n```"
        return [
            note,
            ids["calls"],
            ids["call"],
            "function",
            ids["sep"],
            call,
            ids["call_end"],
            ids["calls_end"],
            ids["end"],
        ]

    def answer_pieces(self, note: str, answer: str) -> list[Piece]:
        return [self.answer_content(note, answer), self.ids["end"]]

    def observation_pieces(self, output: str) -> list[Piece]:
        ids = self.ids
        return [ids["outputs"], ids["output"], output, ids["output_end"], ids["outputs_end"]]

    def generation_pieces(self) -> list[Piece]:
        return []

    def resume_pieces(self) -> list[Piece]:
        return self.text.split(self.opening) or [self.ids["assistant"]]

    def read_body(self, body: list[int]) -> Body:
        ids, decode = self.ids, self.tokenizer.decode
        markers = {ids[key] for key in self.allowed}
        first = next((i for i, token in enumerate(body) if token in markers), None)
        if first is None:
            note, _, answer = decode(body).rpartition(THINK_END)
            think = self.tokenizer.token_id(THINK_END)  # R1 has it as one token: the reasoning's span ends there
            split = max((i + 1 for i, token in enumerate(body) if token == think), default=0) if note else 0
            return Body(note=note, split=split, answer=answer)
        if body[first] != ids["calls"]:
            raise Failure(f"{self.describe(body[first])} outside <｜tool▁calls▁begin｜>", first, first + 1)
        if first + 1 >= len(body) or body[first + 1] != ids["call"]:
            raise Failure("<｜tool▁calls▁begin｜> not followed by <｜tool▁call▁begin｜>", first, first + 2)
        sep = _find(body, ids["sep"], first + 2, "<｜tool▁sep｜>")
        if decode(body[first + 2 : sep]) != "function":
            raise Failure("a tool call's type (before <｜tool▁sep｜>) is 'function'", first + 2, sep)
        end = _find(body, ids["call_end"], sep + 1, "<｜tool▁call▁end｜>")
        inside = [i for i in range(first + 2, end) if body[i] in markers and i != sep]
        if inside:
            raise Failure(f"{self.describe(body[inside[0]])} inside a tool call", inside[0], inside[0] + 1)
        if end + 1 < len(body) and ids["call"] in body[end + 1 :]:
            raise Failure("several tool calls in one turn: the environment runs one call per turn", end + 1, len(body))
        if body[end + 1 :] != [ids["calls_end"]]:
            raise Failure(
                "a tool call ends with <｜tool▁call▁end｜><｜tool▁calls▁end｜>, then the turn", end + 1, len(body)
            )
        match = _FENCED.match(decode(body[sep + 1 : end]))
        if match is None:
            raise Failure("a tool call is NAME, then its arguments in a ```json block", sep + 1, end)
        try:
            arguments = json.loads(match.group(2))
        except json.JSONDecodeError as exc:
            raise Failure(f"tool arguments are not valid JSON: {exc}", sep + 1, end) from None
        except RecursionError:
            raise Failure("tool arguments are nested too deeply to parse", sep + 1, end) from None
        name, arguments = call_fields({"name": match.group(1), "arguments": arguments}, ("arguments",), sep + 1, end)
        return Body(note=decode(body[:first]), split=first, name=name, arguments=arguments)


def _find(body: list[int], token: int, start: int, what: str) -> int:
    """Index of ``token`` in ``body`` from ``start``; a Failure naming ``what`` when it is missing."""
    try:
        return body.index(token, start)
    except ValueError:
        raise Failure(f"missing {what}", start, len(body)) from None


def tools_section(schemas: list[dict[str, Any]]) -> str:
    """The tools, as vLLM's DeepSeek-V3 tool template writes them into the system message, less its
    ``<｜end▁of▁sentence｜>``: in a message's content a special token's text stays text, never the token."""
    tools = "\n".join(dumps(schema) for schema in schemas)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
        "For function call returns, you should first print <｜tool▁calls▁begin｜>"
        "For each function call, you should return object like:\n"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜><function_name>\n```json\n<function_arguments_in_json_format>\n"
        "```<｜tool▁call▁end｜>"
        "At the end of function call returns, you should print <｜tool▁calls▁end｜>"
    )
