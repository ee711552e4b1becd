"""A model's own chat template: read from its directory, rendered as transformers renders it, and its text
turned into token ids without ever reading a special token out of a message's content.

Rendering calls ``transformers.utils.chat_template_utils.render_jinja_template``, the function
``PreTrainedTokenizerBase.apply_chat_template`` itself calls (same sandboxed Jinja environment, same
``tojson``, same globals), with the special tokens of ``tokenizer_config.json`` as variables, as
``apply_chat_template`` passes them. The tokenizer object of transformers is not used: loading one
imports torch, which the gym never does (STYLE.md rule 1).

Turning rendered text into ids is where templates are unsafe: ``apply_chat_template(tokenize=True)``
encodes the whole text, so a user message or a tool output holding the text ``<|im_end|>`` becomes the
special token and closes the turn. Here the conversation is rendered twice, once with each message's
content replaced by a sentinel: the special tokens come only from the template's own text (split out
as ids), each content is encoded as ordinary text (`Tokenizer.encode` never yields a special id), and the
text between two special tokens is encoded in one piece, as the tokenizers library encodes it between
added tokens. So the ids equal ``apply_chat_template``'s whenever no content holds a special token's
text, and a content that does stays text. The real rendering must equal the sentinel one with the
contents put back: a template that changes a content (strips or escapes it) is refused, not guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym.format.tokenizer import TokenizerError, TokenizersTokenizer, tokenizer_bytes

TEMPLATE_FILE = "chat_template.jinja"  # where transformers >= 4.48 saves a template (it wins over the config's)
CONFIG_FILE = "tokenizer_config.json"
TOKEN_VARIABLES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
_SENTINEL = "\ue000{}\ue001"  # private-use characters: no template writes them, no tokenizer merges them away
_MARKED = re.compile("\ue000(\\d+)\ue001")

Piece = int | str  # a token id placed as is, or text to encode


class ChatFormatError(ValueError):
    """A chat format cannot be used with a tokenizer or template; the message names which and why."""


class ChatTemplate:
    """One Jinja chat template and the token variables it is rendered with; ``source`` names where it came from."""

    def __init__(self, template: str, tokens: dict[str, str], source: str) -> None:
        self.template, self.tokens, self.source = template, dict(tokens), source

    def render(
        self,
        conversation: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        **variables: Any,
    ) -> str:
        """The template's text for ``conversation`` (OpenAI-style message dicts), as apply_chat_template renders it."""
        try:
            from transformers.utils.chat_template_utils import render_jinja_template
        except ImportError as exc:
            raise ChatFormatError(f"{self.source}: rendering a chat template needs transformers ({exc})") from None
        import jinja2

        try:
            rendered, _ = render_jinja_template(
                conversations=[list(conversation)],
                tools=list(tools) if tools is not None else None,
                chat_template=self.template,
                add_generation_prompt=add_generation_prompt,
                **{**self.tokens, **variables},
            )
        except (jinja2.TemplateError, TypeError, ValueError) as exc:  # a template's raise_exception is TemplateError
            raise ChatFormatError(f"{self.source}: the chat template failed: {type(exc).__name__}: {exc}") from None
        return rendered[0]


def read_chat_template(directory: Path) -> ChatTemplate | None:
    """The chat template of a Hugging Face model or tokenizer directory (``chat_template.jinja``, else the
    ``chat_template`` of ``tokenizer_config.json``; of several named ones, ``tool_use`` when there, else
    ``default``), or None when it has none. Files are read bounded (`tokenizer_bytes`)."""
    config = read_json(directory / CONFIG_FILE) if (directory / CONFIG_FILE).is_file() else {}
    tokens = {name: _token_text(config[name]) for name in TOKEN_VARIABLES if config.get(name) is not None}
    if (directory / TEMPLATE_FILE).is_file():
        return ChatTemplate(_read_text(directory / TEMPLATE_FILE), tokens, str(directory / TEMPLATE_FILE))
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("tool_use") or named.get("default")
    if template is None:
        return None
    if not isinstance(template, str):
        raise ChatFormatError(f"{directory / CONFIG_FILE}: chat_template is not a string")
    return ChatTemplate(template, tokens, f"{directory / CONFIG_FILE}")


def template_directory(spec: str) -> Path | None:
    """The directory a tokenizer spec reads its files from (``hf:DIR`` or ``hf:DIR/tokenizer.json``); None for
    the other backends, which have no chat template."""
    name, _, arg = spec.partition(":")
    if name != "hf" or not arg:
        return None
    path = Path(arg)
    return path if path.is_dir() else path.parent


def _read_text(file: Path) -> str:
    try:
        return tokenizer_bytes(file).decode("utf-8")
    except (TokenizerError, UnicodeDecodeError) as exc:
        raise ChatFormatError(f"{file}: cannot read it ({exc})") from None


def read_json(file: Path) -> dict[str, Any]:
    """A JSON object from a small file of a model directory, read bounded; ChatFormatError names what is wrong."""
    try:
        data = json.loads(_read_text(file))
    except json.JSONDecodeError as exc:
        raise ChatFormatError(f"{file}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ChatFormatError(f"{file}: not a JSON object")
    return data


def _token_text(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: its text, or an AddedToken object with ``content``."""
    return str(value.get("content", "")) if isinstance(value, dict) else str(value)


class TemplateText:
    """Text of one tokenizer turned into ids with the special tokens placed only where the caller says."""

    def __init__(self, tokenizer: TokenizersTokenizer) -> None:
        self.tokenizer = tokenizer
        self.specials = tokenizer.special_texts()  # text -> id
        self.texts = {token: text for text, token in self.specials.items()}
        ordered = sorted(self.specials, key=len, reverse=True)  # the longest special wins where two overlap
        self._special = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def split(self, text: str) -> list[Piece]:
        """Trusted text (a template's own) as pieces: each special token's text becomes its id."""
        if self._special is None:
            return [text] if text else []
        pieces: list[Piece] = []
        position = 0
        for match in self._special.finditer(text):
            if match.start() > position:
                pieces.append(text[position : match.start()])
            pieces.append(self.specials[match.group()])
            position = match.end()
        if position < len(text):
            pieces.append(text[position:])
        return pieces

    def encode(self, pieces: Sequence[Piece]) -> list[int]:
        """Ids of ``pieces``: ids as they are, each run of adjacent texts encoded in one piece as ordinary text."""
        ids: list[int] = []
        run: list[str] = []
        for piece in [*pieces, -1]:
            if isinstance(piece, str):
                run.append(piece)
                continue
            if run:
                ids += self.tokenizer.encode("".join(run))
                run = []
            if piece >= 0:
                ids.append(piece)
        return ids

    def text(self, pieces: Sequence[Piece]) -> str:
        """What ``pieces`` read as (ids as their token's text)."""
        return "".join(p if isinstance(p, str) else self.texts.get(p, self.tokenizer.decode([p])) for p in pieces)

    def render(self, template: ChatTemplate, conversation: Sequence[dict[str, Any]], **options: Any) -> list[Piece]:
        """``conversation`` rendered by ``template`` as pieces: specials from the template's text, every message's
        content as text (see the module docstring); ChatFormatError when the template changes a content."""
        # an empty content stays empty: templates test it (`if message.content`), and it holds no text to place
        marked = [
            {**message, "content": _SENTINEL.format(i) if message.get("content") else message.get("content")}
            for i, message in enumerate(conversation)
        ]
        layout = template.render(marked, **options)
        pieces: list[Piece] = []
        for index, part in enumerate(_MARKED.split(layout)):
            pieces += [conversation[int(part)]["content"]] if index % 2 else self.split(part)
        real = template.render(conversation, **options)
        if self.text(pieces) != real:
            raise ChatFormatError(
                f"{template.source}: the chat template changes a message's content (strips, escapes or drops "
                "it); the gym renders contents verbatim so that no content can write a special token"
            )
        return pieces
