"""`checkpoint:DIR`: the in-process engine over a saved (randomly initialised) RDEP MoE policy.

A random policy writes no valid Harmony, so its episodes are parse errors to
the turn budget: the point is the path (lazy torch import, trio worker thread,
real token ids and logprobs from the model), with an in-memory workspace.
"""

from __future__ import annotations

import pytest
import trio

from gym.policy_client import InProcessEngine, load_engine
from gym.rollout import collect_async
from sandbox.failure import FailureKind
from tests.fakes import FakeGrader, FakePool, make_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="the in-process engine needs torch")
    from policies.hf_config import RdepMoeConfig
    from policies.modeling import RdepMoeForCausalLM

    torch.manual_seed(0)
    model = RdepMoeForCausalLM(
        RdepMoeConfig(
            vocab_size=8192,
            hidden_size=32,
            num_hidden_layers=2,
            num_dense_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            intermediate_size=64,
            moe_intermediate_size=16,
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            max_position_embeddings=4096,
        )
    )
    path = tmp_path_factory.mktemp("policy")
    model.save_pretrained(path)
    return path


def test_checkpoint_policy_runs_episodes_in_process(checkpoint):
    env = make_env(
        episode={"max_turns": 2, "max_tokens_per_turn": 12, "max_total_tokens": 3000}, sampling={"temperature": 1.0}
    )
    engine = load_engine(f"checkpoint:{checkpoint}", env)
    assert isinstance(engine, InProcessEngine)
    pool = FakePool()

    async def main():
        return await collect_async(env, engine, pool, 1, 2, seed=0, grader=FakeGrader(env, pool))

    trajectories, _ = trio.run(main)
    assert len(trajectories) == 2
    for t in trajectories:
        assert not t.masked and t.policy_version == 0 and t.end_reason in ("max_turns", "final", "submit")
        sampled = [lp for lp, s in zip(t.logprobs, t.sampled) if s]
        assert 0 < len(sampled) <= 24 and all(lp <= 0.0 for lp in sampled) and any(lp < 0.0 for lp in sampled)
        assert FailureKind.PARSE_ERROR in t.failures
    assert len({tuple(t.ids) for t in trajectories}) == 2  # group members sample with their own seeds
