"""Unified diffs: split into per-file sections, list touched paths, strip protected paths.

The parser follows hunk headers (``@@ -a,b +c,d @@``) and consumes exactly
the lines they announce, so a removed line that happens to read ``--- x`` is
never mistaken for a file header. Git diffs (``diff --git``, renames, mode
changes, binary patches) and plain ``diff -u`` output are both understood.

Protected paths are those an agent could use to fake a resolution instead of
fixing the code: the tests (files ``test_patch`` touches, files of the
F2P/P2P test ids, anything that looks like a test module or sits in a test
directory), pytest's configuration and plugins (``conftest.py``, ini files,
``pyproject.toml``/``setup.cfg``, entry-point metadata, modules that would
shadow pytest itself or, at the repository root, a standard-library module; names that shadow what the image
holds are judged on the applied tree, where the repository's own modules are known),
interpreter start-up hooks (``sitecustomize``/``usercustomize`` as files or
packages, ``.pth``), compiled bytecode (a ``.pyc`` or ``__pycache__`` entry runs instead of
its source), CI configuration, and anything inside ``.git``. A module is
recognised in every form the interpreter imports (``name.py``, ``name.pyc``,
``name.cpython-311-x86_64-linux-gnu.so``, ``name/``). A
section touching any of them is removed whole and reported. The grader checks
the *result* too (`tasks.swe.grader`): whatever form of diff got through,
every changed or new path of the tree after applying goes through
``protection`` again, and protected ones are restored to the base commit.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"')

TEST_DIRS = frozenset({"test", "tests", "testing"})
PYTEST_CONFIG = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    }
)
# Module names that, placed on sys.path ahead of site-packages, would replace the test runner itself, or that
# pytest imports when they exist (optional dependencies that a module at the repository root would provide).
RUNNER_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "pluggy",
        "py",
        "iniconfig",
        "unittest",
        "packaging",
        "exceptiongroup",
        "tomli",
        "pygments",
        "colorama",
        "argcomplete",
        "xdist",
        "execnet",
        "_hypothesis_pytestplugin",
    }
)
# What follows a module's name in a file the import system loads: source, bytecode, extension modules.
MODULE_FILE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_-]+)*\.(?:py|pyc|pyo|pyw|so|pyd)$")
STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})  # as a module file or as a package
# A module or package at the repository root named like a standard-library module would shadow it for the
# test run (the root is on sys.path): `random.py`, `json/__init__.py`.
STDLIB_MODULES = frozenset(sys.stdlib_module_names)
SOURCE_ROOTS = frozenset({"src", "lib"})
GIT_FILES = frozenset(
    {".gitattributes", ".gitmodules"}
)  # attributes name filters that run on checkout  # src-layout folders an editable install puts on sys.path
CI_FILES = frozenset(
    {
        ".travis.yml",
        ".gitlab-ci.yml",
        "azure-pipelines.yml",
        "appveyor.yml",
        ".appveyor.yml",
        "Jenkinsfile",
        ".pre-commit-config.yaml",
        "noxfile.py",
        "codecov.yml",
        ".codecov.yml",
    }
)
CI_DIRS = frozenset({".github", ".circleci", ".gitlab", ".azure-pipelines", ".buildkite"})


@dataclass(frozen=True)
class FileDiff:
    """One file's section of a diff, verbatim (header lines included)."""

    paths: tuple[str, ...]  # every path it names (old and new), without a/ b/ prefixes, /dev/null dropped
    text: str


@dataclass(frozen=True)
class Stripped:
    path: str
    reason: str


@dataclass(frozen=True)
class StrippedDiff:
    """What is left of a diff after protected sections are removed, and what was removed."""

    diff: str
    stripped: tuple[Stripped, ...]


def _unquote(token: str) -> str:
    match = _QUOTED.match(token)
    if not match:
        return token
    # git quotes paths with C escapes, bytes as octal (\303\251): decode them as UTF-8. Any other escape (or a
    # byte value past \377) is kept as written: a crafted header is data, never an exception.
    out = bytearray()
    raw, i = match.group(1), 0
    while i < len(raw):
        char = raw[i]
        if char != "\\" or i + 1 == len(raw):
            out += char.encode("utf-8", errors="surrogateescape")
            i += 1
            continue
        octal = re.match(r"[0-7]{3}", raw[i + 1 : i + 4])
        if octal and int(octal.group(), 8) <= 0o377:
            out.append(int(octal.group(), 8))
            i += 4
        else:
            nxt = raw[i + 1]
            out += _C_ESCAPES.get(nxt, "\\" + nxt).encode("utf-8", errors="surrogateescape")
            i += 2
    return out.decode("utf-8", errors="replace")


_C_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _strip_prefix(path: str) -> str | None:
    path = _unquote(path.strip())
    if path == "/dev/null":
        return None
    if path[:2] in ("a/", "b/"):
        path = path[2:]
    return path


def _header_paths(line: str) -> list[str]:
    """Paths of a ``diff --git a/X b/Y`` line (best effort when unquoted paths contain spaces)."""
    rest = line[len("diff --git ") :].rstrip("\n")
    if rest.startswith('"'):
        match = _QUOTED.match(rest)
        first = _strip_prefix(rest[: match.end()]) if match else None
        second = _strip_prefix(rest[match.end() :].strip()) if match else None
        return [p for p in (first, second) if p]
    if " b/" in rest:
        first, _, second = rest.partition(" b/")
        return [p for p in (_strip_prefix(first), _strip_prefix("b/" + second)) if p]
    return [p for p in (_strip_prefix(tok) for tok in rest.split(" ", 1)) if p]


def _file_line_path(line: str) -> str | None:
    value = line[4:].rstrip("\n")
    if not value.startswith('"') and "\t" in value:
        value = value.split("\t", 1)[0]  # diff -u appends a timestamp after a tab
    return _strip_prefix(value)


def split(diff: str) -> list[FileDiff]:
    """The per-file sections of ``diff``; text before the first section (a commit message) is dropped."""
    lines = diff.splitlines(keepends=True)
    sections: list[tuple[list[str], list[str]]] = []  # (lines, paths)
    current: tuple[list[str], list[str]] | None = None
    in_git_header = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            current = ([line], _header_paths(line))
            sections.append(current)
            in_git_header = True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if current is None or not in_git_header:
                current = ([], [])
                sections.append(current)
            current[0].extend([line, lines[i + 1]])
            current[1].extend(p for p in (_file_line_path(line), _file_line_path(lines[i + 1])) if p)
            in_git_header = False
            i += 2
            continue
        elif current is not None and (match := _HUNK.match(line)):
            in_git_header = False
            old = int(match.group(1)) if match.group(1) is not None else 1
            new = int(match.group(2)) if match.group(2) is not None else 1
            current[0].append(line)
            i += 1
            while i < len(lines) and (old > 0 or new > 0 or lines[i].startswith("\\")):
                body = lines[i]
                if body.startswith("\\"):
                    pass
                elif body.startswith("-"):
                    old -= 1
                elif body.startswith("+"):
                    new -= 1
                elif body.startswith(" ") or body in ("\n", "\r\n"):
                    old -= 1
                    new -= 1
                else:
                    break  # a truncated hunk: let git apply report it
                current[0].append(body)
                i += 1
            continue
        elif current is not None:
            if in_git_header:
                for key in ("rename from ", "rename to ", "copy from ", "copy to "):
                    if line.startswith(key):
                        current[1].append(_unquote(line[len(key) :].rstrip("\n")))
            current[0].append(line)
        i += 1
    return [FileDiff(tuple(dict.fromkeys(paths)), "".join(body)) for body, paths in sections]


def touched_paths(diff: str) -> list[str]:
    """Every path a diff names, in order, without duplicates."""
    return list(dict.fromkeys(path for section in split(diff) for path in section.paths))


def files_of_test_ids(test_ids: Iterable[str]) -> set[str]:
    """The files of pytest node ids (``path::name[param]`` -> ``path``)."""
    return {test_id.split("::", 1)[0] for test_id in test_ids if "::" in test_id}


def module_name(part: str, is_dir: bool) -> str | None:
    """The module a path component provides to ``import``: a package directory or any importable file form."""
    if is_dir:
        return part
    match = MODULE_FILE.match(part)
    return match.group("name") if match else None


def protection(path: str, test_files: frozenset[str] | set[str], shadowed: frozenset[str] | None = None) -> str | None:
    """Why an agent may not change ``path``, or None when it may.

    ``shadowed``: the top-level module names a module at the repository's top level may not take, as the grader
    finds them in the instance's container: what the test run's interpreter finds outside the repository and
    what pytest imports when it exists (``RUNNER_MODULES``), less the repository's own top-level modules at
    base_commit (a fix to tomli in the tomli repository is the fix, never a shadow). None, where nothing is known
    of the image or the repository: ``RUNNER_MODULES``.
    """
    normal = posixpath.normpath(path)
    parts = normal.split("/")
    name = parts[-1]
    modules = [module_name(part, i < len(parts) - 1) for i, part in enumerate(parts)]
    if normal.startswith("/") or ".." in parts or normal == ".":
        return "path outside the repository"
    if ".git" in parts or name in GIT_FILES:
        return "git metadata"
    if normal in test_files:
        return "test file of the instance"
    if name in PYTEST_CONFIG:
        return "pytest configuration or conftest"
    if any(part.endswith((".egg-info", ".dist-info")) for part in parts) or name == "entry_points.txt":
        return "package metadata (can register pytest plugins)"
    if name.startswith("pytest_") and name.endswith(".py") or "pytest_plugin" in name:
        return "pytest plugin"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "compiled bytecode (runs instead of its source)"
    # Top-level modules of the directories on the test run's sys.path: the root and a src/lib layout's folder.
    top = [modules[0]] + ([modules[1]] if len(parts) > 1 and parts[0] in SOURCE_ROOTS else [])
    if any(module in (RUNNER_MODULES if shadowed is None else RUNNER_MODULES & shadowed) for module in top):
        return "shadows the test runner"
    if any(module in STARTUP_HOOKS for module in modules) or name.endswith(".pth"):
        return "interpreter start-up hook"
    if any(module in STDLIB_MODULES for module in top):
        return "shadows a standard-library module"
    if shadowed and any(module in shadowed for module in top):
        return "shadows an installed module (it would run in its place)"
    if name in CI_FILES or parts[0] in CI_DIRS:
        return "CI configuration"
    if any(part in TEST_DIRS for part in parts[:-1]) or re.match(r"^(test_.*|.*_test)\.py$", name):
        return "test module"
    return None


def strip_protected(diff: str, test_files: Iterable[str]) -> StrippedDiff:
    """``diff`` without the sections that touch a protected path.

    Module names that shadow are not judged here: the text knows neither the image nor which top-level modules
    are the repository's own, so the grader's check of the applied tree decides them (`tasks.swe.grader`).
    """
    protected = frozenset(posixpath.normpath(path) for path in test_files)
    kept: list[str] = []
    stripped: list[Stripped] = []
    for section in split(diff):
        reasons = [(path, protection(path, protected, frozenset())) for path in section.paths]
        hits = [Stripped(path, reason) for path, reason in reasons if reason]
        if not section.paths:
            hits = [Stripped("?", "section names no file")]
        if hits:
            stripped.extend(hits)
        else:
            kept.append(section.text if section.text.endswith("\n") else section.text + "\n")
    return StrippedDiff("".join(kept), tuple(dict.fromkeys(stripped)))
