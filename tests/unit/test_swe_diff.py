"""Diff splitting, touched paths and protected-path stripping."""

from __future__ import annotations

import pytest

from tasks.swe.diff import files_of_test_ids, protection, split, strip_protected, touched_paths

SOURCE = """\
diff --git a/pkg/core.py b/pkg/core.py
index 1111111..2222222 100644
--- a/pkg/core.py
+++ b/pkg/core.py
@@ -1,4 +1,4 @@
 def f(x):
--- this removed line looks like a file header
+++ and this added one too
     return x
"""
TEST = """\
diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1 +1,2 @@
 import pkg
+def test_new(): assert pkg.f(1) == 1
"""
CONFTEST = """\
diff --git a/conftest.py b/conftest.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,2 @@
+def pytest_runtest_makereport(item, call):
+    pass
"""
RENAME = """\
diff --git a/pkg/old.py b/pkg/new.py
similarity index 100%
rename from pkg/old.py
rename to pkg/new.py
"""
BINARY = """\
diff --git a/pkg/data.bin b/pkg/data.bin
new file mode 100644
index 0000000..e69de29
GIT binary patch
literal 3
KcmZQzWMT#Y01f~L

literal 0
HcmV?d00001

"""
PLAIN = """\
--- pkg/a.py\t2024-01-01 00:00:00
+++ pkg/a.py\t2024-01-02 00:00:00
@@ -1 +1 @@
-x = 1
+x = 2
--- setup.cfg
+++ setup.cfg
@@ -1 +1 @@
-[tool:pytest]
+[tool:pytest] addopts = -p evil
"""


def test_split_follows_hunk_counts():
    sections = split(SOURCE + TEST + CONFTEST)
    assert [s.paths for s in sections] == [("pkg/core.py",), ("tests/test_core.py",), ("conftest.py",)]
    assert sections[0].text == SOURCE  # the '--- this removed line' stayed inside its hunk
    assert "".join(s.text for s in sections) == SOURCE + TEST + CONFTEST


def test_renames_binary_and_plain_diffs():
    assert touched_paths(RENAME) == ["pkg/old.py", "pkg/new.py"]
    assert split(BINARY)[0].paths == ("pkg/data.bin",)
    assert split(BINARY)[0].text == BINARY
    assert [s.paths for s in split(PLAIN)] == [("pkg/a.py",), ("setup.cfg",)]
    assert touched_paths("From abc Mon Sep 17 00:00:00 2001\nSubject: x\n\n" + SOURCE) == ["pkg/core.py"]
    quoted = 'diff --git "a/pkg/caf\\303\\251.py" "b/pkg/caf\\303\\251.py"\n--- "a/pkg/caf\\303\\251.py"\n'
    assert touched_paths(quoted + '+++ "b/pkg/caf\\303\\251.py"\n@@ -1 +1 @@\n-a\n+b\n') == ["pkg/café.py"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("tests/test_core.py", "test file of the instance"),
        ("pkg/conftest.py", "pytest configuration or conftest"),
        ("pytest.ini", "pytest configuration or conftest"),
        ("pyproject.toml", "pytest configuration or conftest"),
        ("setup.cfg", "pytest configuration or conftest"),
        ("tox.ini", "pytest configuration or conftest"),
        ("pkg.egg-info/entry_points.txt", "package metadata (can register pytest plugins)"),
        ("pkg/pytest_force.py", "pytest plugin"),
        ("pytest.py", "shadows the test runner"),
        ("pytest.toml", "pytest configuration or conftest"),
        ("pkg/__pycache__/core.cpython-311.pyc", "compiled bytecode (runs instead of its source)"),
        ("random.pyc", "compiled bytecode (runs instead of its source)"),
        ("json.cpython-311-x86_64-linux-gnu.so", "shadows a standard-library module"),
        ("random.abi3.so", "shadows a standard-library module"),
        ("src/json/__init__.py", "shadows a standard-library module"),
        ("pygments/__init__.py", "shadows the test runner"),
        ("src/_pytest/runner.py", "shadows the test runner"),
        ("sitecustomize.cpython-311-x86_64-linux-gnu.so", "interpreter start-up hook"),
        ("pkg/usercustomize/__init__.py", "interpreter start-up hook"),
        ("_pytest/runner.py", "shadows the test runner"),
        ("src/sitecustomize.py", "interpreter start-up hook"),
        ("evil.pth", "interpreter start-up hook"),
        (".github/workflows/ci.yml", "CI configuration"),
        (".travis.yml", "CI configuration"),
        ("pkg/tests/helpers.py", "test module"),
        ("test_other.py", "test module"),
        ("pkg/thing_test.py", "test module"),
        (".git/hooks/pre-commit", "git metadata"),
        ("../outside.py", "path outside the repository"),
        ("/etc/passwd", "path outside the repository"),
    ],
)
def test_protected_paths(path, reason):
    assert protection(path, {"tests/test_core.py"}) == reason


@pytest.mark.parametrize(
    "path",
    [
        "pkg/core.py",
        "pkg/testing_utils_not_a_dir.py",
        "docs/index.rst",
        "setup.py",
        "src/pkg/contest.py",
        "README.md",
        "pkg/py.py",
        "pkg/json/encoder.py",
        "pkg/_speedups.cpython-311-x86_64-linux-gnu.so",
        "typings/json.pyi",
    ],
)
def test_source_paths_are_not_protected(path):
    assert protection(path, {"tests/test_core.py"}) is None


def test_strip_keeps_source_and_reports_the_rest():
    result = strip_protected(SOURCE + TEST + CONFTEST + RENAME, {"tests/test_core.py"})
    assert result.diff == SOURCE + RENAME
    assert [(s.path, s.reason) for s in result.stripped] == [
        ("tests/test_core.py", "test file of the instance"),
        ("conftest.py", "pytest configuration or conftest"),
    ]
    assert strip_protected("", set()).diff == ""
    only_tests = strip_protected(TEST, {"tests/test_core.py"})
    assert only_tests.diff == "" and len(only_tests.stripped) == 1


def test_a_rename_onto_a_protected_path_is_stripped():
    sneaky = RENAME.replace("pkg/new.py", "conftest.py")
    assert strip_protected(sneaky, set()).diff == ""


def test_files_of_test_ids():
    ids = ["tests/test_a.py::test_x[1-2]", "test_b.py::C::test_y", "not-an-id"]
    assert files_of_test_ids(ids) == {"tests/test_a.py", "test_b.py"}


def test_crafted_quoted_paths_are_data_never_an_exception():
    for name, expected in (
        ("\\x", "toolz/\\x"),
        ("\\777", "toolz/\\777"),
        ("caf\\303\\251", "toolz/café"),
        ("tab\\there", "toolz/tab\there"),
        ('q\\"uote', 'toolz/q"uote'),
    ):
        diff = (
            f'diff --git "a/toolz/{name}" "b/toolz/{name}"\nnew file mode 100644\n--- /dev/null\n'
            f'+++ "b/toolz/{name}"\n@@ -0,0 +1 @@\n+x\n'
        )
        assert touched_paths(diff) == [expected]


def test_installed_module_names_and_git_attributes_are_protected():
    installed = frozenset({"_distutils_hack", "setuptools", "pkg_resources"})
    assert protection("_distutils_hack/__init__.py", set(), installed).startswith("shadows an installed module")
    assert protection("src/setuptools.py", set(), installed).startswith("shadows an installed module")
    assert protection("pkg/setuptools.py", set(), installed) is None  # inside a package it is pkg.setuptools
    assert protection(".gitattributes", set()) == "git metadata"
    assert protection("docs/.gitmodules", set()) == "git metadata"
