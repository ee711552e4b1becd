"""The continuous engine's CUDA graphs on a real GPU: captured decode steps sample what eager steps sample.

Skipped without a CUDA device (CI has none); run on a lent GPU (docs/engine.md, "CUDA graphs").
"""

from __future__ import annotations

import pytest
import torch

from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import SamplingParams
from tests.policy_support import small_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
pytest.importorskip("triton", reason="triton is not installed")

PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11, 12], list(range(1, 41)), [5] * 17]


def stream(engine: GenerationEngine, seed: int = 4) -> list:
    """Rows of several lengths submitted one by one, so they join and leave a running batch."""
    params = [
        SamplingParams(max_tokens=n, seed=seed + n, return_routed_experts=True, stop_token_ids=[3])
        for n in (30, 12, 50, 25, 40)
    ]
    futures = [engine.submit([p], [q]) for p, q in zip(PROMPTS, params)]
    return [f.result()[0] for f in futures]


def policy(dtype=torch.float32, seed: int = 0) -> CausalLMPolicy:
    return CausalLMPolicy(small_model(seed=seed, max_position_embeddings=512).to(dtype).to("cuda"))


def test_captured_steps_sample_what_eager_steps_sample() -> None:
    model = policy()
    graphs = GenerationEngine(model, max_batch_size=8, cuda_graphs=True)
    eager = GenerationEngine(model, max_batch_size=8, cuda_graphs=False)
    got, want = stream(graphs), stream(eager)
    batcher = graphs._batcher
    assert batcher.graphs.failed is None, batcher.graphs.failed
    assert batcher.graphs.replays > 0 and len(batcher.graphs.graphs) >= 2
    assert batcher.graphs.sampled > 0  # plain rows were sampled inside the graphs
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.raw_logprobs, b.raw_logprobs)) < 1e-4
        assert a.routed_experts == b.routed_experts


def test_graphs_see_an_in_place_weight_update() -> None:
    engine = GenerationEngine(policy(), max_batch_size=8, cuda_graphs=True)
    before = stream(engine)
    engine.load_state_dict({k: v.cuda() for k, v in small_model(seed=3).state_dict().items()})
    after = stream(engine)
    fresh = stream(GenerationEngine(policy(seed=3), max_batch_size=8, cuda_graphs=False))
    assert [c.token_ids for c in after] == [c.token_ids for c in fresh]
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    assert all(c.weights_version == 1 for c in after)


def test_bf16_graphs_agree_with_float32(capsys) -> None:
    """bf16 rounding changes some samples; report the agreement and the logprob gap to float32 recompute."""
    bf16 = stream(GenerationEngine(policy(torch.bfloat16), max_batch_size=8, cuda_graphs=True))
    fp32 = policy()
    gaps = []
    for prompt, c in zip(PROMPTS, bf16):
        ids = torch.tensor([prompt + c.token_ids], device="cuda")
        with torch.no_grad():
            logits = fp32.model(ids).logits[0, len(prompt) - 1 : -1].float()
        exact = torch.log_softmax(logits, dim=-1).gather(1, ids[0, len(prompt) :, None])[:, 0]
        gaps += (exact - torch.tensor(c.raw_logprobs, device="cuda")).abs().tolist()
    with capsys.disabled():
        print(
            f"\nbf16 graphs vs float32 recompute: mean |logprob gap| {sum(gaps) / len(gaps):.4f}, max {max(gaps):.4f}"
        )
    assert sum(gaps) / len(gaps) < 0.1
