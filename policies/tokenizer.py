"""Text in and out for the server's human-facing paths (`text` fields, `/v1/chat/completions`).

The engine and the RL path work on token ids only; this wraps a `tokenizers` JSON file (such as
the gym's byte-level BPE with Harmony special tokens) to decode completions and render chats.

As in the gym's tokenizer, `encode` never yields a special-token id, even for text such as
"<|end|>": special ids enter a prompt only where the chat template puts them, so a user message
cannot forge a turn boundary.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

# Harmony special tokens; chats are rendered in Harmony when the tokenizer has them.
START, MESSAGE, END, CHANNEL, RETURN, CALL = (
    "<|start|>",
    "<|message|>",
    "<|end|>",
    "<|channel|>",
    "<|return|>",
    "<|call|>",
)


class TextTokenizer:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer JSON file at {path}")
        self.path = path
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises bare Exception on a file it cannot read
            raise ValueError(f"{path}: not a tokenizer.json ({' '.join(str(exc).split())})") from None
        self._tok.encode_special_tokens = True  # text never encodes to a special id
        # the most characters of text one token stands for (its vocabulary string or its decoded text, the longer;
        # added tokens included): a text of more than tokens x this cannot encode to at most `tokens` ids
        # (`too_long`). Only where every character of the text reaches a token: no normalizer (NFKC, replacements
        # and stripping shrink text) and no pre-tokenizer but byte-level (a whitespace split drops the spaces)
        spec = json.loads(path.read_text(encoding="utf-8"))
        pre = (spec.get("pre_tokenizer") or {}).get("type")
        if spec.get("normalizer") is None and pre in (None, "ByteLevel"):
            vocab = self._tok.get_vocab(with_added_tokens=True)
            self.max_token_chars: int | None = max(
                [1]
                + [max(len(piece), len(self._tok.decode([i], skip_special_tokens=False))) for piece, i in vocab.items()]
            )
        else:
            self.max_token_chars = None

    def too_long(self, characters: int, tokens: int) -> bool:
        """Whether text of ``characters`` characters surely encodes to more than ``tokens`` ids (no tokenizing);
        False where the tokenizer gives no such bound (`max_token_chars` None)."""
        return self.max_token_chars is not None and characters > tokens * self.max_token_chars

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, in one call that releases the GIL (a server's event loop goes on meanwhile)."""
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    @property
    def harmony(self) -> bool:
        return all(self.token_id(t) is not None for t in (START, MESSAGE, END))

    def render_chat(self, messages: list[tuple[str, str]]) -> tuple[list[int], list[int]]:
        """(prompt ids ending where the assistant's answer starts, stop token ids) for (role, content) pairs.

        Harmony when the special tokens exist: `<|start|>{role}<|message|>{content}<|end|>` per
        message, then `<|start|>assistant<|channel|>final<|message|>`, stopping on <|end|>,
        <|return|> or <|call|>. Otherwise a plain `role: content` transcript with no stop token.
        """
        if not self.harmony:
            text = "".join(f"{role}: {content}\n" for role, content in messages) + "assistant:"
            return self.encode(text), []
        start, message, end = self.token_id(START), self.token_id(MESSAGE), self.token_id(END)
        pieces = iter(self.encode_many([text for pair in messages for text in pair] + ["assistant", "final"]))
        ids: list[int] = []
        for _ in messages:
            ids += [start, *next(pieces), message, *next(pieces), end]
        ids += [start, *next(pieces)]
        channel = self.token_id(CHANNEL)
        if channel is not None:
            ids += [channel, *next(pieces)]
        ids.append(message)
        stops = [t for t in (end, self.token_id(RETURN), self.token_id(CALL)) if t is not None]
        return ids, stops
