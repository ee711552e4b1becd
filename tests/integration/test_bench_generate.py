"""`python -m gym bench generate`: both workloads run end to end on the tiny policy and report their figures."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from policies.serve_config import ServeConfig, build_engine
from trainer import bench_generate as bench

REPO = Path(__file__).resolve().parents[2]


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    args = parser.parse_args(["--config", str(REPO / "configs" / "policy_tiny.yaml"), "--threads", "1"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_the_request_stream_compares_three_engines_on_the_same_requests() -> None:
    args = _args(requests=12, concurrency=4, group=3, prompt_tokens=16, new_tokens=12)
    figures = bench.run(args)
    requests = bench._workload(args, 8192)
    assert figures["new_tokens"] == sum(r.max_tokens for r in requests) and figures["requests"] == 12
    assert len({tuple(r.prompt) for r in requests}) == 4  # groups of 3 share a prompt
    assert all(3 <= r.max_tokens <= 12 and 8 <= len(r.prompt) <= 24 for r in requests)
    for key in ("tokens_per_s", "tokens_per_s_batch", "tokens_per_s_hf", "ttft_p50_ms", "tpot_p50_ms"):
        assert figures[key] > 0, key
    assert figures["speedup_vs_batch"] == figures["tokens_per_s"] / figures["tokens_per_s_batch"]
    assert 4 <= figures["prefills"] <= 12  # every distinct prompt at least once, never more than one per request
    assert figures["prefill_chunk"] is None
    # the tiny policy's serve config traces its CPU decode steps: a few buckets, none dropped
    assert 0 < figures["traces"] <= 8 and figures["traces_dropped"] == 0 and figures["trace_replays"] > 0
    assert figures["trace_failure"] is None


def test_the_stream_with_chunked_prefill_reports_its_chunk() -> None:
    figures = bench.run(_args(requests=8, concurrency=4, group=2, prompt_tokens=16, new_tokens=8, prefill_chunk=4))
    assert figures["prefill_chunk"] == 4 and figures["tokens_per_s"] > 0 and figures["requests"] == 8


def test_fixed_lengths_skip_batch_and_a_capped_warm_up() -> None:
    """``--fixed``: every prompt P and every budget O tokens; ``--skip-batch`` leaves the batch engine out;
    ``--warmup-tokens`` caps only the warm-up (the measured tokens are the requests' own)."""
    args = _args(requests=6, concurrency=3, group=2, prompt_tokens=10, new_tokens=7, fixed=True)
    requests = bench._workload(args, 8192)
    assert all(len(r.prompt) == 10 and r.max_tokens == 7 for r in requests)
    assert len({tuple(r.prompt) for r in requests}) == 3
    figures = bench.run(_args(**{**vars(args), "skip_batch": True, "warmup_tokens": 2}))
    assert "tokens_per_s_batch" not in figures and "speedup_vs_batch" not in figures
    assert figures["new_tokens"] == 42 and figures["tokens_per_s"] > 0 and figures["tokens_per_s_hf"] > 0
    assert figures["device"] == "cpu" and figures["dtype"] == "float32" and "cuda_graphs" not in figures
    assert "trainer_logprob_gap_mean" not in figures  # float32: the engine is the trainer's arithmetic


def test_a_bf16_stream_reports_the_logprob_gap_to_the_trainer(tmp_path) -> None:
    """In bf16 the engine's logprobs are compared with a float32 copy replaying the rollout's routes."""
    config = (REPO / "configs" / "policy_tiny.yaml").read_text().replace("dtype: float32", "dtype: bfloat16")
    assert "dtype: bfloat16" in config
    (tmp_path / "bf16.yaml").write_text(config)
    args = _args(requests=4, concurrency=2, group=2, prompt_tokens=8, new_tokens=6, skip_batch=True)
    args.config = tmp_path / "bf16.yaml"
    figures = bench.run(args)
    assert figures["dtype"] == "bfloat16" and figures["trainer_tokens_compared"] > 0
    # bf16 rounding: measured mean ~1e-3 on the tiny policy; a wrong route or an off-by-one token is > 1
    assert 0 < figures["trainer_logprob_gap_mean"] < 0.05 and figures["trainer_logprob_gap_max"] < 0.5


def test_the_single_batch_workload_checks_kv_against_recompute() -> None:
    figures = bench.run(_args(batch=2, prompt_tokens=8, new_tokens=6))
    assert figures["token_agreement"] == 1.0 and figures["new_tokens"] == 12


def test_the_stream_runs_through_another_revision_of_the_repository() -> None:
    """``--against REV``: the same requests through REV's own engine in a subprocess (here HEAD's tree)."""
    args = _args(requests=6, concurrency=3, group=3, prompt_tokens=8, new_tokens=4, against="HEAD", against_threads=2)
    figures = bench.run(args)
    assert figures["against"] == "HEAD" and figures["tokens_per_s_against"] > 0
    assert figures["threads"] == 1 and figures["against_threads"] == 2 and figures["replicas"] == 1
    assert figures["speedup_vs_against"] == figures["tokens_per_s"] / figures["tokens_per_s_against"]


def test_an_unknown_revision_is_one_error_naming_it() -> None:
    for rev, error in [("no-such-revision-0", "no such commit"), ("--output=/tmp/x", "a revision, not an option")]:
        args = _args(requests=2, concurrency=1, group=1, prompt_tokens=4, new_tokens=2, against=rev)
        with pytest.raises(SystemExit, match=f"--against {rev}: {error}"):
            bench.run(args)


def test_a_revision_whose_config_builds_another_model_is_refused() -> None:
    """Both sides' weights fingerprints must agree: a revision whose config seeds another model is no baseline.
    (The fingerprint of each side is a sum of its parameters; a seed 1 model differs from seed 0's.)"""
    fingerprints = []
    for seed in (0, 1):
        config = ServeConfig.load(REPO / "configs" / "policy_tiny.yaml")
        config = config.model_copy(update={"policy": config.policy.model_copy(update={"seed": seed})})
        fingerprints.append(bench.fingerprint(build_engine(config).policy.model))
    bench.same_model(fingerprints[0], fingerprints[0] + 1e-9, "REV")
    with pytest.raises(SystemExit, match="REV builds another model"):
        bench.same_model(fingerprints[1], fingerprints[0], "REV")
