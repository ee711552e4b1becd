"""Credits: a step consumes exactly the groups granted for it, however late the trainer reads them.

The race this pins: the trainer used to count as pending only the groups the producer had not delivered,
so finished groups waiting in the channel (the trainer busy training, or evaluating mid-run) looked like
"nothing pending" and it granted replacements for groups it had not even read yet: extra groups on the
current weights that were stale at the next step (on-policy: dropped, the stream shifted, runs differed).
Here the trainer starts reading a step's groups only once every granted group has been delivered, the
worst case of that timing, on the real loop with the in-memory workspaces (tests/trainer_support.py).
"""

from __future__ import annotations

import json

import pytest
import trio

import trainer.loop
from tests.trainer_support import config_data, train_with_fakes
from trainer.config import TrainConfig

GROUPS_PER_STEP = 2
STEPS = 3


@pytest.mark.slow
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_late_reader_gets_exactly_its_groups(tmp_path, monkeypatch, max_staleness):
    original = trainer.loop.Loop.collect_batch
    producers = []

    async def late_reader(self, receive, producer, stream):
        producers.append(producer)
        while producer.outstanding:  # every granted group is delivered and waits in the channel
            await trio.sleep(0.01)
        return await original(self, receive, producer, stream)

    monkeypatch.setattr(trainer.loop.Loop, "collect_batch", late_reader)
    data = config_data(tmp_path / "run", bound=1.0, steps=STEPS)
    data["loop"]["max_staleness"] = max_staleness
    data["algorithm"] = {"dynamic_sampling": {"enabled": False}}  # every group kept: no refill is due
    train_with_fakes(TrainConfig.parse(data, source="test"))

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == STEPS
    for row in train:
        assert row["groups/drawn"] == GROUPS_PER_STEP, row
        assert row.get("count/stale_dropped", 0) == 0, row
        assert row["staleness/max"] <= max_staleness, row
    # nothing started beyond the grants: (1 + max_staleness) steps ahead, then one step's worth per step
    started = producers[-1].started
    assert started <= (1 + max_staleness + STEPS) * GROUPS_PER_STEP, started
    if max_staleness == 0:  # on-policy: the steps trained on the stream's first positions, none skipped
        trajectories = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
        positions = sorted({t["seeds"]["position"] for t in trajectories})
        assert positions == list(range(positions[0], positions[0] + STEPS * GROUPS_PER_STEP)), positions
