"""Shared set-up of the SWE integration tests: the shipped instances, built once per session."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

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
    from tasks.swe.evaluation import build_images

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
