"""Shared fixtures: a real Docker engine and the built runner image for `docker`-marked tests."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"

# One OpenMP (torch intra-op) thread in each test process and every process a test starts, unless the environment
# names another count: two xdist workers already keep both cores busy, and a second thread per process only waits
# on its sibling. Five torch-heavy modules on the 2-core VM, otherwise idle: 126 s wall with torch's default (one
# thread per core), 98 s with one. Tests about thread counts set their own (tests/serve_support.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _engine_problem() -> str | None:
    try:
        import docker

        from images.inputs import runner_image

        client = docker.from_env(version="auto", timeout=10)
        client.ping()
        client.images.get(runner_image())
        client.close()
    except Exception as exc:  # any reason the engine or image is unusable
        return f"Docker engine or runner image unavailable ({exc}); run `python -m gym images build` or `bin/setup`"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Require a live engine with the runner image; in CI a missing engine is a failure, not a skip."""
    problem = _engine_problem()
    if problem:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)


# The longest modules, longest first (their durations in a fresh-clone `make test` on the 2-core VM, 2026-11-29):
# `make test` runs two xdist workers that take whole modules in collection order (`--dist loadfile
# --no-loadscope-reorder`), so these start at once instead of one of them ending the run alone (the learning test
# came last once and the suite took 25 min; xdist's default order puts modules with the most tests first).
LONGEST_FIRST = (
    "tests/integration/test_main_job_learning.py",  # ~450 s: one run of the main job, 32 steps, two evaluations
    "tests/integration/test_swe_episodes.py",  # 210 s (34 s of it building the shipped SWE instances)
    "tests/integration/test_published_grading.py",  # 150-180 s (MBPP's hostile and canonical sweeps)
    "tests/integration/test_train_ray.py",  # 160 s
    "tests/integration/test_math_published_golds.py",  # 130 s
    "tests/integration/test_vllm_engine.py",  # 100 s warm (two servers); ~150 s more to build its venv
    "tests/integration/test_fleet.py",  # 85 s
    "tests/integration/test_qwen_one_switch.py",  # 85 s (gym train twice, one launching a vLLM server)
    "tests/integration/test_trainer_fsdp.py",  # 80 s (torchrun pairs)
    "tests/integration/test_train_fsdp_cli.py",  # 80 s (two torchrun trainings)
    "tests/integration/test_attacks_candidate_failures.py",  # 75 s
    "tests/integration/test_cp_timing.py",  # 75 s
    "tests/integration/test_compose.py",  # 30 s with its image built, up to 300 s building it
    "tests/integration/test_replicas.py",  # 70 s
    "tests/integration/test_attacks_checker.py",  # 65 s
    "tests/integration/test_swe_leak_scan.py",  # 60 s
    "tests/integration/test_selfplay_cli.py",  # 60 s
    "tests/integration/test_remote_engine.py",  # 50 s
    "tests/integration/test_bench_vllm.py",  # 50 s (most of it the bench CLI's vLLM server start)
    "tests/integration/test_cp_samples.py",  # 50 s
)


def _module_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


# pytest-timeout bounds every test (pyproject.toml: 300 s for set-up, call and teardown together); a `slow` test
# gets this bound instead unless it names its own: the first SWE module to run builds the shipped instances'
# images in its set-up (126 s idle, then 89 s for the reference rollout: 215 s, past 300 s beside a second suite).
SLOW_TIMEOUT_S = 900


def pytest_collection_modifyitems(config, items):
    """Every `docker`-marked test gets the engine check first, every `slow` one the longer timeout; the longest
    modules run first (stable order)."""
    for item in items:
        if item.get_closest_marker("docker") and "docker_engine" not in item.fixturenames:
            item.fixturenames.insert(0, "docker_engine")
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    items.sort(key=_module_rank)
