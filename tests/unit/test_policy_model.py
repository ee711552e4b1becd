"""The RDEP MoE transformer: shapes, masking, KV cache, replay, balancing, transformers round trip."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

from policies.attention import causal_suffices
from policies.config import MoEArchitecture
from policies.hf_config import RdepMoeConfig
from policies.modeling import RdepMoeForCausalLM
from policies.router import Router
from tests.policy_support import SMALL, small_model


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, SMALL["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def test_shapes_and_routes() -> None:
    model = small_model()
    out = model(tokens(2, 10))
    assert out.logits.shape == (2, 10, 64)
    assert out.routed_experts.shape == (2, 2, 10, 2)  # (moe layers, B, T, K)
    assert out.routed_experts.min() >= 0 and out.routed_experts.max() < 8
    # top-k picks distinct experts per token
    assert (out.routed_experts[..., 0] != out.routed_experts[..., 1]).all()
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()  # untied


def test_config_validation_names_the_problem() -> None:
    with pytest.raises(ValidationError, match="num_key_value_heads"):
        RdepMoeConfig(**{**SMALL, "num_key_value_heads": 3})
    with pytest.raises(ValidationError, match="num_experts_per_tok"):
        MoEArchitecture(num_experts=2, num_experts_per_tok=3)
    with pytest.raises(ValidationError):
        MoEArchitecture(hidden_sise=3)  # unknown field


def test_causal_masking() -> None:
    model = small_model()
    ids = tokens(1, 12)
    changed = ids.clone()
    changed[0, 7] = (changed[0, 7] + 1) % 64
    a, b = model(ids).logits, model(changed).logits
    assert torch.equal(a[:, :7], b[:, :7])  # positions before the change see nothing of it
    assert not torch.allclose(a[:, 7:], b[:, 7:])  # and the check can fail: later ones do


def test_left_padding_matches_unpadded() -> None:
    model = small_model()
    ids = tokens(1, 6)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.int64), ids], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    alone = model(ids).logits
    batched = model(padded, attention_mask=mask, position_ids=positions).logits[:, 3:]
    # measured max |diff| 0 to 1e-6 (same maths, different masking); margin 20x
    assert torch.allclose(alone, batched, atol=2e-5)
    assert torch.isfinite(model(padded, attention_mask=mask, position_ids=positions).logits).all()


def test_right_padding_takes_the_causal_kernel_and_matches_the_masked_one(monkeypatch) -> None:
    """The trainer's right-padded batches skip the (B, 1, T, S) mask (`causal_suffices`); every real token's
    logits equal the masked path's, and a left-padded or cached call keeps the mask."""
    import policies.modeling

    assert causal_suffices(None, 3, 3, 0) and causal_suffices(torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]]), 3, 3, 0)
    assert not causal_suffices(torch.tensor([[0, 1, 1]]), 1, 3, 0)  # left padding
    assert not causal_suffices(torch.tensor([[1, 0, 1]]), 1, 3, 0)  # a hole
    assert not causal_suffices(None, 1, 3, 4)  # keys in a cache
    model = small_model()
    with pytest.raises(ValueError, match="attention_mask has shape"):  # a mask of another length is still refused
        model(tokens(1, 6), attention_mask=torch.ones(1, 9, dtype=torch.int64))
    ids = tokens(3, 40)
    mask = torch.ones(3, 40, dtype=torch.int64)
    mask[1, 25:] = 0
    mask[2, 3:] = 0
    causal = model(ids, attention_mask=mask).logits
    monkeypatch.setattr(policies.modeling, "causal_suffices", lambda *_: False)
    masked = model(ids, attention_mask=mask).logits
    real = mask.bool()
    # measured max |diff| 0; the margin is float noise
    assert torch.allclose(causal[real], masked[real], atol=2e-5)
    assert torch.isfinite(causal).all()


def test_kv_cache_steps_equal_full_forward() -> None:
    model = small_model()
    ids = tokens(2, 14)
    full = model(ids)
    cache = DynamicCache()
    out = model(ids[:, :5], past_key_values=cache, use_cache=True)
    logits, routes = [out.logits], [out.routed_experts]
    for t in range(5, 14):
        out = model(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
        logits.append(out.logits)
        routes.append(out.routed_experts)
    # measured max |diff| ~5e-7 (different matmul shapes); margin 40x
    assert torch.allclose(torch.cat(logits, dim=1), full.logits, atol=2e-5)
    assert torch.equal(torch.cat(routes, dim=2), full.routed_experts)


def test_routing_replay() -> None:
    model = small_model()
    ids = tokens(2, 9)
    free = model(ids)
    replayed = model(ids, routed_experts=free.routed_experts)
    assert torch.equal(replayed.logits, free.logits)  # replaying its own routes changes nothing
    forced = torch.randint(0, 8, free.routed_experts.shape, generator=torch.Generator().manual_seed(5))
    forced[..., 1] = (forced[..., 0] + 1) % 8
    out = model(ids, routed_experts=forced)
    assert torch.equal(out.routed_experts, forced)
    assert not torch.allclose(out.logits, free.logits)
    partial = forced.clone()
    partial[:, :, -1] = -1  # -1 rows are routed freely
    out = model(ids, routed_experts=partial)
    assert torch.equal(out.routed_experts[:, :, :-1], forced[:, :, :-1])
    with pytest.raises(ValueError, match="expert ids"):
        model(ids, routed_experts=torch.full_like(forced, 8))
    with pytest.raises(ValueError, match="routed_experts has shape"):
        model(ids, routed_experts=forced[:1])


def test_gradients_reach_every_parameter() -> None:
    model = small_model().train()
    ids = tokens(2, 16)
    model(ids, labels=ids).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []
    assert model.model.layers[1].mlp.router.bias.grad is None  # selection bias is not trained by gradient


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    ids = tokens(2, 12)
    grads = []
    for checkpointing in (False, True):
        model = small_model().train()
        if checkpointing:
            model.activation_checkpointing_enable()
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert model.model.layers[1].gradient_checkpointing
    # measured max |diff| 0 (the recompute is the same maths); margin for kernel nondeterminism
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])


def test_aux_loss_optional() -> None:
    ids = tokens(2, 8)
    plain = small_model().train()(ids, labels=ids)
    assert plain.aux_loss is None
    with_aux = small_model(aux_loss_coef=0.01).train()(ids, labels=ids)
    assert with_aux.aux_loss is not None and with_aux.aux_loss > 0
    assert torch.isclose(with_aux.loss, plain.loss + with_aux.aux_loss)


def test_token_logprobs_match_log_softmax() -> None:
    model = small_model()
    ids = tokens(2, 10)
    logprob, entropy = model.token_logprobs(ids)
    logp = torch.log_softmax(model(ids).logits[:, :-1].float(), dim=-1)
    expected = logp.gather(-1, ids[:, 1:, None])[..., 0]
    # measured max |diff| ~1e-6 (chunked vs full softmax); margin 10x
    assert torch.allclose(logprob, expected, atol=1e-5)
    assert torch.allclose(entropy, -(logp.exp() * logp).sum(-1), atol=1e-5)


def test_router_bias_moves_toward_balance() -> None:
    torch.manual_seed(0)
    router = Router(RdepMoeConfig(**SMALL)).train()
    torch.nn.init.normal_(router.weight, std=0.3)
    skew = torch.nn.functional.normalize(torch.randn(SMALL["hidden_size"]), dim=0)
    with torch.no_grad():
        router.weight[:2] += skew  # experts 0 and 1 score higher for most tokens
    x = torch.randn(512, SMALL["hidden_size"]) + 2 * skew
    violations = []
    for _ in range(60):
        router(x)
        violations.append(router.update_bias(rate=0.01))  # max load / mean load - 1
    # measured: 1.52 at the start, 0.05-0.07 after 25 steps (the sign rule then oscillates by one step)
    assert violations[0] > 1.0
    assert max(violations[-10:]) < 0.2
    assert router.bias[:2].max() < 0 < router.bias[2:].mean()  # overloaded experts were pushed down


def test_model_level_bias_update_uses_counts() -> None:
    model = small_model().train()
    model(tokens(4, 16))
    violations = model.update_router_biases(rate=0.1)
    assert len(violations) == 2 and all(v >= 0 for v in violations)
    biases = [b.router.bias for b in model.model.moe_blocks()]
    assert all((((b.abs() - 0.1).abs() < 1e-6) | (b == 0)).all() for b in biases)  # one sign-rule step
    assert any(b.abs().sum() > 0 for b in biases)
    assert all(b.router.load.sum() == 0 for b in model.model.moe_blocks())  # counts reset


def test_save_and_from_pretrained_round_trip(tmp_path) -> None:
    model = small_model()
    with torch.no_grad():
        model.model.layers[2].mlp.router.bias.copy_(torch.linspace(-0.1, 0.1, 8))
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert isinstance(AutoConfig.from_pretrained(tmp_path), RdepMoeConfig)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(loaded) is RdepMoeForCausalLM
    ids = tokens(2, 8)
    assert torch.equal(loaded.model.layers[2].mlp.router.bias, model.model.layers[2].mlp.router.bias)
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    # identical weights; measured max |diff| 4e-9 (loaded tensors' memory layout picks other kernels)
    assert torch.allclose(loaded.eval()(ids).logits, model(ids).logits, atol=1e-6, rtol=0)


def test_hf_generate_works_and_uses_the_cache() -> None:
    model = small_model()
    ids = tokens(2, 5)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape == (2, 11)
    # greedy generate() equals argmax decoding by full recompute
    seq = ids
    for _ in range(6):
        seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
