"""Run directories: an earlier run is set aside whole (never mixed in), files are replaced in one step."""

from __future__ import annotations

from pathlib import Path

from gym.run_dir import set_aside, write_atomic


def test_an_earlier_run_is_moved_aside_whole(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert set_aside(run) is None  # nothing there
    run.mkdir()
    assert set_aside(run) is None and run.is_dir()  # empty: kept, nothing to protect
    (run / "bundles").mkdir()
    (run / "bundles" / "b.json").write_text("{}")
    (run / "trajectories.jsonl").write_text("old\n")
    first = set_aside(run)
    assert first is not None and first.name.startswith("run.") and not run.exists()
    assert (first / "trajectories.jsonl").read_text() == "old\n" and (first / "bundles" / "b.json").exists()
    run.mkdir()
    (run / "summary.json").write_text("{}")
    second = set_aside(run)  # within the same second: a new name, never onto the first
    assert second is not None and second != first and (second / "summary.json").exists()
    assert (first / "trajectories.jsonl").read_text() == "old\n"


def test_write_atomic_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "summary.json"
    write_atomic(path, "one")
    write_atomic(path, "two")
    assert path.read_text() == "two" and [p.name for p in path.parent.iterdir()] == ["summary.json"]
