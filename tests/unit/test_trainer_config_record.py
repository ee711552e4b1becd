"""`train --resume` with a changed configuration keeps the earlier record and says what changed."""

from __future__ import annotations

import json
import logging

from trainer.loop import record_config


def test_a_first_write_and_an_unchanged_resume_keep_one_record(tmp_path):
    text = json.dumps({"loop": {"steps": 32}, "algorithm": {"lr": 0.05}})
    assert record_config(tmp_path, text, 0) == [] and record_config(tmp_path, text, 16) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_changed_resume_keeps_the_earlier_config_and_names_each_change(tmp_path, caplog):
    before = {"loop": {"steps": 32}, "algorithm": {"lr": 0.05, "clip": 0.2}, "seed": 0}
    after = {"loop": {"steps": 64}, "algorithm": {"lr": 0.01, "clip": 0.2}, "seed": 0, "new": True}
    record_config(tmp_path, json.dumps(before), 0)
    with caplog.at_level(logging.WARNING, logger="trainer.loop"):
        changed = record_config(tmp_path, json.dumps(after), 16)
    assert changed == ["algorithm.lr", "loop.steps", "new"]
    assert json.loads((tmp_path / "config.step_000016.json").read_text()) == before
    assert json.loads((tmp_path / "config.json").read_text()) == after
    (message,) = [r.getMessage() for r in caplog.records]
    assert "algorithm.lr (0.05 -> 0.01)" in message and "loop.steps (32 -> 64)" in message
    assert "config.step_000016.json" in message


def test_an_unreadable_earlier_record_is_kept_beside_the_new_one(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    record_config(tmp_path, json.dumps({"seed": 1}), 8)
    assert (tmp_path / "config.step_000008.json").read_text() == "{not json"
    assert json.loads((tmp_path / "config.json").read_text()) == {"seed": 1}
