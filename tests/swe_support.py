"""Shared set-up of the SWE integration tests: the shipped instances, built once per session."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from gym.environment import Environment, task_text
from gym.format.message import Message
from gym.scripted import ReferencePolicy
from tasks.swe.instance import SweInstance, load_instances
from tasks.swe.shipped import DEFAULT_OUT, DEFAULT_REPOS_DIR, ROOT

TOOLZ = "pytoolz__toolz-gym-1"  # the fastest shipped instance: the one most tests use


@cache
def shipped() -> dict[str, SweInstance]:
    """``python -m gym tasks build-swe`` (sdists cached under .cache/swe), then the instances by id."""
    proc = subprocess.run(
        [sys.executable, "-m", "gym", "tasks", "build-swe"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_instances(DEFAULT_OUT).by_id()


@cache
def images() -> dict[str, str]:
    """Image tag of every shipped instance (cached by input hash: a no-op after the first build)."""
    from tasks.swe.images import build_images

    tags, errors = build_images(list(shipped().values()), DEFAULT_REPOS_DIR)
    assert not errors, errors
    return tags


def repos_dir() -> Path:
    return DEFAULT_REPOS_DIR


TEST_PATCH = """\
diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1 +1,2 @@
 import pkg
+def test_new(): pass
diff --git a/tests/data/fixture.json b/tests/data/fixture.json
new file mode 100644
--- /dev/null
+++ b/tests/data/fixture.json
@@ -0,0 +1 @@
+{}
"""


def row(**overrides):
    data = {
        "instance_id": "owner__name-1",
        "repo": "owner/name",
        "base_commit": "a" * 40,
        "patch": "diff --git a/pkg/core.py b/pkg/core.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": "It is broken.",
        "hints_text": "",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_new"]),
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": "b" * 40,
        "created_at": "2024-01-01T00:00:00Z",  # published extra fields are ignored
    }
    data.update(overrides)
    return data


# A git section of toolz that git apply refuses (one context line off by a letter), so `patch --fuzz` (the harness's
# fallback) applies the whole text, sections after it included, which the text filter may not split out.
FUZZY_ACCUMULATE = """\
diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py
--- a/toolz/itertoolz.py
+++ b/toolz/itertoolz.py
@@ -54,6 +54,7 @@ def accumulate(binop, seq, initial=no_default):
     See also:
         itertools.accumulate :  In standard itertools for Python 3.2+
     \"\"\"
+    # a context line above is off by one letter: git apply refuses, patch --fuzz does not
     seq = iter(seq)
     if not initial or initial == no_default:
         try:
"""


def new_file(path: str, text: str) -> str:
    """A git diff that creates ``path`` holding ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def without_tamper_checks(monkeypatch, scan: bool = True, record: bool = True) -> None:
    """Grade without the tamper scan of the applied tree (``scan``) and/or without the harness's record deciding
    (``record``: the log alone, as before issue 41 class 2), for controls that show what a check stops."""
    from tasks.swe import grader

    async def no_scan(self, ws, paths):
        return None

    if scan:
        monkeypatch.setattr(grader.SweGrader, "_scan", no_scan, raising=False)
    if record:
        monkeypatch.setattr(grader, "check_record", lambda raw, why, key, log, exit_code: (None, None), raising=False)


def signed_record(key: bytes, lines: list[list]) -> bytes:
    """A harness record of ``lines`` (``[kind, *values]`` each) as the plugin writes it: seq, JSON, MAC."""
    import hashlib
    import hmac

    out = b""
    for seq, (kind, *values) in enumerate(lines):
        body = json.dumps([seq, kind, *values], separators=(",", ":")).encode()
        out += body + b" " + hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b"\n"
    return out


def honest_evidence(statuses: dict, exit_code: int | None):
    """The harness's evidence of a run whose tests ended with ``statuses`` (test id -> PASSED/FAILED/SKIPPED/...,
    each reported in its call phase) and ``exit_code``: what an untampered run records."""
    from tasks.swe.grader import Evidence

    outcome = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "ERROR": "failed"}
    key = b"k" * 32
    lines = [["start", 1, "8.3.4"], ["configure", "/workspace/repo", "/workspace/repo"]]
    for test_id, status in statuses.items():
        status = str(getattr(status, "value", status))
        when = "setup" if status == "ERROR" else "call"
        lines.append(["report", test_id, when, outcome.get(status, "skipped"), status in ("XFAIL", "XPASS")])
    failed = any(str(getattr(s, "value", s)) in ("FAILED", "ERROR") for s in statuses.values())
    lines += [["finish", int(failed), len(statuses), int(failed)], ["end", exit_code]]
    return Evidence(signed_record(key, lines), "", key)


class Tamperer(ReferencePolicy):
    """Plays one fixed script of tool calls on every task, then submits."""

    def __init__(self, env: Environment, turns: list[list[Message]]) -> None:
        super().__init__(env.harmony, env.tasks, {}, {i: task_text(t) for i, t in env.tasks.items()}, empty=True)
        self.turns = turns

    def script(self, task):
        return [*self.turns, [Message.tool_call("submit", {})]]


def imported_by_toolz(module: str) -> str:
    """A hunk that makes ``toolz/__init__.py`` import ``toolz/<module>.py`` first."""
    return f"""\
diff --git a/toolz/__init__.py b/toolz/__init__.py
--- a/toolz/__init__.py
+++ b/toolz/__init__.py
@@ -1 +1,2 @@
+from . import {module}
 from .itertoolz import *
"""


def in_accumulate(*lines: str) -> str:
    """A hunk of toolz that puts ``lines`` first in ``accumulate``'s body (the function's own indentation added)."""
    body = "".join(f"+    {line}\n" for line in lines)
    return (
        "diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py\n--- a/toolz/itertoolz.py\n+++ b/toolz/itertoolz.py\n"
        f"@@ -54,6 +54,{6 + len(lines)} @@ def accumulate(binop, seq, initial=no_default):\n"
        "     See Also:\n         itertools.accumulate :  In standard itertools for Python 3.2+\n"
        f'     """\n{body}     seq = iter(seq)\n     if not initial or initial == no_default:\n         try:\n'
    )


def called_by_accumulate(module: str, function: str) -> str:
    """A hunk that makes every call of ``accumulate`` call ``toolz/<module>.py``'s ``function`` first."""
    return in_accumulate(f"from .{module} import {function}", f"{function}()")
