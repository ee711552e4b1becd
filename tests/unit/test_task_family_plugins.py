"""Task families as plugins (`tasks.plugins`): an installed distribution's entry point adds a family; one that does
not import, names anything but a `FamilyKind`, or takes a shipped name or format is logged and left out, never
raised; the shipped families are declared under the same group in pyproject.toml."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
import tomllib
import types
from pathlib import Path

import pytest
from pydantic import BaseModel

from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from tasks import plugins
from tasks.families import KINDS, SHIPPED_KINDS
from tasks.family import FamilyKind

ROOT = Path(__file__).resolve().parents[2]


class WordTask(BaseModel):
    task_id: str
    word: str


class WordKind(FamilyKind):
    name = "words"
    task_types = (WordTask,)
    answer = "answer"
    instructions = "words"
    formats = {"words": "plugin_words.rows"}

    def task_text(self, task):
        return task.word

    def describe(self, task):
        return "words"

    def reference(self, task, completion):
        return task.word

    def family(self, tasks, resources):
        return None


class TakesMath(WordKind):
    name = "math"


class TakesTaco(WordKind):
    name = "tacos"
    formats = {"taco": "plugin_words.rows"}


class OwnsNothing(WordKind):
    name = "empty"
    task_types = ()


def _module(name: str, **attributes) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


@pytest.fixture()
def entry_points(monkeypatch):
    """Entry points of the group as an installed distribution would declare them."""
    _module(
        "plugin_words", GOOD=WordKind(), NOT_A_KIND=object(), MATH=TakesMath(), TACO=TakesTaco(), NONE=OwnsNothing()
    )
    declared = {
        "words": "plugin_words:GOOD",
        "broken": "plugin_missing.module:KIND",
        "object": "plugin_words:NOT_A_KIND",
        "math_again": "plugin_words:MATH",
        "taco_again": "plugin_words:TACO",
        "empty": "plugin_words:NONE",
        "cp": "tasks.family:CODE",  # the project's own entry point, when it is installed: never twice
    }
    found = [importlib.metadata.EntryPoint(name, value, plugins.GROUP) for name, value in declared.items()]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [e for e in found if e.group == group])
    yield
    sys.modules.pop("plugin_words", None)


def test_a_plugin_kind_is_registered_and_every_unusable_one_is_logged_and_left_out(entry_points, caplog):
    with caplog.at_level(logging.ERROR, logger="tasks.plugins"):
        kinds = plugins.installed_kinds({kind.name for kind in SHIPPED_KINDS}, {"taco", "math", "auto", "swe"})
    assert [kind.name for kind in kinds] == ["words"]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "'broken' (plugin_missing.module:KIND): does not import: ModuleNotFoundError" in logged
    assert "'object' (plugin_words:NOT_A_KIND): names a object, not a tasks.family.FamilyKind instance" in logged
    assert "'math_again' (plugin_words:MATH): its name 'math' is taken" in logged
    assert "'taco_again' (plugin_words:TACO): its formats ['taco'] are taken" in logged
    assert "'empty' (plugin_words:NONE): it owns no task type" in logged
    assert "'cp'" not in logged


def test_the_shipped_families_are_declared_as_a_plugin_declares_one():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][plugins.GROUP]
    assert declared == plugins.SHIPPED
    resolved = [importlib.metadata.EntryPoint(n, v, plugins.GROUP).load() for n, v in declared.items()]
    assert tuple(resolved) == SHIPPED_KINDS == KINDS[: len(SHIPPED_KINDS)]


def test_a_format_no_family_registers_is_a_config_error_naming_the_known_ones(tmp_path):
    config = {"name": "x", "task_pool": {"type": "jsonl", "path": "t.jsonl", "format": "letters"}}
    with pytest.raises(EnvironmentConfigError, match=r"task_pool.*unknown format 'letters'; known: auto, nemotron"):
        EnvironmentConfig.from_dict(config)
    assert EnvironmentConfig.from_dict({**config, "task_pool": {**config["task_pool"], "format": "taco"}})


def test_a_plugins_instructions_come_from_its_kind():
    from gym.environment_config import PromptConfig

    class Instructed(WordKind):
        def instructions_of(self, prompt):
            return "sort the letters"

    assert Instructed().instructions_of(PromptConfig()) == "sort the letters"
    assert KINDS[0].instructions_of(PromptConfig()) == PromptConfig().instructions  # a shipped family's field
