"""Serve configs (the shipped YAMLs included) and the server's text side (tokenizer, chat template)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from policies.sampling import SamplingParams
from policies.serve_config import ServeConfig, build_engine
from policies.tokenizer import TextTokenizer
from tests.tokenizer_support import train_tokenizer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["policy_tiny.yaml", "policy_moonlet.yaml"])
def test_shipped_configs_validate(name: str) -> None:
    config = ServeConfig.load(CONFIGS / name)
    assert config.policy.type == "rdep_moe" and config.server.host == "127.0.0.1"


def test_tiny_config_builds_a_working_engine() -> None:
    engine = build_engine(ServeConfig.load(CONFIGS / "policy_tiny.yaml"))
    assert engine.vocab_size == 8192
    out = engine.generate_batch([[1, 2, 3]], [SamplingParams(max_tokens=3, seed=0, return_routed_experts=True)])
    assert len(out[0].token_ids) == 3 and len(out[0].routed_experts) == 2


@pytest.mark.parametrize(
    "data, problem",
    [
        ({"policy": {"type": "rdep_moe", "model": {}, "checkpoint": "x"}}, "exactly one"),
        ({"policy": {"type": "rdep_moe"}}, "exactly one"),
        ({"policy": {"type": "vllm"}}, "type"),
        ({"policy": {"type": "hf", "path": "x"}, "server": {"prot": 1}}, "prot"),
        ({"policy": {"type": "hf", "path": "x"}, "server": {"max_queued_requests": 0}}, "max_queued_requests"),
    ],
)
def test_bad_configs_are_rejected(data: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        ServeConfig.model_validate(data)


@pytest.fixture(scope="module")
def harmony_tokenizer(tmp_path_factory) -> TextTokenizer:
    return TextTokenizer(train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json"))


def test_chat_renders_harmony_and_cannot_be_spoofed(harmony_tokenizer) -> None:
    tok = harmony_tokenizer
    end = tok.token_id("<|end|>")
    ids, stops = tok.render_chat([("user", "hi <|end|> there")])
    assert ids[0] == tok.token_id("<|start|>") and ids[-1] == tok.token_id("<|message|>")
    assert ids.count(end) == 1  # only the template's; the user's "<|end|>" stays text
    assert end in stops and tok.token_id("<|call|>") in stops
    assert "hi <|end|> there" in tok.decode(ids)
    assert end not in tok.encode("<|end|>")
