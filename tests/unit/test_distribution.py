"""Shipped files found from any directory, built files out of site-packages, and a package list that matches the tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import gym.format.bpe
from gym.fault import ExitCode, describe
from gym.format.tokenizer import TokenizerError
from sandbox import distribution
from sandbox.config_file import read_config
from sandbox.distribution import ROOT, built_dir, resolve
from tasks.source import read_rows

PACKAGES = ("gym", "sandbox", "tasks", "policies", "kernels", "trainer", "images")
NOT_PACKAGES = ("tasks/swe/repos",)  # clones `tasks build-swe` makes, not the project's code


def test_a_relative_path_the_cwd_lacks_falls_back_to_the_shipped_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve("configs/cp_smoke.yaml") == ROOT / "configs/cp_smoke.yaml"
    assert resolve("configs/no_such.yaml") == Path("configs/no_such.yaml")  # an error then names what was written
    assert resolve(tmp_path / "configs/cp_smoke.yaml") == tmp_path / "configs/cp_smoke.yaml"  # absolute: as given
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs/cp_smoke.yaml").write_text("name: mine\n")
    assert resolve("configs/cp_smoke.yaml") == Path("configs/cp_smoke.yaml")  # the user's own file wins
    assert read_config("configs/cp_smoke.yaml") == {"name": "mine"}


def test_configs_and_task_files_are_read_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert read_config("configs/cp_smoke.yaml")["name"]
    rows = list(read_rows(Path("tasks/samples/taco.jsonl")))
    assert rows and all(isinstance(row, dict) for _, row in rows)


def test_built_files_go_to_the_checkout_or_else_the_users_cache(tmp_path, monkeypatch):
    assert distribution.checkout() == ROOT  # the tests run from a checkout
    assert built_dir("build", "tokenizer") == ROOT / "build" / "tokenizer" == gym.format.bpe.DEFAULT_PATH.parent
    monkeypatch.setattr(distribution, "checkout", lambda: None)  # as in an installed wheel
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert built_dir("build", "tokenizer") == tmp_path / "code-rl-gym" / "tokenizer"


def test_a_wheel_without_the_default_tokenizer_names_the_command_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gym.format.bpe, "DEFAULT_PATH", tmp_path / "tokenizer.json")
    monkeypatch.setattr(gym.format.bpe, "checkout", lambda: None)
    with pytest.raises(TokenizerError, match=r"is not built: run `code-rl-gym tokenizer train` once") as caught:
        gym.format.bpe.load_bpe()
    fault = describe(caught.value)
    assert fault is not None and fault.code == ExitCode.USAGE and "\n" not in fault.line()
    assert not (tmp_path / "tokenizer.json").exists()  # nothing trained or written unasked


def test_the_package_list_names_every_code_folder_and_no_tests():
    """A new subpackage missing from pyproject.toml would be left out of the wheel without an error."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {
        path.parent.relative_to(ROOT).as_posix()
        for top in PACKAGES
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    code = {folder.replace("/", ".") for folder in folders if not folder.startswith(NOT_PACKAGES)}
    assert code == listed - {"configs"}
    assert not any(name == "tests" or name.startswith("tests.") for name in listed)
    assert setuptools["package-data"]["configs"] == [
        "*.yaml",
        "models/*/config.json",
        "models/*/chat_template.jinja",
    ]  # data only, no code
