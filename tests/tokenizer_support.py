"""Tiny tokenizers trained in a test's temporary directory (a BPE file, a Hugging Face directory)."""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ["<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>", "<|call|>"]


def train_tokenizer(path: Path) -> Path:
    """A tiny byte-level BPE with six of Harmony's special tokens as its first ids."""
    return _train_bpe(path, SPECIALS, 300, ["def add(a, b):\n    return a + b\n", "hello world, print the answer"])


def train_harmony_tokenizer(path: Path) -> Path:
    """A tiny byte-level BPE whose first ids are every Harmony special token, as the project's own BPE."""
    from gym.format.tokenizer import HARMONY_SPECIALS

    lines = ["def add(a, b):\n    return a + b\n", 'functions commentary {"a": 2}']
    return _train_bpe(path, list(HARMONY_SPECIALS.values()), 400, lines)


def _train_bpe(path: Path, specials: list[str], vocab_size: int, lines: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines * 20, trainer=trainer)
    tok.save(str(path))
    return path


def build_hf_dir(directory: Path) -> Path:
    """A tiny Hugging Face tokenizer directory: byte-level BPE with BOS/EOS, a BOS template,
    and `<|start|>` already present as a *non-special* added token (it must be upgraded)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(
        ["def solve(n):\n    return n * 2\n", "hello world, the answer is 42."] * 50, trainer=trainer
    )
    backend.add_tokens([AddedToken("<|start|>", special=False, normalized=False)])
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    directory.mkdir(parents=True, exist_ok=True)
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return directory
