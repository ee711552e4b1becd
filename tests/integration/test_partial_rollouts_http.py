"""Partial rollouts through the real policy server (policies/server.py, aiohttp on a local port) and the gym's HTTP
client: a weight update posted while a completion decodes lands between two of its steps, and the per-token
versions come back through the wire (`token_versions` per choice, the reply's `weights_version` the newest).

The engine is a continuous engine over a small random RDEP MoE with ``partial_rollouts`` on; the update is the
trainer's own `HttpSync` push (safetensors bytes to /update_weights_from_tensors). The control: the same server
with the option off waits for the completion, which then holds one version."""

from __future__ import annotations

import pytest
import trio

from gym.policy_client import HttpEngine
from policies.generation import GenerationEngine
from policies.hf_adapter import CausalLMPolicy
from policies.sampling import Completion, SamplingParams
from tests.policy_server_support import serving
from tests.policy_support import small_model, wait_for_tokens
from trainer.policy import HttpSync

PROMPT = [1, 2, 3, 4, 5]
LONG = SamplingParams(max_tokens=300, seed=11)  # no stop token: the row runs its whole budget


def swap_mid_completion(partial: bool) -> tuple[Completion, Completion, int]:
    """(a completion before any push, the same request during which version 1 was pushed, the engine's version
    after)."""
    engine = GenerationEngine(
        CausalLMPolicy(small_model(max_position_embeddings=512)), partial_rollouts=partial, traced_decode=True
    )
    new = {k: v.contiguous() for k, v in small_model(seed=3, max_position_embeddings=512).state_dict().items()}
    with serving(engine) as url:
        client = HttpEngine(url)

        async def main() -> tuple[Completion, Completion]:
            alone = (await client.generate([PROMPT], LONG))[0]
            out = {}
            async with trio.open_nursery() as nursery:

                async def sample() -> None:
                    out["completion"] = (await client.generate([PROMPT], LONG))[0]

                nursery.start_soon(sample)
                await trio.to_thread.run_sync(wait_for_tokens, engine, 5)
                await trio.to_thread.run_sync(HttpSync(url).push, new, 1)
            return alone, out["completion"]

        alone, swapped = trio.run(main)
    engine.close()
    return alone, swapped, engine.weights_version


@pytest.mark.parametrize("partial", [True, False])
def test_an_update_posted_mid_completion_comes_back_per_token(partial: bool) -> None:
    alone, swapped, now = swap_mid_completion(partial)
    versions = swapped.versions
    assert now == 1 and alone.versions == [0] * 300 and len(versions) == 300
    if partial:
        k = versions.index(1)
        assert 5 <= k < 300 and versions == [0] * k + [1] * (300 - k), versions
        # the traced decode step reads the weights in place: the tokens after the swap are the new weights'
        assert swapped.token_ids[:k] == alone.token_ids[:k] and swapped.token_ids[k:] != alone.token_ids[k:]
    else:
        assert versions == [0] * 300 and swapped.token_ids == alone.token_ids
