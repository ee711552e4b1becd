"""`python -m gym bench trainer` runs a real GRPO step of ours on the CPU (TRL skipped) and reports its figures,
the sampling part's full garbage collections included."""

from __future__ import annotations

import argparse
import gc

from trainer import bench


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    args = parser.parse_args(["--skip-trl", "--steps", "2", "--prompts", "2", "--group-size", "2"])
    args.max_tokens = 8
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_a_grpo_step_of_ours_reports_its_sampling_and_its_full_collections(monkeypatch) -> None:
    import trainer.policy

    build = trainer.policy.build_engine

    def engine_that_collects(*a, **k):  # every sampling call holds one full collection
        engine = build(*a, **k)
        generate = engine.generate_batch

        def generate_batch(prompts, params):
            gc.collect()
            return generate(prompts, params)

        engine.generate_batch = generate_batch
        return engine

    monkeypatch.setattr(trainer.policy, "build_engine", engine_that_collects)
    figures = bench.run(_args())
    assert figures["trl_error"] == "skipped (--skip-trl)" and figures["device"] == "cpu"
    assert figures["tokens_per_step"] > 4 * 8 and figures["tokens_per_s_ours"] > 0  # 4 samples of prompt + 8 tokens
    assert len(figures["sample_s_ours_steps"]) == 2 and 0 < figures["sample_s_ours"] < figures["step_s_ours"]
    assert figures["sample_gc_full"] >= 2 and figures["sample_gc_full_s"] > 0  # the warm-up step not counted


def test_full_collections_count_generation_two_only_while_entered() -> None:
    watch = bench.FullCollections()
    gc.collect()  # not entered: not counted
    with watch:
        gc.collect(0)
        gc.collect(1)
        gc.collect()
    gc.collect()
    assert watch.count == 1 and watch.seconds > 0 and watch not in gc.callbacks
