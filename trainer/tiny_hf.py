"""A tiny Hugging Face Qwen2 model directory written locally: random-init weights from an architecture's
config.json and a Qwen2.5-format tokenizer trained here (nothing is downloaded).

``python -m trainer.tiny_hf SPEC_DIR OUT [--seed S]`` reads ``SPEC_DIR/config.json`` (the architecture; its
``vocab_size`` is the tokenizer's budget) and ``SPEC_DIR/chat_template.jinja`` (Qwen2.5's template, byte for byte
as its tokenizer_config.json ships it) and writes ``OUT`` with ``config.json``, ``model.safetensors`` (seeded
random init), ``tokenizer.json`` and ``tokenizer_config.json``. The tokenizer is a byte-level BPE with Qwen2's
pre-tokenizer split, trained on the project's generated corpus (`gym.format.corpus`: the Python, tool arguments
and prose of the gym's token streams), with Qwen2.5's special tokens (``<|endoftext|>``, ``<|im_start|>``,
``<|im_end|>``) and its added, non-special tool tokens (``<tool_call>``, ``</tool_call>``, ``<tool_response>``,
``</tool_response>``), so the gym renders the Qwen chat format and parses its ``<tool_call>`` JSON as for a real
Qwen2.5. The model's vocabulary is the gym's tokenizer's size (the Harmony specials it adds included).

Same spec and seed, same tokenizer and weights (the corpus and the trainer are deterministic). Used by
configs/qwen_tiny_grpo.yaml and by ``gym bench generate --against vllm``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# Qwen2's tokenizer.json pre-tokenizer split
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
CORPUS_DOCUMENTS = 4000
"""Documents of `gym.format.corpus` the tokenizer is trained on (~10 s)."""


def write_tokenizer(spec_dir: Path, out: Path, vocab_size: int) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` (with ``spec_dir``'s chat template) in ``out``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from gym.format.corpus import corpus

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # room for the added tool tokens and the Harmony specials the gym's hf tokenizer adds (9)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED) - 9,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus(seed=0, documents=CORPUS_DOCUMENTS), trainer=trainer)
    backend.add_tokens([AddedToken(text, special=False, normalized=False) for text in ADDED])
    out.mkdir(parents=True, exist_ok=True)
    backend.save(str(out / "tokenizer.json"))
    config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": (spec_dir / "chat_template.jinja").read_text("utf-8"),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def write_tiny_qwen(spec_dir: Path, out: Path, seed: int = 0) -> Path:
    """The model directory ``out`` (module docstring); returns it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gym.format.tokenizer import load_tokenizer

    spec = json.loads((spec_dir / "config.json").read_text())
    write_tokenizer(spec_dir, out, int(spec["vocab_size"]))
    spec["vocab_size"] = load_tokenizer(f"hf:{out}").vocab_size
    config = AutoConfig.for_model(**{k: v for k, v in spec.items() if k != "architectures"})
    config.architectures = spec.get("architectures")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).float()
    model.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m trainer.tiny_hf", description=__doc__.splitlines()[0])
    parser.add_argument("spec_dir", type=Path, help="directory with config.json and chat_template.jinja")
    parser.add_argument("out", type=Path, help="the model directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random init")
    args = parser.parse_args()
    print(write_tiny_qwen(args.spec_dir, args.out, args.seed))


if __name__ == "__main__":
    main()
