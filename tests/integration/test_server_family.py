"""`python -m gym serve` on a Hugging Face model in its family's chat format, end to end: a tiny random Qwen2 the
test writes, beside the Qwen2.5 tokenizer directory with its real chat template (tests/chat_format_support.py).

The serve config names no chat format: `gym serve` picks qwen from the template (as an environment's
``chat_format: auto`` does), renders the tools into the prompt with the template, and samples on the batch engine
(kv_cache: whole completions, watched by the server afterwards). The random model's replies are noise, so what is
checked is the wiring: the prompt is the template's (usage counts its tokens), replies come back as content or
tool calls without error, streamed and non-stream answers agree, and stop strings cut on this engine too.
"""

from __future__ import annotations

import json
import shutil

import pytest
import requests
import yaml
from openai import OpenAI

from gym.format.openai_chat import load_openai_chat
from tests.chat_format_support import ADD_TOOL, family_dir
from tests.policy_support import HF_TINY
from tests.serve_support import start_server, stop_server

ADD = ADD_TOOL
ASK = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model_dir = tmp_path_factory.mktemp("qwen2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(family_dir("qwen") / name, model_dir / name)
    vocab = len(json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]) + 64  # and added tokens
    config = Qwen2Config(**{**HF_TINY, "vocab_size": vocab, "max_position_embeddings": 1024})
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(model_dir)
    serve = {
        "policy": {"type": "hf", "path": str(model_dir)},
        "engine": {"max_batch_size": 4, "threads": 1},
        "server": {"served_model_name": "qwen-tiny"},
        "tokenizer": str(model_dir / "tokenizer.json"),
    }
    (model_dir / "serve.yaml").write_text(yaml.safe_dump(serve))
    proc, url = start_server(model_dir / "serve.yaml")
    yield url, model_dir
    stop_server(proc)


def test_gym_serve_renders_tools_in_the_qwen_template_and_answers(served) -> None:
    url, model_dir = served
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    request = {"model": "qwen-tiny", "messages": ASK, "tools": [ADD], "max_tokens": 12, "temperature": 0.0}
    whole = client.chat.completions.create(**request)
    chat = load_openai_chat(model_dir / "tokenizer.json")
    assert chat is not None and chat.name == "qwen"
    prompt = chat.render(ASK, [ADD])
    assert whole.usage.prompt_tokens == len(prompt)  # the template's prompt with the tools' schemas
    choice = whole.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.tool_calls or choice.message.content is not None  # noise, but an answer
    chunks = list(client.chat.completions.create(**request, stream=True))
    tokens = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
    assert tokens == choice.model_extra["token_ids"]
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason


def test_stop_strings_on_the_batch_engine(served) -> None:
    url, _ = served
    request = {"model": "qwen-tiny", "prompt": "def solve(n):", "max_tokens": 24, "temperature": 0.0}
    whole = requests.post(f"{url}/v1/completions", json=request, timeout=120).json()["choices"][0]
    text = whole["text"]
    assert len(text) >= 4, text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = requests.post(f"{url}/v1/completions", json={**request, "stop": stop}, timeout=120).json()["choices"][0]
    assert cut["text"] == text[: text.find(stop)] and cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert cut["token_ids"] == whole["token_ids"][: len(cut["token_ids"])]
