"""`POST /v1/score` on a real loopback aiohttp server in this process: a verifier checkpoint on disk
(a small seeded RDEP MoE model + verifier.json) loaded by `StepScorer.load`, token ids in, p(correct)
per step slot out, equal to the full forward's two-way softmax; bad requests answer a JSON 4xx."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import aiohttp
import pytest
import requests
import torch
import yaml
from aiohttp.test_utils import TestServer

from policies.fake_engine import ScriptedEngine
from policies.scorer import StepScorer
from policies.serve_config import ServerOptions
from policies.server import PolicyServer
from tests.cli_support import ROOT, gym, one_line
from tests.policy_support import small_model
from trainer.verifier_train import save_checkpoint

# ids in a 64-token vocabulary: <|start|> 5, "assistant" 7, <|end|> 6, labels 10 (correct) / 11 (wrong)
META = {"label_ids": [10, 11], "step_prefix": [5, 7], "step_end_id": 6}
SEQ = [5, 9, 20, 21, 6, 5, 7, 30, 31, 6, 5, 7, 32, 6]  # a user message, then two assistant steps
SLOTS = [9, 13]


class _Format:  # what save_checkpoint needs of a gym VerifierFormat
    def describe(self) -> dict:
        return META


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = small_model(seed=3)
    return save_checkpoint(model, _Format(), tmp_path_factory.mktemp("verifier") / "checkpoint"), model


async def _post(server: PolicyServer, bodies: list) -> list[tuple[int, dict]]:
    async with TestServer(server.app(), host="127.0.0.1") as test_server:
        async with aiohttp.ClientSession() as session:
            out = []
            for body in bodies:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                async with session.post(test_server.make_url("/v1/score"), data=data) as response:
                    out.append((response.status, await response.json()))
            return out


def _server(scorer: StepScorer | None, **options) -> PolicyServer:
    return PolicyServer(ScriptedEngine(vocab_size=64), ServerOptions(**options), scorer=scorer)


def test_scores_equal_the_full_forward_at_the_step_slots(checkpoint):
    path, model = checkpoint
    scorer = StepScorer.load(path)
    other = [5, 7, 40, 6]
    [(status, body)] = asyncio.run(_post(_server(scorer), [{"input_ids": [SEQ, other]}]))
    assert status == 200, body
    assert body["positions"] == [SLOTS, [3]] and body["label_ids"] == [10, 11]
    with torch.no_grad():
        for seq, positions, scores in zip([SEQ, other], body["positions"], body["scores"]):
            logits = model(input_ids=torch.tensor([seq])).logits[0]  # (T, V)
            expected = torch.softmax(logits[positions][:, [10, 11]], dim=-1)[:, 0]
            assert scores == pytest.approx(expected.tolist(), abs=1e-5)
            assert all(0.0 < s < 1.0 for s in scores)


def test_explicit_positions_are_scored_as_given(checkpoint):
    scorer = StepScorer.load(checkpoint[0])
    bodies = [{"input_ids": [SEQ]}, {"input_ids": [SEQ], "positions": [[13, 2, 9]]}]
    (_, auto), (status, given) = asyncio.run(_post(_server(scorer), bodies))
    assert status == 200 and given["positions"] == [[13, 2, 9]]
    assert given["scores"][0][0] == pytest.approx(auto["scores"][0][1], abs=1e-6)
    assert given["scores"][0][2] == pytest.approx(auto["scores"][0][0], abs=1e-6)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"input_ids": []}, 400, "input_ids"),
        ({"input_ids": [[1, 2]], "prompt": "x"}, 400, "prompt"),
        ({"input_ids": "abc"}, 400, "input_ids"),
        ({"input_ids": [[]]}, 400, "input_ids[0] is empty"),
        ({"input_ids": [[1, 64]]}, 400, "outside the vocabulary"),
        ({"input_ids": [[1, -1]]}, 400, "not a token id"),
        ({"input_ids": [[1, 2]], "positions": [[2]]}, 400, "outside the sequence"),
        ({"input_ids": [[1, 2]], "positions": [[0], [1]]}, 400, "2 position lists for 1 sequences"),
        ({"input_ids": [[1]] * 5}, 400, "at most 4"),
        ({"input_ids": [[1] * 129]}, 400, "context is 128"),
        ({"input_ids": [[1] * 5000]}, 413, "larger than"),
    ],
)
def test_bad_requests_answer_a_json_4xx(checkpoint, body, status, words):
    server = _server(StepScorer.load(checkpoint[0]), max_sequences_per_request=4, max_json_body_bytes=4096)
    [(got, answer)] = asyncio.run(_post(server, [body]))
    assert got == status, answer
    assert words in answer["error"]["message"] and answer["error"]["code"] == status


def test_a_server_without_a_verifier_says_how_to_give_it_one():
    [(status, body)] = asyncio.run(_post(_server(None), [{"input_ids": [SEQ]}]))
    assert status == 400 and "verifier:" in body["error"]["message"]


def test_loading_a_directory_that_is_no_verifier_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="verifier.json"):
        StepScorer.load(tmp_path)
    (tmp_path / "verifier.json").write_text('{"label_ids": [1, 2]}')
    with pytest.raises(FileNotFoundError, match="step_prefix"):
        StepScorer.load(tmp_path)


def test_gym_serve_loads_the_verifier_named_in_its_config(checkpoint, tmp_path):
    """The real `python -m gym serve` process: `verifier: DIR` is served on /v1/score; a directory that
    is no verifier checkpoint is a one-line config error (exit 2) before the server listens."""
    config = {"policy": {"type": "rdep_moe", "checkpoint": str(checkpoint[0])}, "verifier": str(checkpoint[0])}
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym", "serve", str(tmp_path / "serve.yaml"), "--port", "0"],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in proc.stderr:  # type: ignore[union-attr]
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server never listened"
        answer = requests.post(f"{url}/v1/score", json={"input_ids": [SEQ]}, timeout=60)
        assert answer.status_code == 200 and answer.json()["positions"] == [SLOTS]
        assert requests.post(f"{url}/v1/score", json={"input_ids": [[70]]}, timeout=60).status_code == 400
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**config, "verifier": str(tmp_path)}))
    one_line(gym("--log-level", "ERROR", "serve", str(tmp_path / "bad.yaml"), "--port", "0"), 2, "verifier.json")
