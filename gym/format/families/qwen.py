"""Qwen2.5 / Qwen3 and Hermes: ChatML turns with ``<tool_call>`` JSON, results in ``<tool_response>`` user turns.

As Qwen2.5's chat template writes them (the generation prompt is ``<|im_start|>assistant\\n``)::

    {note}\\n<tool_call>\\n{"name": "NAME", "arguments": {...}}\\n</tool_call><|im_end|>     a call
    {answer}<|im_end|>                                                                    an answer
    \\n<|im_start|>user\\n<tool_response>\\n{output}\\n</tool_response><|im_end|>             a tool result
    \\n<|im_start|>assistant\\n                                                            the next turn

The ``\\n`` after ``<|im_end|>`` is never sampled (the engine stops at ``<|im_end|>``): it opens whatever
follows. A turn ends with ``<|im_end|>`` (``<|endoftext|>`` is accepted, as Qwen's generation config
stops on it too). The call is read between the ``<tool_call>`` and ``</tool_call>`` *tokens*: as in
Hermes, a ``<tool_call>`` token starts a call wherever it stands (a code block included), so a malformed
one is a parse error; text spelling ``<tool_call>`` with other tokens is text. Only whitespace may follow
``</tool_call>``; a ``<tool_response>`` token, or ``<|im_start|>``, in a sampled turn is a parse error
(a policy never writes a tool's answer or opens a turn).
"""

from __future__ import annotations

from typing import Any

from gym.format.families.family import Body, Failure, TemplateFamily, dumps, read_call
from gym.format.template import Piece


class Qwen(TemplateFamily):
    name = "qwen"
    markers = {
        "start": "<|im_start|>",
        "end": "<|im_end|>",
        "text_end": "<|endoftext|>",
        "call": "<tool_call>",
        "call_end": "</tool_call>",
        "response": "<tool_response>",
        "response_end": "</tool_response>",
    }
    terminators = ("end", "text_end")
    allowed = ("call", "call_end")
    forbidden = ("start", "response", "response_end")

    def call_pieces(self, note: str, name: str, arguments: dict[str, Any]) -> list[Piece]:
        call = f'\n{{"name": "{name}", "arguments": {dumps(arguments)}}}\n'
        return [*([note + "\n"] if note else []), self.ids["call"], call, self.ids["call_end"], self.ids["end"]]

    def answer_pieces(self, note: str, answer: str) -> list[Piece]:
        return [answer, self.ids["end"]]

    def observation_pieces(self, output: str) -> list[Piece]:
        ids = self.ids
        return ["\n", ids["start"], "user\n", ids["response"], f"\n{output}\n", ids["response_end"], ids["end"]]

    def generation_pieces(self) -> list[Piece]:
        return ["\n", self.ids["start"], "assistant\n"]

    def read_body(self, body: list[int]) -> Body:
        decode = self.tokenizer.decode
        opens = [i for i, token in enumerate(body) if token == self.ids["call"]]
        closes = [i for i, token in enumerate(body) if token == self.ids["call_end"]]
        if not opens and not closes:
            return Body(note="", split=0, answer=decode(body))
        if closes and (not opens or closes[0] < opens[0]):
            raise Failure("</tool_call> without <tool_call>", closes[0], closes[0] + 1)
        first = opens[0]
        if not closes:
            raise Failure("<tool_call> without </tool_call>", first, len(body))
        if len(opens) > 1 and opens[1] < closes[0]:
            raise Failure("<tool_call> inside a <tool_call>", opens[1], opens[1] + 1)
        if len(opens) > 1 or len(closes) > 1:
            at = (opens[1:] or closes[1:])[0]
            raise Failure("several tool calls in one turn: the environment runs one call per turn", at, len(body))
        close = closes[0]
        if decode(body[close + 1 :]).strip():
            raise Failure("text after </tool_call>: a call ends the turn", close + 1, len(body))
        name, arguments = read_call(decode(body[first + 1 : close]), ("arguments",), first, close + 1)
        note = decode(body[:first])
        return Body(note=note[:-1] if note.endswith("\n") else note, split=first, name=name, arguments=arguments)
