"""The real `python -m gym serve` process, driven with the official openai client and plain HTTP.

The server runs a tiny random RDEP MoE policy and a tiny byte-level BPE (with the Harmony special
tokens) that the test trains itself; loopback only.
"""

from __future__ import annotations

import openai
import pytest
import requests
import torch
import yaml
from openai import OpenAI
from safetensors.torch import save, save_file

from tests.serve_support import MODEL, start_server, stop_server
from tests.tokenizer_support import train_tokenizer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    config = {
        "policy": {"type": "rdep_moe", "seed": 0, "model": MODEL},
        "engine": {"max_batch_size": 8, "threads": 1},
        "server": {"max_queued_requests": 16, "served_model_name": "policy"},  # the name the requests give
        "tokenizer": str(train_tokenizer(tmp / "tokenizer.json")),
    }
    (tmp / "serve.yaml").write_text(yaml.safe_dump(config))
    log: list[str] = []
    proc, url = start_server(tmp / "serve.yaml", log)
    # engine.threads sets the process's torch threads (OMP_NUM_THREADS above says 2)
    assert any("torch threads: 1" in line for line in log), "".join(log)
    yield url, tmp
    stop_server(proc)


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=120)


def test_health_and_models(server, client) -> None:
    health = requests.get(f"{server[0]}/health", timeout=30).json()
    assert health["status"] == "ok" and health["context_length"] == 256
    assert [m.id for m in client.models.list().data] == [health["model"]]


def test_token_ids_in_token_ids_and_logprobs_out(client) -> None:
    out = client.completions.create(
        model="policy",
        prompt=[5, 6, 7, 8],
        max_tokens=6,
        temperature=0.8,
        seed=3,
        logprobs=1,
        extra_body={"top_k": 50, "return_routed_experts": True},
    )
    choice = out.choices[0]
    extra = choice.model_extra
    assert len(extra["token_ids"]) == 6 and choice.finish_reason == "length"
    assert len(choice.logprobs.token_logprobs) == 6 and all(lp <= 0 for lp in choice.logprobs.token_logprobs)
    assert len(extra["raw_logprobs"]) == 6 and extra["raw_logprobs"] != choice.logprobs.token_logprobs
    routes = extra["routed_experts"]
    assert len(routes) == 2 and len(routes[0]) == 4 + 6 and routes[0][-1] == [-1, -1]
    assert out.model_extra["weights_version"] == 0
    assert out.usage.prompt_tokens == 4 and out.usage.completion_tokens == 6
    again = client.completions.create(
        model="policy", prompt=[5, 6, 7, 8], max_tokens=6, temperature=0.8, seed=3, extra_body={"top_k": 50}
    )
    assert again.choices[0].model_extra["token_ids"] == extra["token_ids"]  # seeded


def test_batched_prompts_and_n(client) -> None:
    out = client.completions.create(model="policy", prompt=[[1, 2, 3], [4, 5]], max_tokens=3, n=2, seed=0)
    assert len(out.choices) == 4
    prompts = [c.model_extra["prompt_token_ids"] for c in out.choices]
    assert prompts == [[1, 2, 3], [1, 2, 3], [4, 5], [4, 5]]
    # row i (prompts x n, in order) samples with seed + i, as that row sent alone with that seed: once, not twice
    for i, choice in enumerate(out.choices):
        alone = client.completions.create(model="policy", prompt=prompts[i], max_tokens=3, seed=i)
        assert alone.choices[0].model_extra["token_ids"] == choice.model_extra["token_ids"], i


def test_text_prompt_and_chat_for_humans(client) -> None:
    out = client.completions.create(model="policy", prompt="def add(a, b):", max_tokens=4, temperature=0.0)
    assert isinstance(out.choices[0].text, str) and len(out.choices[0].model_extra["token_ids"]) == 4
    chat = client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "hello world"}],
        max_tokens=5,
        temperature=0.0,
        logprobs=True,
    )
    message = chat.choices[0].message
    assert message.role == "assistant" and isinstance(message.content, str)
    assert len(chat.choices[0].logprobs.content) == len(chat.choices[0].model_extra["token_ids"])


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"prompt": [1, 2], "max_tokens": 2, "frobnicate": 1}, "frobnicate"),
        ({"prompt": [1] * 250, "max_tokens": 16}, "exceeds the context of 256"),
        ({"prompt": [1, 2], "temperature": -1}, "temperature"),
        ({"prompt": [1, 2], "top_p": 0}, "top_p"),
        ({"prompt": [1, 2], "stream": True, "n": 2}, "stream"),
        ({"prompt": [1, 9999]}, "outside the vocabulary"),
        ({"prompt": []}, "prompt"),
    ],
)
def test_bad_requests_get_400_with_a_reason(server, body, reason) -> None:
    response = requests.post(f"{server[0]}/v1/completions", json={"model": "policy", **body}, timeout=60)
    assert response.status_code == 400
    assert reason in response.json()["error"]["message"]


def test_openai_client_sees_400_as_bad_request(client) -> None:
    with pytest.raises(openai.BadRequestError, match="exceeds the context"):
        client.completions.create(model="policy", prompt=[1] * 250, max_tokens=16)


def test_weight_updates_from_path_and_from_tensors(server, client) -> None:
    url, tmp = server
    from policies.hf_config import RdepMoeConfig
    from policies.modeling import RdepMoeForCausalLM

    def greedy() -> tuple[list[int], int]:
        out = client.completions.create(model="policy", prompt=[9, 8, 7], max_tokens=8, temperature=0.0)
        return out.choices[0].model_extra["token_ids"], out.model_extra["weights_version"]

    before, version = greedy()
    torch.manual_seed(123)
    other = RdepMoeForCausalLM(RdepMoeConfig(**MODEL))
    other.save_pretrained(tmp / "ckpt")
    response = requests.post(f"{url}/update_weights", json={"path": str(tmp / "ckpt"), "version": 5}, timeout=120)
    assert response.json() == {"weights_version": 5}
    after, version = greedy()
    assert version == 5 and after != before
    blob = save({k: v.contiguous() for k, v in RdepMoeForCausalLM(RdepMoeConfig(**MODEL)).state_dict().items()})
    response = requests.post(
        f"{url}/update_weights_from_tensors",
        data=blob,
        timeout=120,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.json() == {"weights_version": 6}
    assert greedy()[1] == 6
    assert requests.get(f"{url}/health", timeout=30).json()["weights_version"] == 6
    bad = requests.post(f"{url}/update_weights", json={"path": str(tmp / "missing")}, timeout=60)
    assert bad.status_code == 400 and "missing" in bad.json()["error"]["message"]
    garbage = requests.post(f"{url}/update_weights_from_tensors", data=b"not safetensors", timeout=60)
    assert garbage.status_code == 400
    # NaN or infinite weights (a diverged trainer, a corrupt file) are refused: every sample would be NaN, and a
    # NaN logprob is no JSON number (an outside review got 200 and bare NaN in the body)
    head = RdepMoeForCausalLM(RdepMoeConfig(**MODEL)).state_dict()["lm_head.weight"].contiguous()
    for value in (float("nan"), float("inf")):
        poisoned = head.clone()
        poisoned[3, 5] = value
        refused = requests.post(
            f"{url}/update_weights_from_tensors", data=save({"lm_head.weight": poisoned}), timeout=60
        )
        assert refused.status_code == 400 and "NaN or infinite" in refused.json()["error"]["message"], refused.text
        save_file({"lm_head.weight": poisoned}, tmp / "poisoned.safetensors")
        refused = requests.post(f"{url}/update_weights", json={"path": str(tmp / "poisoned.safetensors")}, timeout=60)
        assert refused.status_code == 400 and "NaN or infinite" in refused.json()["error"]["message"], refused.text
    assert greedy()[1] == 6  # the weights and the version stayed
