"""Repositories built the ways real projects build, graded in the real sandbox (issue 42, class 5).

Three small repositories of our own, each a local clone with a base and a fix commit:

* ``chunked``: setuptools with setuptools-scm, its version written to an ignored ``_version.py``. The exported
  tree has no ``.git``: setuptools-scm could not find a version and the environment image failed to build
  (infra_error). Its P2P tests check that the installed version is the instance's pretend version.
* ``slugs``: hatchling with hatch-vcs, installed editable: pip asks the backend, which asks for ``editables``,
  a wheel nobody downloaded; the image failed to build.
* ``iniconfig``: a repository whose package is a module pytest really imports in the image (the runner's
  ``iniconfig``, replaced by the editable install): its own fix was stripped as "shadows the test runner".

Each grades its gold patch resolved and the empty patch unresolved. Attacks beside them: new top-level
``pluggy/`` and ``_pytest/`` packages are still stripped, in a repository that is not those projects and in the
one whose own package pytest imports; that repository's own package changed to replace pytest's ``runtest``
is ``tampered`` (the control, with the tamper checks off, resolves); the control for the fix: with the
protection as it was (every name pytest may import, the repository's own included) the gold fix is stripped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandbox.config import SandboxConfig
from tasks.swe import grader as grader_module
from tasks.swe import repository
from tasks.swe.grader import SweGrader, SweGraderConfig, grade_predictions, grading_budgets
from tasks.swe.images import build_instance_image, docker_client
from tasks.swe.instance import SweInstance
from tasks.swe.resolution import InstanceResult
from tests.swe_support import new_file, without_tamper_checks

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

# A small INI parser of our own under the name pytest imports (`_pytest.config.findpaths`: `import iniconfig`),
# with the API pytest calls; its distribution takes the place of the runner's iniconfig in the image.
INICONFIG = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "iniconfig"
version = "2.0.0"
requires-python = ">=3.9"

[tool.setuptools]
packages = ["iniconfig"]
""",
    "iniconfig/__init__.py": '''\
"""INI files as sections of ``name = value`` lines; an indented line continues the value above it."""

__all__ = ["IniConfig", "ParseError", "SectionWrapper"]


class ParseError(Exception):
    def __init__(self, path, lineno, msg):
        super().__init__(path, lineno, msg)
        self.path, self.lineno, self.msg = path, lineno, msg

    def __str__(self):
        return f"{self.path}:{self.lineno + 1}: {self.msg}"


class SectionWrapper:
    def __init__(self, config, name):
        self.config, self.name = config, name

    def get(self, key, default=None, convert=str):
        return self.config.get(self.name, key, default, convert)

    def __getitem__(self, key):
        return self.config.sections[self.name][key]

    def __iter__(self):
        return iter(self.config.sections[self.name])

    def items(self):
        return [(key, self[key]) for key in self]


class IniConfig:
    def __init__(self, path, data=None):
        self.path = str(path)
        if data is None:
            with open(self.path, encoding="utf-8") as handle:
                data = handle.read()
        self.sections = _parse(self.path, data.splitlines())

    def get(self, section, name, default=None, convert=str):
        try:
            return convert(self.sections[section][name])
        except KeyError:
            return default

    def __getitem__(self, name):
        if name not in self.sections:
            raise KeyError(name)
        return SectionWrapper(self, name)

    def __iter__(self):
        return (SectionWrapper(self, name) for name in self.sections)

    def __contains__(self, name):
        return name in self.sections


def _parse(path, lines):
    sections, current, last = {}, None, None
    for lineno, line in enumerate(lines):
        text = line.split("#", 1)[0].split(";", 1)[0].rstrip()
        if not text.strip():
            continue
        if text[0].isspace():
            if last is None:
                raise ParseError(path, lineno, "a continuation line without a name above it")
            current[last] = text.strip()
        elif text.startswith("["):
            if not text.endswith("]"):
                raise ParseError(path, lineno, "a section header without its closing bracket")
            current, last = sections.setdefault(text[1:-1].strip(), {}), None
        elif current is None:
            raise ParseError(path, lineno, "a value before the first section")
        else:
            name, sep, value = text.partition("=")
            if not sep:
                name, sep, value = text.partition(":")
            if not sep:
                raise ParseError(path, lineno, "a line that is neither a section nor name = value")
            last = name.strip()
            current[last] = value.strip()
    return sections
''',
    "tests/test_iniconfig.py": '''\
import pytest

from iniconfig import IniConfig, ParseError

TEXT = """
[server]
host = example.org  # the public name
port: 8080

[empty]
"""


def test_sections_and_values():
    config = IniConfig("x.ini", data=TEXT)
    assert "server" in config and "empty" in config and "other" not in config
    assert dict(config["server"].items()) == {"host": "example.org", "port": "8080"}
    assert config.get("server", "port", convert=int) == 8080
    assert config["server"].get("missing", "d") == "d"


def test_errors_name_the_line():
    with pytest.raises(ParseError) as caught:
        IniConfig("bad.ini", data="name = value\\n")
    assert str(caught.value) == "bad.ini:1: a value before the first section"


def test_pytest_imports_this_package():
    import sys

    import iniconfig

    assert sys.modules["_pytest.config.findpaths"].iniconfig is iniconfig
''',
}
INICONFIG_FIX = {
    "iniconfig/__init__.py": INICONFIG["iniconfig/__init__.py"].replace(
        "current[last] = text.strip()", 'current[last] += "\\n" + text.strip()'
    ),
    "tests/test_iniconfig.py": INICONFIG["tests/test_iniconfig.py"]
    + """

def test_continuation_lines_join_the_value():
    config = IniConfig("x.ini", data="[tool]\\npaths =\\n    src\\n    tests\\n")
    assert config["tool"]["paths"] == "\\nsrc\\ntests"
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


def variant(repos: Path, instance: SweInstance, files: dict[str, str]) -> str:
    """The diff from base_commit to base_commit with ``files`` written (a candidate's patch)."""
    path = repos / instance.clone_name
    fix = repository.rev_parse(path, "HEAD")
    repository.git("checkout", "-q", instance.base_commit, cwd=path)
    try:
        for relative, text in files.items():
            (path / relative).parent.mkdir(parents=True, exist_ok=True)
            (path / relative).write_text(text)
        return repository.diff(path, instance.base_commit, repository.commit_all(path, "variant"))
    finally:
        repository.git("checkout", "-q", "-f", fix, cwd=path)


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
            ("iniconfig", INICONFIG, INICONFIG_FIX, ""),
        ):
            instance = clone(repos, name, base, fix, version)
            image = build_instance_image(client, instance, repos)
            out[name] = (instance, image.tag)
    finally:
        client.close()
    out["repos"] = repos
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


# ---------------------------------------------------------------- a repository that is one of pytest's imports


def test_a_repository_whose_package_pytest_imports_grades_its_own_fix_resolved(built, monkeypatch):
    instance = built["iniconfig"][0]
    fixed, empty = grade(built, ("iniconfig", gold(built, "iniconfig")), ("iniconfig", ""))
    assert_gold_resolves_and_empty_does_not(instance, fixed, empty)
    assert "tests/test_iniconfig.py::test_pytest_imports_this_package" in fixed.p2p.success  # the runner's module
    # Control: with the protection as it was (every name pytest may import, the repository's own included), the
    # fix is taken out of the applied tree and the instance cannot be resolved.
    real = grader_module.protection
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, shadowed=None: real(path, protected))
    [before] = grade(built, ("iniconfig", gold(built, "iniconfig")))
    assert before.status == "unresolved" and before.f2p.failure == instance.fail_to_pass, before
    assert [(s.path, s.reason) for s in before.stripped] == [
        ("iniconfig/__init__.py", "shadows the test runner (changed in the applied tree)")
    ]


SHADOWS = new_file("pluggy/__init__.py", "import os\nos._exit(0)") + new_file(
    "_pytest/__init__.py", "import os\nos._exit(0)"
)
SHADOWED = [
    ("_pytest/__init__.py", "shadows the test runner (changed in the applied tree)"),
    ("pluggy/__init__.py", "shadows the test runner (changed in the applied tree)"),
]


def test_new_packages_named_like_pytests_imports_are_stripped_in_every_repository(built, monkeypatch):
    """New top-level ``pluggy/`` and ``_pytest/``, beside the gold fix and alone, in a repository that is neither
    (chunked) and in the one whose own package pytest imports (iniconfig): its own name exempts nothing else."""
    results = grade(
        built,
        *[(name, patch) for name in ("chunked", "iniconfig") for patch in (gold(built, name) + SHADOWS, SHADOWS)],
    )
    for result in results:
        assert sorted((s.path, s.reason) for s in result.stripped) == SHADOWED, result
    with_fix, alone, own_with_fix, own_alone = results
    assert with_fix.resolved and own_with_fix.resolved, (with_fix, own_with_fix)
    assert alone.status == own_alone.status == "unresolved", (alone, own_alone)
    # Control: with no path protected, the packages stay in the tree, where the tamper scan meets their exit
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, shadowed=None: None)
    [kept] = grade(built, ("chunked", SHADOWS))
    assert kept.status == "tampered" and kept.stripped == () and "os._exit" in kept.detail, kept


# The repository's own package, which pytest imports before any plugin, changed to make every test pass (no fix).
RUNTEST_REPLACED = INICONFIG["iniconfig/__init__.py"].replace(
    "        self.path = str(path)\n",
    "        self.path = str(path)\n        import _pytest.python\n\n"
    "        _pytest.python.Function.runtest = lambda item: None\n",
)


def test_the_own_package_pytest_imports_is_still_checked_for_tampering(built, monkeypatch):
    attack = variant(built["repos"], built["iniconfig"][0], {"iniconfig/__init__.py": RUNTEST_REPLACED})
    [tampered] = grade(built, ("iniconfig", attack))
    assert tampered.status == "tampered" and tampered.reward == 0.0 and "_pytest" in tampered.detail, tampered
    without_tamper_checks(monkeypatch)  # control: the scan and the harness's record off, the forgery resolves
    [forged] = grade(built, ("iniconfig", attack))
    assert forged.resolved, forged
