"""The policy update on a tiny RDEP policy: accumulation, R3 replay, router bias, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.serve_config import MoEPolicySource
from tests.trainer_support import ARCH, scored_samples
from trainer.batch import collate
from trainer.checkpoint import Checkpointer, TrainerState, model_directory
from trainer.config import AlgorithmConfig, OptimizerConfig
from trainer.errors import ConfigError
from trainer.learner import make_optimizer
from trainer.policy import build_model
from trainer.sample import Sample, routes_for
from trainer.selection import Scored
from trainer.update import PolicyUpdate, score


def model():
    return build_model(MoEPolicySource(model=ARCH, seed=0))


def update(
    m, micro_batch_size: int, algorithm: AlgorithmConfig = AlgorithmConfig(), sgd: bool = False, **kw
) -> PolicyUpdate:
    optimizer, scheduler = make_optimizer(m, OptimizerConfig(lr=1e-2), total_steps=10)
    if sgd:  # plain SGD: weights move by lr * grad, so equal weights mean equal gradients (Adam's sign-like step would hide it)
        optimizer = torch.optim.SGD(m.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return PolicyUpdate(
        model=m,
        optimizer=optimizer,
        scheduler=scheduler,
        algorithm=algorithm,
        micro_batch_size=micro_batch_size,
        norm_length=32,
        **kw,
    )


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_matches_one_batch(aggregation):
    algorithm = AlgorithmConfig(aggregation=aggregation)
    samples = scored_samples()
    results = []
    for micro in (4, 1):
        m = model()
        step = update(m, micro, algorithm, sgd=True, grad_clip=None)
        metrics = step.run(samples)
        results.append((metrics["loss"], {k: v.detach().clone() for k, v in m.state_dict().items()}))
    (loss_a, state_a), (loss_b, state_b) = results
    # measured relative |diff| of the loss 1.1e-6 over default/avx2/avx512 kernels (0.09 of the tolerance): margin 11x
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-7)
    for key in state_a:
        # measured max |diff| 1.2e-7 over default/avx2/avx512 kernels (0.04 of the tolerance): margin 26x
        assert torch.allclose(state_a[key], state_b[key], atol=1e-6), key


def test_update_moves_logprobs_in_the_advantage_direction():
    m = model()
    samples = scored_samples()
    batch = collate(samples)
    before = score(m, batch).logprobs.detach()
    step = update(m, 4)
    for _ in range(3):
        step.run(samples)
    after = score(m, batch).logprobs.detach()
    mask = batch.loss_mask > 0
    delta = ((after - before) * mask).sum(-1) / mask.sum(-1)
    assert (delta[batch.advantages[:, 0] > 0] > 0).all()
    assert (delta[batch.advantages[:, 0] < 0] < 0).all()


def test_routing_replay_uses_the_given_experts():
    m = model()
    samples = scored_samples(2)
    free = score(m, collate(samples)).logprobs.detach()
    ids_len = [len(s.sample.trajectory.ids) for s in samples]
    # force every token of every MoE layer onto experts (3, 2): a different route than the router's own
    forced = [
        Scored(
            sample=Sample(s.sample.trajectory, routes=np.tile(np.array([3, 2], dtype=np.int16), (1, n, 1))),
            advantage=s.advantage,
        )
        for s, n in zip(samples, ids_len)
    ]
    batch = collate(forced)
    assert batch.routes is not None and batch.routes.shape == (1, 2, max(ids_len), 2)
    replayed = score(m, batch, replay=True).logprobs.detach()
    ignored = score(m, batch, replay=False).logprobs.detach()
    assert torch.allclose(ignored, free)
    assert not torch.allclose(replayed, free)
    # replaying the router's own choices changes nothing
    with torch.no_grad():
        own = m.base_model(
            input_ids=collate(samples).input_ids, attention_mask=collate(samples).attention_mask
        ).routed_experts
    same = [
        Scored(sample=Sample(s.sample.trajectory, routes=own[:, b, :n].numpy().astype(np.int16)), advantage=1.0)
        for b, (s, n) in enumerate(zip(samples, ids_len))
    ]
    assert torch.allclose(score(m, collate(same)).logprobs, free, atol=1e-6)


def test_routes_for_assembles_the_last_call():
    first = [[[1, 2], [3, 0], [-1, -1]]]  # one layer, 3 positions (prompt 2 + completion 1)
    last = [[[1, 2], [3, 0], [2, 1], [0, 3], [-1, -1]]]  # context grew to 4, sampled 1 more
    routes = routes_for(6, [(0, first), (0, last)])
    assert routes.shape == (1, 6, 2)
    assert routes[0].tolist() == [[1, 2], [3, 0], [2, 1], [0, 3], [-1, -1], [-1, -1]]


def test_router_bias_frozen_or_continued():
    for mode, moves in (("frozen", False), ("continued", True)):
        m = model()
        from trainer.learner import router_bias_hook

        step = update(m, 4, AlgorithmConfig(router_bias=mode), on_step=router_bias_hook(m, mode))
        bias = m.model.moe_blocks()[0].router.bias.clone()
        metrics = step.run(scored_samples())
        changed = not torch.equal(bias, m.model.moe_blocks()[0].router.bias)
        assert changed == moves, mode
        assert ("router/load_violation" in metrics) == moves


def test_checkpoint_round_trip_is_exact(tmp_path):
    m = model()
    step = update(m, 2)
    step.run(scored_samples())
    saver = Checkpointer(tmp_path / "ckpt", keep=1)
    path = saver.save(m, step.optimizer, step.scheduler, TrainerState(step=1, weights_version=1, data_cursor=7))
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    expected_metrics = step.run(scored_samples(seed=1))
    expected_state = {k: v.clone() for k, v in m.state_dict().items()}

    fresh = model()
    step2 = update(fresh, 2)
    state = saver.load(saver.latest(), fresh, step2.optimizer, step2.scheduler)
    assert saver.latest() == path and state.data_cursor == 7 and state.step == 1
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), expected_draw)
    metrics = step2.run(scored_samples(seed=1))
    assert metrics["loss"] == expected_metrics["loss"]
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, expected_state[key]), key


def test_interrupted_checkpoint_keeps_the_previous_one(tmp_path):
    m = model()
    step = update(m, 2)
    saver = Checkpointer(tmp_path, keep=2)
    first = saver.save(m, step.optimizer, step.scheduler, TrainerState(step=1))
    (tmp_path / "step_000002.tmp").mkdir()  # a save killed half-way
    (tmp_path / "step_000002.tmp" / "model.safetensors").write_bytes(b"partial")
    assert saver.latest() == first
    saver.save(m, step.optimizer, step.scheduler, TrainerState(step=2))
    assert saver.latest().name == "step_000002" and not (tmp_path / "step_000002.tmp").exists()


def test_mini_batches_take_the_ratio_against_the_policy_before_the_first():
    # mini-batch 1 = samples 0, 2; mini-batch 2 = samples 1, 3 = the same two sequences again, all with A = +1
    base = scored_samples(2)
    samples = [Scored(sample=s.sample, advantage=1.0) for s in (base[0], base[0], base[1], base[1])]
    results = []
    for updates in (2, 1):
        step = update(model(), 2, sgd=True, grad_clip=None, updates_per_batch=updates)
        step.optimizer.param_groups[0]["lr"] = 20.0  # a big first move (SGD)
        results.append(step.run(samples)["clip_fraction"])
    # second mini-batch: its sequences just became more likely, ratio vs the old policy > 1 + 0.28: clipped
    assert results[0] > 0.05  # measured 0.1
    assert results[1] == 0  # a single update: the ratio is exactly 1


def test_policy_checkpoint_may_name_a_run_its_checkpoints_or_their_latest_pointer(tmp_path):
    m = model()
    step = update(m, 2)
    saver = Checkpointer(tmp_path / "run" / "checkpoints", keep=2)
    saver.save(m, step.optimizer, step.scheduler, TrainerState(step=1))
    with torch.no_grad():
        next(m.parameters()).add_(1.0)  # the newest checkpoint's weights differ from the first's
    newest = saver.save(m, step.optimizer, step.scheduler, TrainerState(step=2))
    run = tmp_path / "run"
    for named in (newest, run, run / "checkpoints", run / "checkpoints" / "latest"):
        assert model_directory(named) == newest, named
        loaded = build_model(MoEPolicySource(checkpoint=named))
        assert torch.equal(next(loaded.parameters()), next(m.parameters())), named


@pytest.mark.parametrize("kind", ["missing", "empty_dir", "pointer_to_nothing", "a_file"])
def test_policy_checkpoint_that_names_no_model_is_a_config_error_naming_it(tmp_path, kind):
    path = tmp_path / "run" / "checkpoints"
    if kind == "empty_dir":
        path.mkdir(parents=True)
    elif kind == "pointer_to_nothing":  # a run killed before its first checkpoint completed
        path.mkdir(parents=True)
        (path / "latest").write_text("step_000004\n")
        path = path / "latest"
    elif kind == "a_file":
        path.parent.mkdir(parents=True)
        path.write_text("not a model\n")
    with pytest.raises(ConfigError, match=f"{path}: not a model directory"):
        build_model(MoEPolicySource(checkpoint=path))
