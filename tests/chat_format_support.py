"""Tiny Hugging Face tokenizer directories of the model families, written by the tests: a byte-level BPE trained on
a few lines, the family's special and added tokens with the flags the real tokenizer gives them, the family's
pre-tokenizer pattern, and its real chat template in tokenizer_config.json. Nothing is downloaded: the templates
in tests/chat_templates/ are the ``chat_template`` strings the models' tokenizer_config.json files ship, byte for
byte as TRL keeps them to recognise a model by its template (trl/chat_templates/qwen2_5.jinja, llama3_2.jinja,
deepseekv3.jinja).

- ``qwen``: Qwen2.5's template; ``<|im_start|>``/``<|im_end|>``/``<|endoftext|>`` special, ``<tool_call>``,
  ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` added but not special (as in Qwen2.5).
- ``llama3``: Llama 3.2's template; ``<|begin_of_text|>``, headers, ``<|eot_id|>``, ``<|eom_id|>``,
  ``<|python_tag|>`` special.
- ``deepseek``: DeepSeek-V3's template (as TRL keeps it for identity checks: it renders no tools and opens a
  ``<think>`` block in the generation prompt); begin/end of sentence special, the User/Assistant and tool
  tokens added, ``<think>``/``</think>`` added.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "chat_templates"

# The pre-tokenizer split of Qwen2's tokenizer.json (Llama 3's differs only in \p{N}{1,3}).
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

CORPUS = [
    "def solve(n):\n    return n * 2\n",
    'print("hello world") and the answer is 42.\n\n',
    '{"name": "write_file", "arguments": {"path": "solution.py", "content": "x"}}\n',
    "I will write my solution to solution.py. Let me run it on the example input.\n",
    "python3 -m py_compile solution.py; [exit code 0]\nstdout:\n",
]

FAMILIES: dict[str, dict] = {
    "qwen": {
        "template": "qwen2_5.jinja",
        "split": QWEN_SPLIT,
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "config": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None},
        "model_type": "qwen2",
    },
    "llama3": {
        "template": "llama3_2.jinja",
        "split": LLAMA_SPLIT,
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        "added": [],
        "config": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "model_type": "llama",
    },
    "deepseek": {
        "template": "deepseek_v3.jinja",
        "split": QWEN_SPLIT,
        "special": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"],
        "added": [
            "<｜User｜>",
            "<｜Assistant｜>",
            "<think>",
            "</think>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁outputs▁begin｜>",
            "<｜tool▁outputs▁end｜>",
            "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>",
            "<｜tool▁sep｜>",
        ],
        "config": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
        "model_type": "deepseek_v3",
    },
}


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
"""An OpenAI function tool, as a chat request offers it (the server tests)."""


def write_family_dir(directory: Path, family: str, template: str | None = None) -> Path:
    """A tokenizer directory of ``family`` (tokenizer.json, tokenizer_config.json with the chat template,
    config.json with the model type); ``template`` replaces the family's chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = FAMILIES[family]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec["split"]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=spec["special"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS * 20, trainer=trainer)
    backend.add_tokens([AddedToken(text, special=False, normalized=False) for text in spec["added"]])
    directory.mkdir(parents=True, exist_ok=True)
    backend.save(str(directory / "tokenizer.json"))
    config = {
        **spec["config"],
        "chat_template": template if template is not None else (TEMPLATES / spec["template"]).read_text("utf-8"),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "config.json").write_text(json.dumps({"model_type": spec["model_type"]}), encoding="utf-8")
    return directory


@functools.cache
def family_dir(family: str) -> Path:
    """One directory per family for the whole test session (under a fresh temporary directory)."""
    import tempfile

    return write_family_dir(Path(tempfile.mkdtemp(prefix=f"chat-{family}-")), family)


def hf_tokenizer(directory: Path):
    """transformers' own tokenizer of the directory: what the anchors call apply_chat_template on."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory))
