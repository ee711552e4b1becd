"""How a repository is built (issue 42, class 5): its build system as pip reads it, its distribution name, and the
pretend version a repository versioned from git gets."""

from __future__ import annotations

import pytest

from images.inputs import ImageBuildError
from tasks.swe.images import (
    DEFAULT_BUILD_REQUIRES,
    LEGACY_BACKEND,
    BuildSystem,
    build_system,
    distribution_name,
    pretend_version,
    version_environment,
)
from tasks.swe.instance import SweInstance
from tests.swe_support import row

SCM = """\
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "my.pkg-name_x"
dynamic = ["version"]
"""


def test_the_build_system_is_read_as_pip_reads_it():
    assert build_system({"pyproject.toml": SCM}) == BuildSystem(
        ("setuptools>=64", "setuptools-scm>=8"), "setuptools.build_meta"
    )
    in_tree = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n'
    assert build_system({"pyproject.toml": in_tree}) == BuildSystem((), "backend", ("_build",))
    legacy = BuildSystem(DEFAULT_BUILD_REQUIRES, LEGACY_BACKEND)
    assert build_system({}) == build_system({"setup.py": "from setuptools import setup\nsetup()\n"}) == legacy
    assert build_system({"pyproject.toml": "[tool.black]\nline-length = 99\n"}) == legacy  # no [build-system]
    # requires without a backend: pip's legacy backend over the named requirements
    assert build_system({"pyproject.toml": '[build-system]\nrequires = ["setuptools<60"]\n'}) == BuildSystem(
        ("setuptools<60",), LEGACY_BACKEND
    )
    with pytest.raises(ImageBuildError, match="pyproject.toml does not parse"):
        build_system({"pyproject.toml": "[build-system\n"})


def test_the_distribution_name_comes_from_the_metadata_files():
    assert distribution_name({"pyproject.toml": SCM}) == "my.pkg-name_x"
    assert distribution_name({"setup.cfg": "[metadata]\nname = dvc\n"}) == "dvc"
    assert distribution_name({"setup.py": "from setuptools import setup\nsetup(\n    name='toolz',\n)\n"}) == "toolz"
    # pyproject first; a name that is no distribution name, or none at all: unknown
    both = {"pyproject.toml": SCM, "setup.cfg": "[metadata]\nname = other\n"}
    assert distribution_name(both) == "my.pkg-name_x"
    assert distribution_name({"setup.py": "setup(name=NAME)\n"}) is None
    assert distribution_name({"pyproject.toml": '[project]\nname = "no spaces allowed"\n'}) is None
    assert distribution_name({"setup.cfg": "not an ini file ["}) is None


def instance(version: str) -> SweInstance:
    data = row(version=version)
    data.pop("created_at")  # a published field the loader drops
    return SweInstance.model_validate(data)


@pytest.mark.parametrize(
    ("version", "pretend"),
    [
        ("2.5", "2.5"),  # SWE-bench's release line
        ("0.12.1", "0.12.1"),  # a shipped instance's pinned version
        ("1.0rc1", "1.0rc1"),
        ("3.1.post2.dev0", "3.1.post2.dev0"),
        ("", "0.0.0"),
        ("v1.2", "0.0.0"),
        ("1.2+local", "0.0.0"),  # a local label is no public version
        ("2.5; echo pwned", "0.0.0"),  # the version goes into the image's install step as a shell word
    ],
)
def test_the_pretend_version_is_the_instances_when_it_is_a_version(version, pretend):
    assert pretend_version(instance(version)) == pretend


def test_only_the_per_distribution_pretend_version_is_set():
    # setuptools-scm's spelling: the name canonicalised (runs of -_. as one _), upper case
    assert version_environment({"pyproject.toml": SCM}, "2.5") == {
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_MY_PKG_NAME_X": "2.5"
    }
    assert version_environment({"setup.py": "setup()\n"}, "2.5") == {}  # never the plain form: it reaches deps
