"""One tokenizer interface for the Harmony codec, and the registry of backends.

Three backends pass the same contract tests (tests/unit/test_tokenizer_contract.py):

- ``bpe``: the project's own byte-level BPE (gym/format/bpe.py), trained offline from a
  generated corpus; the default.
- ``o200k_harmony``: OpenAI's gpt-oss vocabulary through ``openai-harmony``, only
  when its vocabulary file is already on disk (gym/format/o200k.py; never downloaded).
- ``hf``: any Hugging Face tokenizer directory holding a ``tokenizer.json``, with
  the Harmony special tokens added when missing.

Spoofing hazard: ``encode`` is for *text* (model output, tool output, prompts) and
never yields a special-token id, even for text such as ``"<|call|>"``; special ids
enter a token stream only through ``special(name)``. Every backend enforces that.

Specs accepted by :func:`load_tokenizer`: ``bpe`` (the default file, trained on
first use), ``bpe:PATH`` or ``hf:DIR`` (a tokenizer.json file or a directory
holding one), ``o200k_harmony``.
"""

from __future__ import annotations

import abc
import hashlib
import importlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the `tokenizers` package loads only with a backend that needs it
    import tokenizers

# Harmony special tokens by short name. Each must be one id in every backend.
HARMONY_SPECIALS: dict[str, str] = {
    "startoftext": "<|startoftext|>",
    "endoftext": "<|endoftext|>",
    "return": "<|return|>",
    "constrain": "<|constrain|>",
    "channel": "<|channel|>",
    "start": "<|start|>",
    "end": "<|end|>",
    "message": "<|message|>",
    "call": "<|call|>",
}

# backend name -> "module:callable" taking the spec's argument (or None).
TOKENIZERS: dict[str, str] = {
    "bpe": "gym.format.bpe:load_bpe",
    "hf": "gym.format.tokenizer:load_tokenizer_json",
    "o200k_harmony": "gym.format.o200k:load_o200k_harmony",
}


class TokenizerError(Exception):
    """A tokenizer could not be loaded or broke the contract (names the input at fault)."""


class TokenizerUnavailable(TokenizerError):
    """A backend cannot run on this machine (e.g. its vocabulary is not on disk); says why."""


class Tokenizer(abc.ABC):
    """Text <-> token ids, with the Harmony special tokens as single ids."""

    name: str

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as ordinary text: never a special-token id."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special ids read as their ``<|name|>`` text; bad UTF-8 becomes U+FFFD."""

    # Set by each backend's __init__; read through the properties below.
    _vocab_size: int
    _fingerprint: str
    _specials: dict[str, int]

    @property
    def vocab_size(self) -> int:
        """Number of ids (including special tokens); every valid id is below it."""
        return self._vocab_size

    @property
    def fingerprint(self) -> str:
        """Short hash of the vocabulary: trajectories record it so ids are never read with another."""
        return self._fingerprint

    @property
    def special_ids(self) -> dict[str, int]:
        """Short Harmony name (see HARMONY_SPECIALS) -> its single id."""
        return dict(self._specials)

    def special(self, name: str) -> int:
        """Id of a Harmony special token by short name (``"call"``) or text (``"<|call|>"``)."""
        key = name[2:-2] if name.startswith("<|") and name.endswith("|>") else name
        try:
            return self._specials[key]
        except KeyError:
            raise TokenizerError(f"unknown special token {name!r}; known: {sorted(self.special_ids)}") from None

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special token: a Harmony one or another of the backend's (BOS, reserved)."""
        return token_id in self._special_set

    @property
    def _special_set(self) -> frozenset[int]:
        """Ids ``encode`` must never produce; backends with more specials than Harmony's override it."""
        cached = self.__dict__.get("_specials_cache")
        if cached is None:
            cached = frozenset(self.special_ids.values())
            self.__dict__["_specials_cache"] = cached
        return cached

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size}, fingerprint={self.fingerprint})"
        )


class TokenizersTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (the project BPE or a Hugging Face tokenizer.json).

    Missing Harmony specials are added as special tokens; ones already present
    are (re)marked special so that ``encode_special_tokens`` keeps their text
    ordinary. ``encode`` passes ``add_special_tokens=False`` so no BOS/EOS
    template is applied: the Harmony renderer decides every structural token.
    """

    def __init__(self, backend: tokenizers.Tokenizer, name: str) -> None:
        from tokenizers import AddedToken

        backend.add_special_tokens(
            [AddedToken(text, special=True, normalized=False) for text in HARMONY_SPECIALS.values()]
        )
        backend.encode_special_tokens = True  # special-looking text is encoded as ordinary text
        self._backend = backend
        self.name = name
        self._specials = {key: backend.token_to_id(text) for key, text in HARMONY_SPECIALS.items()}
        self._fingerprint = hashlib.sha256(backend.to_str().encode()).hexdigest()[:16]
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._all_specials = frozenset(i for i, added in backend.get_added_tokens_decoder().items() if added.special)
        for key, text in HARMONY_SPECIALS.items():  # a vocabulary that merges the text into the id is unusable
            if self._specials[key] in backend.encode(text, add_special_tokens=False).ids:
                raise TokenizerError(f"{name}: text {text!r} encodes to its special id; the vocabulary cannot be used")

    @property
    def _special_set(self) -> frozenset[int]:
        return self._all_specials

    def encode(self, text: str) -> list[int]:
        ids = self._backend.encode(text, add_special_tokens=False).ids
        if not self._special_set.isdisjoint(ids):  # the contract's guarantee, checked on every call
            raise TokenizerError(f"{self.name}: ordinary text encoded to a special id: {text[:80]!r}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=False)

    def token_id(self, text: str) -> int | None:
        """The id of the one token whose text is exactly ``text`` (an added token such as ``<|im_start|>``);
        None when the vocabulary has no such token. Chat formats find their markers with it."""
        return self._backend.token_to_id(text)

    def special_texts(self) -> dict[str, int]:
        """Text -> id of every special token (Harmony's and the backend's own): what ``encode`` keeps as text."""
        return {added.content: i for i, added in self._backend.get_added_tokens_decoder().items() if added.special}

    def to_json(self) -> str:
        """The backend's tokenizer.json text (with the Harmony specials added)."""
        return self._backend.to_str()


def load_tokenizer_json(path: str | None) -> TokenizersTokenizer:
    """A Hugging Face tokenizer from a ``tokenizer.json`` file or a model directory holding one.

    Read with the ``tokenizers`` library only: ``transformers`` would import torch,
    which the gym never does. Directories with only slow-tokenizer files
    (``vocab.json``/``merges.txt``, SentencePiece) must be saved once as a fast
    tokenizer (``save_pretrained`` writes ``tokenizer.json``).
    """
    if not path:
        raise TokenizerError("hf tokenizer needs a path: hf:DIR or hf:FILE")
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise TokenizerError(
            f"{path}: no tokenizer.json; save the tokenizer as a fast tokenizer (save_pretrained) first"
        )
    return TokenizersTokenizer(read_tokenizer_file(file), name=f"hf:{path}")


MAX_TOKENIZER_BYTES = 256 << 20  # the largest published tokenizer.json files are tens of MB
_NOT_FILES = ("/proc/", "/sys/", "/dev/")  # kernel views: endless (/proc/self/pagemap) or blocking (/proc/kmsg)


def tokenizer_bytes(file: Path) -> bytes:
    """The bytes of a tokenizer file, bounded before they are read: a regular file of at most
    MAX_TOKENIZER_BYTES outside /proc, /sys and /dev (a path can come from a replay bundle someone handed over)."""
    try:
        real = os.path.realpath(file)
        if real.startswith(_NOT_FILES):
            raise TokenizerError(f"{file}: not a tokenizer file ({real} is a kernel view, not a file)")
        # O_NONBLOCK: a FIFO put in the file's place opens at once (and is refused below) instead of blocking
        with os.fdopen(os.open(real, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TokenizerError(f"{file}: not a regular file")
            if info.st_size > MAX_TOKENIZER_BYTES:
                raise TokenizerError(f"{file}: {info.st_size} bytes, past the {MAX_TOKENIZER_BYTES >> 20} MiB bound")
            data = handle.read(MAX_TOKENIZER_BYTES + 1)
    except OSError as exc:
        raise TokenizerError(f"{file}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_TOKENIZER_BYTES:
        raise TokenizerError(f"{file}: past the {MAX_TOKENIZER_BYTES >> 20} MiB bound")
    return data


def read_tokenizer_file(file: Path) -> tokenizers.Tokenizer:
    """The ``tokenizers`` backend of a tokenizer.json file (read by `tokenizer_bytes`); a file it cannot load
    (binary, not JSON, not a tokenizer) is a TokenizerError naming the file, in one line."""
    from tokenizers import Tokenizer as Backend

    data = tokenizer_bytes(file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenizerError(
            f"{file}: not a tokenizer.json the tokenizers library can load (stream did not contain valid UTF-8)"
        ) from None
    try:
        return Backend.from_str(text)
    except Exception as exc:  # the tokenizers library raises bare Exception on malformed files (and UnicodeError)
        reason = " ".join(str(exc).split())
        raise TokenizerError(f"{file}: not a tokenizer.json the tokenizers library can load ({reason})") from exc


def load_tokenizer(spec: str = "bpe") -> Tokenizer:
    """Load a tokenizer by spec: ``NAME`` or ``NAME:ARG`` with NAME a key of TOKENIZERS."""
    name, _, arg = spec.partition(":")
    if name not in TOKENIZERS:
        raise TokenizerError(f"unknown tokenizer {name!r} in spec {spec!r}; known: {sorted(TOKENIZERS)}")
    module_path, _, attr = TOKENIZERS[name].partition(":")
    loader = getattr(importlib.import_module(module_path), attr)
    return loader(arg or None)


def describe(tokenizer: Tokenizer) -> dict[str, object]:
    """A JSON-ready summary (name, vocab size, fingerprint, special ids)."""
    return {
        "name": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "fingerprint": tokenizer.fingerprint,
        "special_ids": tokenizer.special_ids,
    }
