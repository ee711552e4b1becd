"""Llama 3.1-3.3 with JSON tool calls: a call is the whole turn, one JSON object; results are ``ipython`` turns.

As Llama 3.1/3.2's chat template writes them (the generation prompt is
``<|start_header_id|>assistant<|end_header_id|>\\n\\n``)::

    {"name": "NAME", "parameters": {...}}<|eot_id|>                                   a call
    {answer}<|eot_id|>                                                                an answer
    <|start_header_id|>ipython<|end_header_id|>\\n\\n"{output as a JSON string}"<|eot_id|>  a tool result

The template renders a tool result that is a string through ``tojson`` (a string is iterable in Jinja), so
the output arrives JSON-quoted, as the model was trained to read it. A turn is a call when it opens with
``<|python_tag|>`` or its text opens with ``{"name"``; it must then be exactly one JSON object with ``name``
and ``parameters`` (``arguments`` is read too, as vLLM's Llama parser does, but is not canonical), or it is
a parse error. Any other text is the answer: a JSON object in a code block is no call. A turn ends with
``<|eot_id|>`` (``<|eom_id|>`` and ``<|end_of_text|>`` are accepted: Llama's generation config stops on
them). The template trims system and user messages, so the prompt's are trimmed before rendering, and a
call turn carries no text (the template writes a call message's content nowhere). The template's date
line is pinned to its own default (``date_string``), so a prompt does not change with the day.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from gym.format.families.family import Body, Failure, TemplateFamily, call_fields, dumps
from gym.format.message import Message
from gym.format.template import Piece

_CALL = re.compile(r'\{\s*"name"\s*:')


class Llama3(TemplateFamily):
    name = "llama3"
    markers = {
        "begin": "<|begin_of_text|>",
        "text_end": "<|end_of_text|>",
        "header": "<|start_header_id|>",
        "header_end": "<|end_header_id|>",
        "eot": "<|eot_id|>",
        "eom": "<|eom_id|>",
        "python": "<|python_tag|>",
    }
    terminators = ("eot", "eom", "text_end")
    allowed = ("python",)
    forbidden = ("begin", "header", "header_end")
    notes_with_calls = False
    template_variables = {"date_string": "26 Jul 2024"}

    def conversation(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return [{**m, "content": m["content"].strip()} for m in super().conversation(messages)]

    def call_pieces(self, note: str, name: str, arguments: dict[str, Any]) -> list[Piece]:
        return [f'{{"name": "{name}", "parameters": {dumps(arguments)}}}', self.ids["eot"]]

    def answer_pieces(self, note: str, answer: str) -> list[Piece]:
        return [answer, self.ids["eot"]]

    def observation_pieces(self, output: str) -> list[Piece]:
        return [self.ids["header"], "ipython", self.ids["header_end"], "\n\n" + dumps(output), self.ids["eot"]]

    def generation_pieces(self) -> list[Piece]:
        return [self.ids["header"], "assistant", self.ids["header_end"], "\n\n"]

    def read_body(self, body: list[int]) -> Body:
        tagged = bool(body) and body[0] == self.ids["python"]
        if self.ids["python"] in body[1:]:
            at = body.index(self.ids["python"], 1)
            raise Failure("<|python_tag|> inside a turn (it opens a call)", at, at + 1)
        text = self.tokenizer.decode(body[1:] if tagged else body).strip()
        if not tagged and not _CALL.match(text):
            return Body(note="", split=0, answer=self.tokenizer.decode(body))
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError as exc:
            raise Failure(f"tool call is not valid JSON: {exc}", 0, len(body)) from None
        except RecursionError:
            raise Failure("tool call is nested too deeply to parse", 0, len(body)) from None
        rest = text[end:].strip()
        if rest:
            several = rest.startswith(";") or _CALL.match(rest)
            what = (
                "several tool calls in one turn: the environment runs one call per turn"
                if several
                else "text after the tool call"
            )
            raise Failure(what, 0, len(body))
        name, arguments = call_fields(value, ("parameters", "arguments"), 0, len(body))
        return Body(note="", split=0, name=name, arguments=arguments)
