"""`policies.memory_tuning.keep_freed_memory`: a decode step's big tensors fault in fewer fresh pages.

The effect is counted, not timed: minor page faults (`getrusage`) per step of the continuous engine running 128
requests of the tiny policy at once (prompts of 20-83 tokens, 24 new tokens each), each in a fresh interpreter,
without and with the thresholds raised. Measured here: ~410 faults a step without, ~100 with. (Before the
sampler's blocked inversion, 5b83ca6, the sampler alone faulted ~2,300 pages a step without and 0 with; it no
longer makes the (64, 8192) float64 block that did. At 64 rows, since a step reads its samples in one copy and
skips routes nobody asked for, the effect is smaller: 85 faults a step without, 52 with.)
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import policies.memory_tuning as allocator

REPO = Path(__file__).resolve().parents[2]

FAULTS = """
import json, resource, sys, torch
torch.set_num_threads(1)
if sys.argv[1] == "on":
    from policies.memory_tuning import keep_freed_memory
    assert keep_freed_memory()
from policies.generation import GenerationEngine
from policies.sampling import SamplingParams
from policies.serve_config import ServeConfig, build_engine
engine = GenerationEngine(build_engine(ServeConfig.load("configs/policy_tiny.yaml")).policy, 128, "continuous")
prompts = [[7 + i % 50] * (20 + i % 64) for i in range(128)]
params = [SamplingParams(max_tokens=24, seed=i) for i in range(128)]
engine.generate_batch(prompts, params)
before, steps = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, len(engine._batcher.steps)
engine.generate_batch(prompts, params)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps(faults / (len(engine._batcher.steps) - steps)))
"""


def faults_per_step(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_decode_steps_fault_in_fewer_fresh_pages() -> None:
    off, on = faults_per_step("off"), faults_per_step("on")
    assert off > 200, (
        f"glibc's default thresholds no longer fault here ({off} a step): revisit policies/memory_tuning.py"
    )
    assert on * 2 < off, f"{on} page faults a step with the thresholds raised, {off} without"


def test_it_applies_once_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(allocator, "_applied", None)
    calls = []

    def mallopt(option, value):
        calls.append((option, value))
        return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda name: type("Libc", (), {"mallopt": staticmethod(mallopt)})())
    assert allocator.keep_freed_memory() and allocator.keep_freed_memory()
    assert calls == [(allocator.M_MMAP_THRESHOLD, 32 << 20), (allocator.M_TRIM_THRESHOLD, allocator.TRIM_BYTES)]


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch, caplog) -> None:
    monkeypatch.setattr(allocator, "_applied", None)

    class Other:  # musl, macOS: no mallopt
        pass

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Other())
    with caplog.at_level("INFO", logger="policies.memory_tuning"):
        assert allocator.keep_freed_memory() is False
    assert "no glibc mallopt" in caplog.text


def test_a_refused_threshold_is_a_warning_not_an_error(monkeypatch, caplog) -> None:
    monkeypatch.setattr(allocator, "_applied", None)

    def mallopt(option, value):
        return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: type("Refusing", (), {"mallopt": staticmethod(mallopt)})())
    assert allocator.keep_freed_memory() is False
    assert "refused" in caplog.text


def test_gym_serve_applies_it_before_building_its_engine(monkeypatch) -> None:
    import argparse

    import policies.serve_config as serve_config
    from policies import serve_cli

    order: list[str] = []

    class Stop(Exception):
        pass

    def build_engine(config):
        order.append("engine")
        raise Stop

    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: order.append("allocator") or True)
    monkeypatch.setattr(serve_config, "build_engine", build_engine)
    args = argparse.Namespace(config=REPO / "configs" / "policy_tiny.yaml", host="127.0.0.1", port=0)
    try:
        serve_cli.run(args)
    except Stop:
        pass
    assert order == ["allocator", "engine"]


def test_the_trainers_engine_leaves_the_c_library_as_it_is(monkeypatch) -> None:
    """`GenerationEngine` (the trainer's in-process engine) does not raise the thresholds (the module docstring
    says why)."""
    from policies.generation import GenerationEngine
    from policies.hf_adapter import CausalLMPolicy
    from tests.policy_support import small_model

    monkeypatch.setattr(allocator, "_applied", None)
    for mode in ("continuous", "kv_cache"):
        GenerationEngine(CausalLMPolicy(small_model()), mode=mode)
    assert allocator._applied is None


FREEZE = """
import gc, json
import torch, transformers
from policies.memory_tuning import freeze_startup_objects
from policies.serve_config import ServeConfig, build_engine
engine = build_engine(ServeConfig.load("configs/policy_tiny.yaml"))
before = len(gc.get_objects())
frozen = freeze_startup_objects()
after = len(gc.get_objects())
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze is still collected
del a, b
print(json.dumps([before, frozen, after, gc.collect()]))
"""


def test_freezing_the_start_up_hides_it_from_full_collections() -> None:
    """A full collection visits every tracked object: after the freeze it no longer visits the start-up's
    (measured ~417,000 objects here with torch, transformers and the tiny engine; the trainer ~430,000)."""
    done = subprocess.run(
        [sys.executable, "-c", FREEZE], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    before, frozen, after, collected = json.loads(done.stdout.strip().splitlines()[-1])
    assert before > 50_000 and frozen > 0.9 * before and after < 1_000  # measured 416,809 / 415,424 / 0
    assert collected >= 2  # the two nodes of the cycle (and their dicts)
