"""The server's text tokenizer (`policies.tokenizer.TextTokenizer`): batch encoding, chats, and the bound on
characters per token that lets the server refuse text before tokenizing it."""

from __future__ import annotations

import json
import random

from policies.tokenizer import TextTokenizer
from tests.tokenizer_support import train_tokenizer

TEXTS = ["def add(a, b):", "hello world, print the answer", "", "é漢字 <|end|> 🙂", "  spaces  \n\ttabs", "x" * 300]


def test_encode_many_is_encode_of_each_and_chats_render_as_before(tmp_path) -> None:
    tok = TextTokenizer(train_tokenizer(tmp_path / "tokenizer.json"))
    assert tok.encode_many(TEXTS) == [tok.encode(t) for t in TEXTS]
    messages = [("user", "hello <|end|> world"), ("assistant", "def add(a, b):")]
    ids, stops = tok.render_chat(messages)
    start, message, end = (tok.token_id(t) for t in ("<|start|>", "<|message|>", "<|end|>"))
    expected = []
    for role, content in messages:
        expected += [start, *tok.encode(role), message, *tok.encode(content), end]
    expected += [start, *tok.encode("assistant"), tok.token_id("<|channel|>"), *tok.encode("final"), message]
    assert ids == expected and end in stops
    assert tok.encode("<|end|>") != [end]  # user text never encodes to a special id


def test_no_text_encodes_to_fewer_tokens_than_the_bound_says(tmp_path) -> None:
    tok = TextTokenizer(train_tokenizer(tmp_path / "tokenizer.json"))
    assert tok.max_token_chars is not None and tok.max_token_chars >= 2
    rng = random.Random(0)
    alphabet = "abcdefhilnoprstuw ,():+\n\té漢🙂<|>"
    texts = TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(300)]
    texts += ["hello world, print the answer" * 20, "def add(a, b):\n    return a + b\n" * 10]
    for text in texts:
        tokens = len(tok.encode(text))
        assert not tok.too_long(len(text), tokens), (text[:60], tokens)  # never refuses text that fits
        assert len(text) <= tokens * tok.max_token_chars


def test_a_tokenizer_that_can_drop_characters_gives_no_bound(tmp_path) -> None:
    """A normalizer (here: strip) or a whitespace pre-tokenizer can make text shorter than its tokens say:
    then nothing is refused before tokenizing."""
    path = train_tokenizer(tmp_path / "tokenizer.json")
    spec = json.loads(path.read_text())
    spec["normalizer"] = {"type": "Strip", "strip_left": True, "strip_right": True}
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(spec))
    tok = TextTokenizer(stripped)
    assert tok.max_token_chars is None and not tok.too_long(10**9, 1)
    assert tok.encode(" " * 1000 + "hello") == tok.encode("hello")  # 1005 characters, a few tokens
