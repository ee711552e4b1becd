"""gpt-oss's ``o200k_harmony`` vocabulary through ``openai-harmony``, offline only.

openai-harmony fetches ``o200k_base.tiktoken`` over the network the first time
unless ``TIKTOKEN_ENCODINGS_BASE`` names a directory holding it. The gym never
downloads at run time, so this backend looks for the file first and always
hands the library that directory (the library then also checks the file's
SHA-256). Where it looks, in order:

1. ``$TIKTOKEN_ENCODINGS_BASE/o200k_base.tiktoken``
2. ``.cache/tiktoken/o200k_base.tiktoken`` under the repo root (git-ignored); for an installed
   wheel, ``code-rl-gym/tiktoken/`` in the user's cache (sandbox.distribution.built_dir).

Missing file -> :class:`TokenizerUnavailable` with that list, never a download.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from gym.format.tokenizer import HARMONY_SPECIALS, Tokenizer, TokenizerError, TokenizerUnavailable
from sandbox.distribution import built_dir

VOCAB_FILE = "o200k_base.tiktoken"
LOCAL_DIR = built_dir(".cache", "tiktoken")  # a checkout's .cache/ (git-ignored), or the user's cache
FIRST_SPECIAL_ID = 199998  # ids below are the o200k BPE ranks
VOCAB_SIZE = 201088  # specials and reserved ids fill 199998..201087


def find_vocab_dir() -> Path | None:
    """The first directory (see module doc) that holds o200k_base.tiktoken, or None."""
    candidates = [Path(base) for base in (os.environ.get("TIKTOKEN_ENCODINGS_BASE"),) if base]
    candidates.append(LOCAL_DIR)
    for directory in candidates:
        if (directory / VOCAB_FILE).is_file():
            return directory.resolve()
    return None


class O200kHarmonyTokenizer(Tokenizer):
    """The ``HARMONY_GPT_OSS`` encoding of openai-harmony behind the gym's interface."""

    def __init__(self, vocab_dir: Path) -> None:
        try:
            import openai_harmony
        except ImportError as exc:
            raise TokenizerUnavailable(
                "o200k_harmony needs the openai-harmony package (pip install openai-harmony)"
            ) from exc
        # Read by the Rust loader at load time; pointing it at the file is what prevents a download.
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(vocab_dir)
        try:
            self._encoding = openai_harmony.load_harmony_encoding(openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS)
        except openai_harmony.HarmonyError as exc:
            raise TokenizerError(f"{vocab_dir / VOCAB_FILE}: openai-harmony could not load it: {exc}") from exc
        self.name = "o200k_harmony"
        self._vocab_size = VOCAB_SIZE
        self._specials = {
            key: self._encoding.encode(text, allowed_special={text})[0] for key, text in HARMONY_SPECIALS.items()
        }
        digest = hashlib.sha256((vocab_dir / VOCAB_FILE).read_bytes()).hexdigest()
        self._fingerprint = f"o200k-{digest[:11]}"

    def encode(self, text: str) -> list[int]:
        # disallowed_special=() encodes special-looking text as ordinary text instead of raising.
        ids = self._encoding.encode(text, allowed_special=set(), disallowed_special=())
        if ids and max(ids) >= FIRST_SPECIAL_ID:
            raise TokenizerError(f"o200k_harmony: ordinary text encoded to a special id: {text[:80]!r}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._encoding.decode(list(ids), errors="replace")

    def is_special(self, token_id: int) -> bool:
        return token_id >= FIRST_SPECIAL_ID  # o200k_harmony: every id from 199998 on is special or reserved


def load_o200k_harmony(arg: str | None = None) -> O200kHarmonyTokenizer:
    """Load o200k_harmony from a local vocabulary (``arg`` may name its directory)."""
    directory = Path(arg) if arg else find_vocab_dir()
    if directory is None or not (directory / VOCAB_FILE).is_file():
        looked = (
            [str(Path(arg) / VOCAB_FILE)]
            if arg
            else [f"$TIKTOKEN_ENCODINGS_BASE/{VOCAB_FILE}", str(LOCAL_DIR / VOCAB_FILE)]
        )
        raise TokenizerUnavailable(
            f"o200k_harmony vocabulary not on disk (looked in {', '.join(looked)}); "
            "the gym never downloads it: copy o200k_base.tiktoken there to enable this backend"
        )
    return O200kHarmonyTokenizer(directory)
