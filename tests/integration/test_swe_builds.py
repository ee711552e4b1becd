"""Repositories built the ways real projects build, graded in the real sandbox (issue 42, class 5).

Small repositories of our own, each a local clone with a base and a fix commit:

* ``chunked``: setuptools with setuptools-scm, its version written to an ignored ``_version.py``. The exported
  tree has no ``.git``: setuptools-scm could not find a version and the environment image failed to build
  (infra_error). Its P2P tests check that the installed version is the instance's pretend version.
* ``slugs``: hatchling with hatch-vcs, installed editable: pip asks the backend, which asks for ``editables``,
  a wheel nobody downloaded; the image failed to build.

Each grades its gold patch resolved and the empty patch unresolved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandbox.config import SandboxConfig
from tasks.swe import repository
from tasks.swe.grader import SweGrader, SweGraderConfig, grade_predictions, grading_budgets
from tasks.swe.images import build_instance_image, docker_client
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import InstanceResult

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

OWNER = "gym-builds"
INSTALL = ["pytest==8.3.4"]

CHUNKED_VERSION = "1.4.2"
CHUNKED = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "chunked"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.setuptools]
packages = ["chunked"]

[tool.setuptools_scm]
version_file = "chunked/_version.py"
""",
    ".gitignore": "chunked/_version.py\n",
    "chunked/__init__.py": '''\
"""Split sequences into chunks of a fixed size."""

from chunked._version import version as __version__
from chunked.core import chunks, pad_last

__all__ = ["__version__", "chunks", "pad_last"]
''',
    "chunked/core.py": '''\
def chunks(items, size):
    """Consecutive lists of ``size`` items of ``items``; the last one holds what is left."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    items = list(items)
    return [items[start : start + size] for start in range(0, len(items) - size + 1, size)]


def pad_last(items, size, fill=None):
    """``chunks`` with the last chunk padded to ``size`` with ``fill``."""
    out = chunks(items, size)
    if out and len(out[-1]) < size:
        out[-1] = out[-1] + [fill] * (size - len(out[-1]))
    return out
''',
    "tests/test_core.py": """\
from importlib.metadata import version

import pytest

import chunked
from chunked import chunks


def test_full_chunks():
    assert chunks(range(6), 3) == [[0, 1, 2], [3, 4, 5]]


def test_size_must_be_positive():
    with pytest.raises(ValueError):
        chunks([1], 0)


def test_the_version_is_the_instances():
    assert chunked.__version__ == version("chunked") == "1.4.2"
""",
}
CHUNKED_FIX = {
    "chunked/core.py": CHUNKED["chunked/core.py"].replace("len(items) - size + 1, size", "len(items), size"),
    "tests/test_core.py": CHUNKED["tests/test_core.py"]
    + """

def test_the_last_chunk_keeps_what_is_left():
    assert chunks(range(7), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunked.pad_last("abcd", 3, "-") == [["a", "b", "c"], ["d", "-", "-"]]
""",
}

SLUGS = {
    "pyproject.toml": """\
[build-system]
requires = ["hatchling", "hatch-vcs"]
build-backend = "hatchling.build"

[project]
name = "slugs"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.hatch.version]
source = "vcs"
""",
    "slugs/__init__.py": '''\
"""URL slugs from titles."""

import re
import unicodedata


def slugify(text, separator="-"):
    """``text`` as lower-case ASCII words joined by ``separator``."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return separator.join(re.findall(r"[a-z]+", ascii_text.lower()))
''',
    "tests/test_slugs.py": """\
from slugs import slugify


def test_words():
    assert slugify("Hello, World!") == "hello-world"


def test_accents():
    assert slugify("Crème brûlée", "_") == "creme_brulee"
""",
}
SLUGS_FIX = {
    "slugs/__init__.py": SLUGS["slugs/__init__.py"].replace('r"[a-z]+"', 'r"[a-z0-9]+"'),
    "tests/test_slugs.py": SLUGS["tests/test_slugs.py"]
    + """

def test_digits_are_kept():
    assert slugify("Top 10 tips for 2024") == "top-10-tips-for-2024"
""",
}


def clone(repos: Path, name: str, base: dict[str, str], fix: dict[str, str], version: str = "") -> SweInstance:
    """``repos/OWNER__name`` with a base and a fix commit, and its instance (F2P: the tests the fix adds)."""
    path = repos / f"{OWNER}__{name}"
    repository.init(path)
    for files in (base, fix):
        for relative, text in files.items():
            (path / relative).parent.mkdir(parents=True, exist_ok=True)
            (path / relative).write_text(text)
        commit = repository.commit_all(path, "fix" if files is fix else "base")
        if files is base:
            base_commit = commit
    tests = sorted(relative for relative in fix if relative.startswith("tests/"))
    ids = [line for relative in tests for line in ids_of(relative, base.get(relative, ""), fix[relative])]
    return SweInstance.model_validate(
        {
            "instance_id": f"{OWNER}__{name}-1",
            "repo": f"{OWNER}/{name}",
            "base_commit": base_commit,
            "patch": repository.diff(path, base_commit, commit, exclude=tests),
            "test_patch": repository.diff(path, base_commit, commit, paths=tests),
            "problem_statement": f"{name} is broken",
            "version": version,
            "FAIL_TO_PASS": [test for test, new in ids if new],
            "PASS_TO_PASS": [test for test, new in ids if not new],
            "install": INSTALL,
        }
    )


def ids_of(path: str, before: str, after: str) -> list[tuple[str, bool]]:
    """``(test id, added by the fix)`` for every test function of ``after``."""
    names = [line[4:].split("(")[0] for line in after.splitlines() if line.startswith("def test_")]
    return [(f"{path}::{name}", f"def {name}(" not in before) for name in names]


# ---------------------------------------------------------------- images, one per repository, built once


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """Each repository's instance and image tag (cached by input hash: a rebuild is a no-op)."""
    repos = tmp_path_factory.mktemp("build-repos")
    client = docker_client()
    out = {}
    try:
        for name, base, fix, version in (
            ("chunked", CHUNKED, CHUNKED_FIX, CHUNKED_VERSION),
            ("slugs", SLUGS, SLUGS_FIX, ""),
        ):
            instance = clone(repos, name, base, fix, version)
            image = build_instance_image(client, instance, repos)
            out[name] = (instance, image.tag)
    finally:
        client.close()
    return out


def grade(built, *pairs: tuple[str, str]) -> list[InstanceResult]:
    """``(repository, patch)`` pairs graded as ``grade --swe`` grades them, two at a time."""
    predictions = [(built[name][0], patch) for name, patch in pairs]
    tags = {built[name][0].instance_id: built[name][1] for name, _ in pairs}
    sandbox = grading_budgets(SandboxConfig())
    return trio.run(grade_predictions, predictions, tags, SweGrader(SweGraderConfig()), sandbox)


def gold(built, name: str) -> str:
    return built[name][0].patch


def assert_gold_resolves_and_empty_does_not(instance: SweInstance, fixed: InstanceResult, empty: InstanceResult):
    assert fixed.status == "resolved" and fixed.reward == 1.0 and fixed.stripped == (), fixed
    assert set(fixed.p2p.success) == set(instance.pass_to_pass), fixed
    assert empty.status == "unresolved" and empty.reward == 0.0, empty
    assert empty.f2p.failure == instance.fail_to_pass and set(empty.p2p.success) == set(instance.pass_to_pass)


# ---------------------------------------------------------------- versions from git, hatchling editable


def test_a_repository_versioned_by_setuptools_scm_grades_gold_resolved_and_empty_unresolved(built):
    instance = built["chunked"][0]
    fixed, empty = grade(built, ("chunked", gold(built, "chunked")), ("chunked", ""))
    assert_gold_resolves_and_empty_does_not(instance, fixed, empty)
    # the installed version is the instance's (its P2P test reads it from the package and its metadata)
    assert "tests/test_core.py::test_the_version_is_the_instances" in fixed.p2p.success


def test_a_hatchling_repository_installed_editable_grades_gold_resolved_and_empty_unresolved(built):
    instance = built["slugs"][0]
    fixed, empty = grade(built, ("slugs", gold(built, "slugs")), ("slugs", ""))
    assert_gold_resolves_and_empty_does_not(instance, fixed, empty)
