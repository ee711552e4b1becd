"""Tiny tokenizers trained in a test's temporary directory (a BPE file, a Hugging Face directory)."""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ["<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>", "<|call|>"]


def train_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(
        ["def add(a, b):\n    return a + b\n", "hello world, print the answer"] * 20, trainer=trainer
    )
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
