"""The project's default tokenizer: a byte-level BPE trained offline, deterministically.

Trained with the ``tokenizers`` library from the generated corpus of
gym/format/corpus.py; the Harmony special tokens are its first ids (0..8, in the order
of HARMONY_SPECIALS). No normalizer and a byte-level pre-tokenizer without a
prefix space, so ``decode(encode(s)) == s`` for every string.

Reproducible: same config and library version, same file bytes (tested). The
file lives at ``build/tokenizer/tokenizer.json`` of a checkout (git-ignored) with
a ``.stamp`` beside it naming the corpus version and config; in a checkout it is
trained on first use when missing or stale. An installed wheel keeps it in the
user's cache (sandbox.distribution.built_dir) and never writes there unasked:
missing or stale is an error naming ``code-rl-gym tokenizer train``, which
writes it on purpose (as ``python -m gym tokenizer train`` does in a checkout).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gym.format.corpus import CORPUS_VERSION, corpus
from gym.format.tokenizer import HARMONY_SPECIALS, TokenizerError, TokenizersTokenizer, read_tokenizer_file
from sandbox.distribution import built_dir, checkout

log = logging.getLogger(__name__)

DEFAULT_PATH = (
    built_dir("build", "tokenizer") / "tokenizer.json"
)  # a checkout's build/ (git-ignored), or the user's cache


class BpeConfig(BaseModel):
    """How the default byte-level BPE is trained."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(8192, ge=512, le=65536, description="Total ids, specials and the 256 byte tokens included.")
    min_frequency: int = Field(2, ge=1, description="A pair must occur this often to be merged.")
    corpus_seed: int = Field(0, ge=0, description="Seed of the generated corpus (gym/format/corpus.py).")
    corpus_documents: int = Field(20_000, ge=100, description="Documents drawn from the generated corpus.")


def train_bpe(config: BpeConfig = BpeConfig()) -> str:
    """Train the BPE and return its tokenizer.json text (deterministic for a given config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(HARMONY_SPECIALS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus(config.corpus_seed, config.corpus_documents), trainer=trainer)
    # Re-wrapping marks the specials special and checks they stay single, unspoofable ids.
    return TokenizersTokenizer(backend, name="bpe").to_json()


def stamp(config: BpeConfig) -> str:
    """What a trained file was made from; a default file with another stamp is stale."""
    return json.dumps({"corpus_version": CORPUS_VERSION, **config.model_dump()}, sort_keys=True)


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".stamp")


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)  # a reader never sees half a file


def write_bpe(path: Path = DEFAULT_PATH, config: BpeConfig = BpeConfig()) -> Path:
    """Train and write tokenizer.json (and its ``.stamp`` beside it)."""
    started = time.monotonic()
    text = train_bpe(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, text)
    _write_atomically(_stamp_path(path), stamp(config) + "\n")
    log.info(
        "trained BPE tokenizer (corpus v%d, vocab %d) -> %s in %.1fs",
        CORPUS_VERSION,
        config.vocab_size,
        path,
        time.monotonic() - started,
    )
    return path


def load_bpe(path: str | None = None) -> TokenizersTokenizer:
    """The BPE at ``path``; by default build/tokenizer/tokenizer.json, (re)trained when missing or stale."""
    file = Path(path) if path else DEFAULT_PATH
    if path and not file.is_file():
        raise TokenizerError(f"{file}: no such tokenizer file (python -m gym tokenizer train --out {file})")
    if not path:
        stamp_file = _stamp_path(file)
        current = stamp_file.read_text().strip() if stamp_file.is_file() else None
        if not file.is_file() or current != stamp(BpeConfig()):
            if checkout() is None:  # an installed wheel: training takes a while and writes a file, so only when asked
                state = "is stale (trained from another corpus or config)" if file.is_file() else "is not built"
                raise TokenizerError(
                    f"the default bpe tokenizer {file} {state}: run `code-rl-gym tokenizer train` once"
                )
            log.info("default tokenizer %s %s: training it now (once)", file, "stale" if file.is_file() else "missing")
            write_bpe(file, BpeConfig())
    return TokenizersTokenizer(read_tokenizer_file(file), name=f"bpe:{file}" if path else "bpe")
