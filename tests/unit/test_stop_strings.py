"""`policies.stop_strings.TextWatch`: incremental text, stop strings and the pieces a stream may send.

A toy decode (each id one fixed string) checks the rules on hand values; a real byte-level BPE checks that text
split inside a character (an emoji's four bytes over several tokens) comes out whole and equal to one decode.
"""

from __future__ import annotations

import random

import pytest

from policies.stop_strings import MAX_PENDING, WINDOW, Piece, TextWatch
from tests.tokenizer_support import train_tokenizer

VOCAB = {0: "Hel", 1: "lo", 2: " wo", 3: "rld", 4: "!", 5: "<end>", 6: "w", 7: "o", 8: "r"}


def _decode(ids) -> str:
    return "".join(VOCAB[i] for i in ids)


def _run(tokens: list[int], stops=(), silent=frozenset()) -> tuple[TextWatch, list[Piece], int | None]:
    pieces: list[Piece] = []
    watch = TextWatch(_decode, stops, silent, sink=pieces.append)
    stopped = None
    for i, token in enumerate(tokens):
        if watch(token, -0.5):
            stopped = i
            break
    watch.finish()
    return watch, pieces, stopped


def test_a_stop_string_over_two_tokens_cuts_the_text_before_it_and_keeps_the_token() -> None:
    watch, pieces, stopped = _run([0, 1, 2, 3, 4], stops=["world"])
    # " wo" + "rld" completes "world" at token 3: the row stops there, the text ends before the string
    assert stopped == 3 and watch.stopped_at == 3 and watch.stop_reason == "world"
    assert watch.text == "Hello "
    assert [t for p in pieces for t in p.tokens] == [0, 1, 2, 3]  # every sampled token, the completing one too
    assert "".join(p.text for p in pieces) == "Hello "


def test_text_that_may_begin_a_stop_string_is_held_back_until_it_cannot() -> None:
    _, pieces, stopped = _run([0, 1, 6, 7, 4], stops=["wor"])
    assert stopped is None
    # "w" then "o" could begin "wor": released only once "!" rules it out
    assert [p.text for p in pieces] == ["Hel", "lo", "", "", "wo!"]
    _, pieces, _ = _run([0, 1, 6, 7, 8], stops=["wor"])
    assert "".join(p.text for p in pieces) == "Hello" and all("w" not in p.text for p in pieces)


def test_without_stop_strings_every_piece_is_released_at_once_and_finish_flushes() -> None:
    watch, pieces, stopped = _run([0, 1, 2, 3])
    assert stopped is None and [p.text for p in pieces] == ["Hel", "lo", " wo", "rld"]
    assert [p.logprobs for p in pieces] == [[-0.5]] * 4
    assert watch.text == "Hello world"


def test_silent_tokens_add_no_text() -> None:
    watch, pieces, _ = _run([0, 1, 5], silent=frozenset({5}))
    assert watch.text == "Hello" and pieces[-1].tokens == [5] and pieces[-1].text == ""


def test_the_earliest_of_several_stop_strings_wins() -> None:
    watch, _, stopped = _run([0, 1, 2, 3], stops=["rld", "lo w"])
    assert stopped == 2 and watch.stop_reason == "lo w" and watch.text == "Hel"


def test_tokens_after_a_stop_are_ignored() -> None:
    watch = TextWatch(_decode, ["lo"])
    assert not watch(0) and watch(1) and watch(2)
    assert watch.tokens == [0, 1] and watch.text == "Hel"


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(train_tokenizer(tmp_path_factory.mktemp("bpe") / "tokenizer.json")))


def test_a_character_split_over_byte_tokens_comes_out_whole(bpe) -> None:
    text = "héllo 🎉 wörld, naïve café 日本語 done"
    ids = bpe.encode(text).ids
    assert len(ids) > len(text.split())  # bytes of the rare characters are tokens of their own

    def decode(tokens):
        return bpe.decode(list(tokens), skip_special_tokens=False)

    pieces: list[Piece] = []
    watch = TextWatch(decode, sink=pieces.append)
    for token in ids:
        watch(token)
    watch.finish()
    assert watch.text == decode(ids) == text
    assert all("\ufffd" not in p.text for p in pieces)  # no half character was ever released
    assert "".join(p.text for p in pieces) == text


def test_random_streams_release_exactly_the_cut_text_and_never_a_partial_stop(bpe) -> None:
    def decode(tokens):
        return bpe.decode(list(tokens), skip_special_tokens=False)

    rng = random.Random(0)
    corpus = "def add(a, b):\n    return a + b\nhello world, print the answer 🎉 ünïcode"
    for _ in range(200):
        start = rng.randrange(len(corpus) - 10)
        text = corpus[start : start + rng.randrange(5, 40)]
        ids = bpe.encode(text).ids
        stop = text[rng.randrange(len(text)) :][: rng.randrange(1, 5)]
        pieces: list[Piece] = []
        watch = TextWatch(decode, [stop], sink=pieces.append)
        for token in ids:
            if watch(token):
                break
        watch.finish()
        assert watch.text == text[: text.find(stop)]  # OpenAI: the text ends before the first stop string
        released = ""
        for piece in pieces:
            released += piece.text
            assert watch.text.startswith(released)  # nothing beyond the cut was ever sent
        assert released == watch.text
        assert stop in decode(watch.tokens)  # the tokens kept reach the stop string


def test_bytes_that_never_form_a_character_cost_a_bounded_window(bpe) -> None:
    """A policy may sample lone continuation bytes for ever: each step still decodes a few tokens, not all."""
    decoded = []

    def decode(tokens):
        decoded.append(len(tokens))
        return bpe.decode(list(tokens), skip_special_tokens=False)

    stray = bpe.encode("é").ids[-1:]  # the second byte of "é" alone: never a character
    assert decode(stray * 3).endswith("\ufffd")
    watch = TextWatch(decode, ["never"])
    for _ in range(600):
        watch(stray[0])
    watch.finish()
    assert max(decoded) <= 2 * (MAX_PENDING + WINDOW) and watch.text.count("\ufffd") > 0
