"""Rank 0's commands to the other ranks are typed (trainer.learner): each reaches its learner call."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

import trainer.learner as learner_module
from trainer.checkpoint import TrainerState
from trainer.commands import FreezeReference, Gather, Save, Step, Stop, WarmStart
from trainer.learner import follow


class RecordingLearner:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.state = TrainerState()
        self.config = SimpleNamespace(warm_start=None, seed=0)
        self.world = SimpleNamespace(rank=1, world_size=2)
        self.update = SimpleNamespace(temperature=1.0)
        self.sync = None
        self.model = None

    def freeze_reference(self) -> None:
        self.calls.append(("freeze_reference",))

    def train_step(self, scored) -> None:
        self.calls.append(("step", scored))

    def weights_for_engine(self) -> None:
        self.calls.append(("gather",))

    def save(self) -> None:
        self.calls.append(("save", self.state.step))


def run_follow(monkeypatch, commands: list) -> RecordingLearner:
    # what broadcast_object_list does to a command on its way: a pickle round trip
    queue = [pickle.loads(pickle.dumps(c)) for c in commands]
    monkeypatch.setattr(learner_module, "receive_command", lambda: queue.pop(0))
    monkeypatch.setattr(learner_module, "warm_start", lambda model, demos, *args: learner.calls.append(("warm", demos)))
    learner = RecordingLearner()
    follow(learner)  # type: ignore[arg-type]
    return learner


def test_every_command_reaches_its_call_in_order(monkeypatch):
    learner = run_follow(
        monkeypatch,
        [WarmStart([]), FreezeReference(), Gather(), Step([]), Save(TrainerState(step=3)), Stop(), Gather()],
    )
    assert learner.calls == [("warm", []), ("freeze_reference",), ("gather",), ("step", []), ("save", 3)]
    assert learner.state == TrainerState(step=3)


def test_an_unknown_command_is_refused(monkeypatch):
    with pytest.raises(TypeError, match="unknown command"):
        run_follow(monkeypatch, [{"kind": "step", "scored": []}])
