"""The venv cache (gym.bench.venv.cached) under processes that need one venv at once: one builds, the rest wait."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from gym.bench import venv as venvs


def _slow_create(path: Path) -> None:
    """A stand-in for `python -m venv` that takes long enough for a second process to arrive while it runs."""
    (path / "bin").mkdir(parents=True)
    with open(path.parent / "builds.log", "a") as log:
        log.write("start\n")
    time.sleep(0.5)
    (path / "bin" / "python").write_text("made\n")
    with open(path.parent / "builds.log", "a") as log:
        log.write("end\n")


def _need(venv: str, results) -> None:
    python = venvs.cached(Path(venv), "m\n", _slow_create, ())
    results.put(python.read_text())  # the tree a caller gets back is whole, not half-removed by another builder


def test_two_processes_that_need_one_venv_build_it_once_and_both_get_it_whole(tmp_path):
    venv = tmp_path / "v"
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=_need, args=(str(venv), results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert sorted(results.get(timeout=5) for _ in workers) == ["made\n"] * 3
    assert (tmp_path / "builds.log").read_text() == "start\nend\n"  # one build, never interleaved
    assert (venv / ".complete").read_text() == "m\n"


def test_a_changed_marker_rebuilds_under_the_lock(tmp_path):
    venv = tmp_path / "v"
    venvs.cached(venv, "a\n", _slow_create, ())
    venvs.cached(venv, "a\n", _slow_create, ())  # cached: no second build
    assert (tmp_path / "builds.log").read_text() == "start\nend\n"
    venvs.cached(venv, "b\n", _slow_create, ())
    assert (tmp_path / "builds.log").read_text() == "start\nend\n" * 2
    assert (venv / ".complete").read_text() == "b\n"
