"""RDEP with 2 real CPU processes (torch.multiprocessing spawn, gloo): outputs and gradients equal
the single-rank model, for the shared-memory and the collective dispatcher; overflow is a clear
error on every rank, not a hang.

Each rank builds the same full model (same seed), runs it on the whole batch as the single-rank
reference, then shards the experts (rank r keeps experts [4r, 4r + 4)) and runs its half of the
batch through the RDEP dispatcher. The loss is a sum over tokens, so replicated weights' gradients
summed over ranks must equal the reference's, and each rank's expert gradients must equal the
reference's slice.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tests.policy_support import SMALL

WORLD = 2


def _loss(model, ids: torch.Tensor):
    out = model(ids)
    logits = out.logits[:, :-1]
    return out, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum")


def _compare(name: str, make_dispatcher, pristine, reference_out, ids, rank: int) -> dict:
    model = copy.deepcopy(pristine).train()
    model.use_dispatcher(make_dispatcher())
    mine = ids.chunk(WORLD)[rank]
    out, loss = _loss(model, mine)
    loss.backward()
    ref_logits = reference_out["logits"].chunk(WORLD)[rank]
    ref_routes = reference_out["routes"].chunk(WORLD, dim=1)[rank]
    grad_diff = 0.0
    for param_name, param in model.named_parameters():
        ref_grad = reference_out["grads"][param_name]
        if ".experts.w_" in param_name:
            first = model.model.moe_blocks()[0].experts.first
            ref_grad = ref_grad[first : first + param.shape[0]]
            grad = param.grad
        else:
            grad = param.grad.clone()
            dist.all_reduce(grad)  # replicated weights: the ranks' gradients add up
        grad_diff = max(grad_diff, float((grad - ref_grad).abs().max()))
    model.update_router_biases(rate=0.1)  # loads all-reduced over ranks
    bias_equal = all(
        torch.equal(block.router.bias, ref_bias)
        for block, ref_bias in zip(model.model.moe_blocks(), reference_out["biases"])
    )
    experts_held = [block.experts.w_gate.shape[0] for block in model.model.moe_blocks()]
    model.model.moe_blocks()[0].dispatcher.close()
    return {
        "logits_diff": float((out.logits.detach() - ref_logits).abs().max()),
        "routes_equal": bool(torch.equal(out.routed_experts, ref_routes)),
        "grad_diff": grad_diff,
        "bias_equal": bias_equal,
        "experts_held": experts_held,
    }


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    from policies.collective_dispatcher import CollectiveDispatcher
    from policies.dispatcher import DispatchCapacityError
    from policies.hf_config import RdepMoeConfig
    from policies.modeling import RdepMoeForCausalLM
    from policies.shm_dispatcher import SharedMemoryDispatcher

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        pristine = RdepMoeForCausalLM(RdepMoeConfig(**SMALL)).train()
        ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(1))
        reference = copy.deepcopy(pristine)
        out, loss = _loss(reference, ids)
        loss.backward()
        reference.update_router_biases(rate=0.1)
        reference_out = {
            "logits": out.logits.detach(),
            "routes": out.routed_experts,
            "grads": {n: p.grad for n, p in reference.named_parameters()},
            "biases": [block.router.bias for block in reference.model.moe_blocks()],
        }
        results = {
            "shared_memory": _compare(
                "shared_memory", lambda: SharedMemoryDispatcher(8, 32, capacity=64), pristine, reference_out, ids, rank
            ),
            "collective": _compare(
                "collective", lambda: CollectiveDispatcher(8, capacity=64), pristine, reference_out, ids, rank
            ),
        }
        for name, make in (
            ("shared_memory_overflow", lambda: SharedMemoryDispatcher(8, 32, capacity=2)),
            ("collective_overflow", lambda: CollectiveDispatcher(8, capacity=2)),
        ):
            model = copy.deepcopy(pristine)
            model.use_dispatcher(make())
            try:
                model(ids.chunk(WORLD)[rank])
                results[name] = "no error"
            except DispatchCapacityError as exc:
                results[name] = str(exc)
        with torch.no_grad():  # after an overflow every rank is still in step: the next exchange works
            model.model.moe_blocks()[0].dispatcher.capacity = 64
            model.model.moe_blocks()[1].dispatcher.capacity = 64
            results["after_overflow_ok"] = bool(torch.isfinite(model(ids.chunk(WORLD)[rank]).logits).all())
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("rdep")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.slow
@pytest.mark.parametrize("dispatcher", ["shared_memory", "collective"])
def test_rdep_outputs_and_gradients_equal_single_rank(rank_results, dispatcher) -> None:
    for rank, results in enumerate(rank_results):
        r = results[dispatcher]
        assert r["experts_held"] == [4, 4], f"rank {rank} should hold half the experts per layer"
        assert r["routes_equal"], f"rank {rank}: routes differ from the single-rank model"
        # measured max |diff| 0 to 1e-7 (same maths, other summation order); margin > 50x
        assert r["logits_diff"] < 1e-5, f"rank {rank}: {r}"
        # measured max |diff| ~1e-6 on gradients of magnitude ~1 (summed over ranks); margin 10x
        assert r["grad_diff"] < 1e-5, f"rank {rank}: {r}"
        assert r["bias_equal"], f"rank {rank}: balancing bias differs from the single-rank update"


@pytest.mark.slow
@pytest.mark.parametrize("dispatcher", ["shared_memory", "collective"])
def test_rdep_overflow_raises_on_every_rank(rank_results, dispatcher) -> None:
    for results in rank_results:
        message = results[f"{dispatcher}_overflow"]
        assert "RDEP dispatch overflow" in message and "holds 2 rows per rank pair" in message
    assert all(results["after_overflow_ok"] for results in rank_results)


@pytest.mark.slow
def test_no_shared_memory_segment_left_behind(rank_results) -> None:
    leftovers = [p.name for p in Path("/dev/shm").glob("rdep-*")] if Path("/dev/shm").is_dir() else []
    assert leftovers == []
