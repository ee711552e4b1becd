"""A local Hugging Face causal LM (a tiny random Qwen2 with its own tokenizer.json) trains as a process
verifier through the same path as our policy (`policy: {type: hf}`), and its checkpoint scores as trained."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from gym.format.tokenizer import load_tokenizer
from gym.format.verifier import VerifierFormat
from policies.scorer import StepScorer
from tasks.step_labels import read_step_rows
from tasks.step_samples import generate_rows
from tests.tokenizer_support import build_hf_dir
from trainer.verifier_train import VerifierConfig, predict, render_all, train_verifier


def test_an_hf_directory_trains_and_its_checkpoint_scores_the_same(tmp_path):
    directory = build_hf_dir(tmp_path / "hf")
    vocab = load_tokenizer(f"hf:{directory}").vocab_size
    torch.manual_seed(0)
    Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
    ).save_pretrained(directory)
    config = VerifierConfig(
        out=tmp_path / "run",
        train={"type": "arithmetic", "count": 60, "seed": 0},
        tokenizer=f"hf:{directory}",
        label_texts={"correct": "+", "wrong": "-"},  # one byte each: single tokens of any byte-level BPE
        policy={"type": "hf", "path": str(directory)},
        steps=3,
        batch_size=4,
        progress=False,
    )
    metrics = train_verifier(config)
    assert metrics["steps"] == 3 and metrics["heldout"]["model"]["slots"] > 0
    assert [text for text, _ in metrics["labels"].values()] == ["+", "-"]

    scorer = StepScorer.load(tmp_path / "run" / "checkpoint")
    assert type(scorer.model).__name__ == "Qwen2ForCausalLM"
    fmt = VerifierFormat(load_tokenizer(f"hf:{directory}"), "+", "-")
    rows, _ = render_all(fmt, read_step_rows([json.dumps(row) for row in generate_rows(3, seed=5)]).rows, 256)
    served = scorer.score([r.ids for r in rows], [r.positions for r in rows])  # one padded batch
    trained = predict(scorer.model, rows, fmt.label_ids, batch_size=1, device="cpu")  # row by row
    # measured max |diff| 0 (default, avx512 kernels) to 6e-8 (avx2): margin 170x
    assert [p for scores in served for p in scores] == pytest.approx([p for p, _, _ in trained], abs=1e-5)
