"""The one interface every chat format implements, the registry of formats, and the choice among them.

A chat format turns the gym's messages (`gym.format.message.Message`) into the token ids a policy reads
and parses what it samples back, at the token level:

- ``harmony`` (`gym.format.harmony.Harmony`): the gpt-oss response format; our RDEP policy speaks it.
- ``qwen`` (`gym.format.families.qwen`): Qwen2.5/Qwen3 and Hermes ``<tool_call>`` JSON.
- ``llama3`` (`gym.format.families.llama3`): Llama 3.1-3.3 JSON tool calls, ``ipython`` results.
- ``deepseek`` (`gym.format.families.deepseek`): DeepSeek-V3's ``<｜tool▁calls▁begin｜>`` tokens.

A model family's format renders the prompt with the model's own chat template (`gym.format.template`)
and every later token incrementally: the next context is always the previous one plus the sampled ids
plus a rendered delta (`render_observation`, `generation_prompt`, `resume`), so sampled ids are never
decoded and encoded again. ``environment.chat_format`` names one, or ``auto``: the format a tokenizer
directory's chat template speaks (`detect_chat_format`), Harmony when it has none.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gym.format.message import Message
from gym.format.prompt import ToolSpec
from gym.format.template import ChatFormatError, read_chat_template, read_json, template_directory
from gym.format.tokenizer import Tokenizer
from gym.format.turn import ParsedTurn, ParseError

__all__ = ["CHAT_FORMATS", "CHOICES", "ChatFormat", "ChatFormatError", "detect_chat_format", "load_chat_format"]

# name -> "module:class"; a family class is built as CLASS(tokenizer, template) (gym.format.families.family)
CHAT_FORMATS: dict[str, str] = {
    "harmony": "gym.format.harmony:Harmony",
    "qwen": "gym.format.families.qwen:Qwen",
    "llama3": "gym.format.families.llama3:Llama3",
    "deepseek": "gym.format.families.deepseek:DeepSeek",
}
CHOICES: tuple[str, ...] = ("auto", *CHAT_FORMATS)

# What a chat template holds when it speaks a family's tool-call format, checked in this order.
_TEMPLATE_MARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("deepseek", ("<｜tool▁calls▁begin｜>",)),
    ("qwen", ("<tool_call>", "<|im_start|>")),
    ("llama3", ("<|start_header_id|>", "ipython")),
    ("harmony", ("<|channel|>", "<|call|>")),
)
# config.json model_type -> format, when the template says nothing
_MODEL_TYPES = {
    "qwen2": "qwen",
    "qwen2_moe": "qwen",
    "qwen3": "qwen",
    "qwen3_moe": "qwen",
    "llama": "llama3",
    "deepseek_v3": "deepseek",
    "gpt_oss": "harmony",
}


class ChatFormat(Protocol):
    """Renders messages to token ids and parses sampled ids, for one tokenizer.

    A trajectory is ``render_prompt(prompt messages)``, then per turn the sampled ids, then either
    ``render_observation(tool result)`` followed by ``generation_prompt()``, or (after a turn that led to
    no tool result) ``resume(sampled ids)``. For turns that are the canonical rendering of their messages,
    ``render(messages)`` gives the same ids in one go: what `gym.trajectory.assert_token_exact` checks.
    """

    name: str
    tokenizer: Tokenizer

    def bind(self, tools: Sequence[ToolSpec]) -> ChatFormat:
        """This format for an episode offering ``tools`` (a family's template renders them into the prompt)."""
        ...

    def stop_ids(self) -> list[int]:
        """Ids that end a sampled turn."""
        ...

    def generation_prompt(self) -> list[int]:
        """What precedes a sampled turn after a tool result (the prompt already ends with it)."""
        ...

    def resume(self, sampled: Sequence[int]) -> list[int]:
        """What precedes the next sampled turn when ``sampled`` led to no tool result (a parse error)."""
        ...

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        """The prompt messages (system, developer, user) followed by the generation prompt."""
        ...

    def render_observation(self, message: Message) -> list[int]:
        """A tool result as it is appended after the sampled turn that called the tool."""
        ...

    def render_completion(self, messages: Sequence[Message]) -> list[int]:
        """The ids a policy samples for one turn of ``messages`` (the canonical form)."""
        ...

    def render(self, messages: Sequence[Message]) -> list[int]:
        """A whole conversation (prompt messages first) as incremental rendering builds it."""
        ...

    def parse_completion(self, ids: Sequence[int]) -> ParsedTurn | ParseError:
        """Strictly parse one sampled turn; never raises."""
        ...


def load_chat_format(name: str, tokenizer: Tokenizer, tokenizer_spec: str) -> ChatFormat:
    """The chat format ``name`` (a key of CHAT_FORMATS, or ``auto``) for ``tokenizer``, loaded by
    ``tokenizer_spec``: a family's format reads its chat template from the spec's directory (``hf:DIR``)."""
    if name == "auto":
        name = detect_chat_format(tokenizer_spec)
    if name not in CHAT_FORMATS:
        raise ChatFormatError(f"unknown chat format {name!r}; known: {', '.join(CHOICES)}")
    module_path, _, attr = CHAT_FORMATS[name].partition(":")
    cls = getattr(importlib.import_module(module_path), attr)
    if name == "harmony":
        return cls(tokenizer)
    directory = template_directory(tokenizer_spec)
    template = read_chat_template(directory) if directory is not None else None
    if template is None:
        where = f"{directory} has none" if directory is not None else f"tokenizer {tokenizer_spec!r} has none"
        raise ChatFormatError(
            f"chat format {name!r} renders prompts with the model's chat template, and {where}: "
            "use tokenizer hf:DIR, DIR holding tokenizer_config.json with a chat_template (or chat_template.jinja)"
        )
    return cls(tokenizer, template)


def detect_chat_format(tokenizer_spec: str) -> str:
    """The format a tokenizer's chat template speaks: ``harmony`` for a tokenizer without a template (the
    project's BPE, o200k_harmony, an hf directory without one), else the family whose tool-call markers the
    template holds, else the family of config.json's ``model_type``; ChatFormatError when none fits."""
    directory = template_directory(tokenizer_spec)
    template = read_chat_template(directory) if directory is not None else None
    if directory is None or template is None:
        return "harmony"
    for name, marks in _TEMPLATE_MARKS:
        if all(mark in template.template for mark in marks):
            return name
    model_type = _model_type(directory / "config.json")
    if model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    raise ChatFormatError(
        f"cannot tell which chat format the chat template of {directory} speaks (no tool-call markers of "
        f"{', '.join(CHAT_FORMATS)}; model_type {model_type!r}): set environment.chat_format to one of them"
    )


def _model_type(file: Path) -> str | None:
    """config.json's model_type; None when the file is absent (a tokenizer-only directory)."""
    value = read_json(file).get("model_type") if file.is_file() else None
    return value if isinstance(value, str) else None
