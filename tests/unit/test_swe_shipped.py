"""Shipped instance specs and build-swe, on a small sdist made in the test (no network)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tasks.swe import repository, shipped
from tasks.swe.diff import touched_paths
from tasks.swe.spec import Injection, InstanceSpec, SpecError, load_specs

CORE = "def double(x):\n    return x * 2\n\n\ndef half(x):\n    return x / 2\n"
TESTS = "from pkg.core import double\n\n\ndef test_double():\n    assert double(2) == 4\n"


def fake_sdist(folder: Path) -> Path:
    archive = folder / "pkg-1.0.tar.gz"
    files = {
        "pkg-1.0/pkg/__init__.py": "",
        "pkg-1.0/pkg/core.py": CORE,
        "pkg-1.0/tests/test_core.py": TESTS,
        "pkg-1.0/setup.py": "from setuptools import setup\nsetup(name='pkg')\n",
        "pkg-1.0/PKG-INFO": "Name: pkg\n",
        "pkg-1.0/pkg.egg-info/PKG-INFO": "generated\n",
    }
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return archive


def spec(**overrides) -> InstanceSpec:
    data = dict(
        instance_id="owner__pkg-gym-1",
        repo="owner/pkg",
        package="pkg",
        version="1.0",
        problem_statement="half() is wrong",
        injections=[{"path": "pkg/core.py", "line": 6, "old": "    return x / 2\n", "new": "    return x / 3\n"}],
        tests=[
            {
                "path": "tests/test_core.py",
                "append": "def test_half():\n    from pkg.core import half\n    assert half(4) == 2\n",
            }
        ],
        fail_to_pass=["tests/test_core.py::test_half"],
        pass_to_pass=["tests/test_core.py::test_double"],
    )
    data.update(overrides)
    return InstanceSpec.model_validate(data)


@pytest.fixture
def offline_sdist(tmp_path, monkeypatch):
    archive = fake_sdist(tmp_path)
    monkeypatch.setattr(shipped, "fetch_sdist", lambda package, version, cache=None: archive)
    return archive


def test_injection_is_line_addressed():
    injection = Injection(path="pkg/core.py", line=6, old="    return x / 2\n", new="    return x / 3\n")
    assert injection.apply(CORE).endswith("    return x / 3\n")
    with pytest.raises(SpecError, match="pkg/core.py:5: expected"):
        injection.model_copy(update={"line": 5}).apply(CORE)


def test_build_derives_gold_and_test_patches(tmp_path, offline_sdist):
    out = tmp_path / "instances.jsonl"
    [instance] = shipped.build_shipped([spec()], tmp_path / "repos", out, tmp_path / "cache")
    clone = tmp_path / "repos" / "owner__pkg"
    assert touched_paths(instance.patch) == ["pkg/core.py"]
    assert "-    return x / 3" in instance.patch and "+    return x / 2" in instance.patch
    assert touched_paths(instance.test_patch) == ["tests/test_core.py"]
    assert "+def test_half" in instance.test_patch
    assert instance.source.requirement == "pkg==1.0" and instance.environment_setup_commit == instance.base_commit
    # base_commit holds the bug and not our tests; main holds the pristine sdist without generated egg-info
    base_core = repository.git("show", f"{instance.base_commit}:pkg/core.py", cwd=clone)
    assert "x / 3" in base_core
    assert "test_half" not in repository.git("show", f"{instance.base_commit}:tests/test_core.py", cwd=clone)
    assert not (clone / "pkg.egg-info").exists() and (clone / "pkg/core.py").read_text() == CORE
    assert out.read_text().count("\n") == 1


def test_rebuild_reproduces_base_commit_and_replaces_its_own_clone(tmp_path, offline_sdist):
    first = shipped.build_shipped([spec()], tmp_path / "repos", tmp_path / "a.jsonl", tmp_path / "cache")
    second = shipped.build_shipped([spec()], tmp_path / "repos", tmp_path / "b.jsonl", tmp_path / "cache")
    assert first[0].base_commit == second[0].base_commit
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_never_overwrites_a_foreign_clone(tmp_path, offline_sdist):
    foreign = tmp_path / "repos" / "owner__pkg"
    (foreign / ".git").mkdir(parents=True)
    with pytest.raises(SpecError, match="not made by build-swe"):
        shipped.build_shipped([spec()], tmp_path / "repos", tmp_path / "x.jsonl", tmp_path / "cache")
    assert foreign.exists()


def test_an_injection_that_does_not_match_names_the_spec(tmp_path, offline_sdist):
    bad = spec(injections=[{"path": "pkg/core.py", "line": 2, "old": "nope\n", "new": "x\n"}])
    with pytest.raises(SpecError, match="owner__pkg-gym-1: pkg/core.py:2"):
        shipped.build_shipped([bad], tmp_path / "repos", tmp_path / "x.jsonl", tmp_path / "cache")


def test_shipped_specs_are_valid():
    specs = load_specs()
    assert len(specs) >= 3
    assert len({s.package for s in specs}) >= 3
    for s in specs:
        assert s.fail_to_pass and s.pass_to_pass, s.instance_id
        test_files = {t.path for t in s.tests}
        assert {i.split("::")[0] for i in s.fail_to_pass + s.pass_to_pass} <= test_files, s.instance_id
        assert not set(s.fail_to_pass) & set(s.pass_to_pass)
        assert all("==" in requirement for requirement in s.install), "pinned environments"
