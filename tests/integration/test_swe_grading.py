"""SWE grading end to end on the shipped instances: real sdists, real images, fresh containers.

After ``python -m gym tasks build-swe`` the gold patch resolves every shipped
instance and an empty patch none; patches that game the tests (editing them,
a ``conftest.py`` that forces passes, ``pytest.skip`` in the code), break a
P2P test, do not apply, or kill the test run resolve none.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio

from tasks.swe import grader as grader_module
from tasks.swe.diff import StrippedDiff
from tasks.swe.evaluation import evaluate, grading_sandbox
from tasks.swe.grader import SweGrader, SweGraderConfig, grade_predictions
from tests.swe_support import (
    FUZZY_ACCUMULATE,
    TOOLZ,
    images,
    in_accumulate,
    repos_dir,
    shipped,
    without_tamper_checks,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CONFTEST_FORCING_PASSES = """\
diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,8 @@
+import pytest
+
+
+@pytest.hookimpl(hookwrapper=True)
+def pytest_runtest_makereport(item, call):
+    outcome = yield
+    report = outcome.get_result()
+    report.outcome = "passed"
"""

SKIP_IN_CODE = in_accumulate("import pytest", 'pytest.skip("not today")')

BREAKS_INTERPOSE = """\
diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py
--- a/toolz/itertoolz.py
+++ b/toolz/itertoolz.py
@@ -531,6 +531,5 @@ def interpose(el, seq):
     \"\"\"
     inposed = concat(zip(itertools.repeat(el), seq))
-    next(inposed)
     return inposed
 
 
"""

EXIT_AT_IMPORT = """\
diff --git a/toolz/__init__.py b/toolz/__init__.py
--- a/toolz/__init__.py
+++ b/toolz/__init__.py
@@ -1,3 +1,5 @@
+import os
+os._exit(0)
 from .itertoolz import *
 
 from .functoolz import *
"""

NOT_APPLICABLE = """\
diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py
--- a/toolz/itertoolz.py
+++ b/toolz/itertoolz.py
@@ -10,3 +10,3 @@
-this line is not in the file
+neither is this one
 nor this
"""


def grade(pairs, **config):
    return evaluate(pairs, repos_dir(), SweGraderConfig(**config), grading_sandbox(None)).instances


def patch_editing_only_tests(instance) -> str:
    """Rewrite the F2P tests to pass trivially: only test files change."""
    return instance.test_patch.replace("assert list(accumulate", "assert True or list(accumulate")


def test_cli_gold_resolves_every_shipped_instance(tmp_path):
    instances = shipped()
    images()
    out = tmp_path / "gold.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym",
            "grade",
            "--swe",
            "--tasks",
            "tasks/swe/instances.jsonl",
            "--repos-dir",
            str(repos_dir()),
            "--solutions",
            "gold",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["total"] == len(instances) >= 3
    assert report["resolved"] == report["total"] and report["infra_errors"] == 0
    for result in report["instances"]:
        instance = instances[result["instance_id"]]
        assert result["resolved"] and result["status"] == "resolved"
        assert sorted(result["f2p"]["success"]) == sorted(instance.fail_to_pass) and not result["f2p"]["failure"]
        assert sorted(result["p2p"]["success"]) == sorted(instance.pass_to_pass) and not result["p2p"]["failure"]
    assert f"resolved {len(instances)}/{len(instances)}" in proc.stdout


def test_empty_patch_resolves_none():
    instances = shipped()
    images()
    results = grade([(instance, "") for instance in instances.values()])
    assert [r.status for r in results] == ["unresolved"] * len(instances)
    for result in results:
        instance = instances[result.instance_id]
        assert set(result.f2p.failure) == set(instance.fail_to_pass)  # every F2P test really fails at base
        assert not result.p2p.failure  # and the P2P tests really pass there


def test_gaming_patches_resolve_none():
    toolz = shipped()[TOOLZ]
    images()
    gold = toolz.patch
    attacks = {
        "tests only": patch_editing_only_tests(toolz),
        "conftest forcing passes": CONFTEST_FORCING_PASSES,
        "pytest.skip in the code": SKIP_IN_CODE,
        "gold + conftest": gold + CONFTEST_FORCING_PASSES,
    }
    results = dict(zip(attacks, grade([(toolz, patch) for patch in attacks.values()])))
    for name in ("tests only", "conftest forcing passes", "pytest.skip in the code"):
        assert not results[name].resolved, name
        assert results[name].status == "unresolved", (name, results[name].detail)
    assert {s.path for s in results["tests only"].stripped} == {"toolz/tests/test_itertoolz.py"}
    assert [s.path for s in results["conftest forcing passes"].stripped] == ["conftest.py"]
    assert not results["pytest.skip in the code"].stripped
    assert set(results["pytest.skip in the code"].f2p.failure) == set(toolz.fail_to_pass)  # skipped is no pass
    # a real fix that also brings a conftest: the conftest is stripped and reported, the fix still counts
    assert results["gold + conftest"].resolved
    assert [s.path for s in results["gold + conftest"].stripped] == ["conftest.py"]


def test_the_conftest_attack_works_when_nothing_is_stripped(monkeypatch):
    """Control: the diff-text filter and the check of the applied tree each stop the forcing conftest alone;
    with both off the tamper scan still does; with all three and the harness's record off it would resolve the
    instance (so the checks above can fail)."""
    toolz = shipped()[TOOLZ]
    tags = images()

    def run():
        return trio.run(
            grade_predictions,
            [(toolz, CONFTEST_FORCING_PASSES)],
            tags,
            SweGrader(SweGraderConfig()),
            grading_sandbox(None),
        )[0]

    monkeypatch.setattr(grader_module, "strip_protected", lambda diff, files: StrippedDiff(diff, ()))
    tree_check_only = run()
    assert not tree_check_only.resolved and [s.path for s in tree_check_only.stripped] == ["conftest.py"]
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, installed=frozenset(): None)
    assert run().status == "tampered"
    without_tamper_checks(monkeypatch)
    assert run().resolved


def test_breaking_a_p2p_test_is_not_resolved():
    toolz = shipped()[TOOLZ]
    images()
    [result] = grade([(toolz, toolz.patch + BREAKS_INTERPOSE)])
    assert not result.resolved and result.status == "unresolved"
    assert result.f2p.failure == ()
    assert result.p2p.failure == ("toolz/tests/test_itertoolz.py::test_interpose",)
    assert 0.9 < result.partial < 1.0


def test_patch_that_does_not_apply_and_a_run_that_dies():
    toolz = shipped()[TOOLZ]
    images()
    not_applied, died = grade([(toolz, NOT_APPLICABLE), (toolz, toolz.patch + EXIT_AT_IMPORT)])
    assert not_applied.status == "patch_apply_failed" and not not_applied.resolved
    assert died.status == "tampered" and not died.resolved and "os._exit" in died.detail  # the tamper scan
    assert died.reward == 0.0  # the candidate killed the run: a 0, not a masked sample


def test_derived_test_ids_match_the_shipped_spec():
    """`tasks derive-swe-tests` (gold vs empty runs) reproduces the F2P/P2P ids the spec ships."""
    from tasks.swe.evaluation import derive_tests

    toolz = shipped()[TOOLZ]
    images()
    [derived] = derive_tests([toolz], repos_dir(), SweGraderConfig(), grading_sandbox(None))
    assert derived.failing_with_gold == () and derived.detail == ""
    assert sorted(derived.fail_to_pass) == sorted(toolz.fail_to_pass)
    assert sorted(derived.pass_to_pass) == sorted(toolz.pass_to_pass)


# A unified section the text filter reads (with a fuzzy context line), then a context diff it cannot read:
# git apply refuses the whole,
# `patch --fuzz` (the harness's fallback) applies both, and the conftest forcing passes lands in the tree.
CONTEXT_DIFF_CONFTEST = (
    FUZZY_ACCUMULATE
    + """\
*** a/conftest.py
--- b/conftest.py
***************
*** 0 ****
--- 1,8 ----
+ import pytest
+ 
+ 
+ @pytest.hookimpl(hookwrapper=True)
+ def pytest_runtest_makereport(item, call):
+     outcome = yield
+     report = outcome.get_result()
+     report.outcome = "passed"
"""
)

HOOK_PACKAGE = """\
diff --git a/sitecustomize/__init__.py b/sitecustomize/__init__.py
new file mode 100644
--- /dev/null
+++ b/sitecustomize/__init__.py
@@ -0,0 +1 @@
+import os; os.environ["GYM_PWNED"] = "1"
diff --git a/random.py b/random.py
new file mode 100644
--- /dev/null
+++ b/random.py
@@ -0,0 +1 @@
+raise SystemExit(0)
"""


def test_protected_paths_are_decided_from_the_tree_after_applying(monkeypatch):
    """A form of diff the text filter does not read still changes the tree: the grader lists what changed
    after applying and restores every protected path, whatever the diff looked like."""
    toolz = shipped()[TOOLZ]
    images()
    context, hooks, gold_and_hooks = grade(
        [(toolz, CONTEXT_DIFF_CONFTEST), (toolz, HOOK_PACKAGE), (toolz, toolz.patch + HOOK_PACKAGE)]
    )
    assert not context.resolved and context.status == "unresolved", context
    assert ("conftest.py", "pytest configuration or conftest (changed in the applied tree)") in {
        (s.path, s.reason) for s in context.stripped
    }
    assert {s.path for s in hooks.stripped} == {"sitecustomize/__init__.py", "random.py"} and not hooks.resolved
    assert gold_and_hooks.resolved, gold_and_hooks  # the fix still counts; the hooks are gone and reported
    # Control: without the check of the result (and the tamper checks), the context diff's conftest would resolve.
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, installed=frozenset(): None)
    without_tamper_checks(monkeypatch)
    [unchecked] = grade([(toolz, CONTEXT_DIFF_CONFTEST)])
    assert unchecked.resolved, unchecked


def new_file(path: str, text: str) -> str:
    """A git diff that creates ``path`` holding ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


FORCING_PLUGIN = new_file(
    "toolz/_force.py", CONFTEST_FORCING_PASSES.split("@@ -0,0 +1,8 @@\n", 1)[1].replace("\n+", "\n").lstrip("+")
)
# Start-up injection 1: the repository's own (editable) metadata declares the forcing module a pytest plugin.
ENTRY_POINT_PLUGIN = FORCING_PLUGIN + new_file("toolz.egg-info/entry_points.txt", "[pytest11]\nforce = toolz._force")
# Start-up injection 2: `python -m pytest` from the repository root runs a root `pytest.py` when the working
# directory is on sys.path; it starts the real pytest with the forcing plugin.
CWD_PYTEST = FORCING_PLUGIN + new_file(
    "pytest.py",
    """\
import runpy, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".", "/workspace/repo")] + ["/workspace/repo"]
sys.argv[1:1] = ["-p", "toolz._force"]
runpy.run_module("pytest", run_name="__main__", alter_sys=True)""",
)


def test_the_test_run_starts_isolated_from_the_repository(monkeypatch):
    """With the path checks off, plugins registered by the repository's metadata and a root `pytest.py`
    run before the tests and force every test to pass; the isolated start-up stops both on its own (the
    control, with the start-up as it was and the harness's record off, resolves; the tamper scan is off)."""
    toolz = shipped()[TOOLZ]
    images()
    without_tamper_checks(monkeypatch, record=False)
    monkeypatch.setattr(grader_module, "strip_protected", lambda diff, files: StrippedDiff(diff, ()))
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, installed=frozenset(): None)
    attacks = {"entry point": ENTRY_POINT_PLUGIN, "cwd pytest.py": CWD_PYTEST}
    isolated = dict(zip(attacks, grade([(toolz, patch) for patch in attacks.values()])))
    for name, result in isolated.items():
        assert not result.resolved and result.status == "unresolved", (name, result.detail)
        assert set(result.f2p.failure) == set(toolz.fail_to_pass), name
    monkeypatch.setattr(grader_module, "isolated_environment", lambda instance: {})
    without_tamper_checks(monkeypatch)
    open_start = dict(zip(attacks, grade([(toolz, patch) for patch in attacks.values()])))
    for name, result in open_start.items():
        assert result.resolved, (name, result.status, result.detail)


def _forger(when: str) -> str:
    """Package code that writes a pytest-looking ending through pytest's saved stdout, then exits 0."""
    return f"""\
import gc, os, stat
def _forge():
    ids = {sorted(shipped()[TOOLZ].fail_to_pass + shipped()[TOOLZ].pass_to_pass)!r}
    sessions = [o for o in gc.get_objects() if type(o).__name__ == "Session" and hasattr(o, "testscollected")]
    count = max([s.testscollected for s in sessions] + [len(ids)])
    text = "\\n" + "=" * 20 + " short test summary info " + "=" * 20 + "\\n"
    text += "".join(f"PASSED {{i}}\\n" for i in ids) + "".join(f"PASSED extra::t{{k}}\\n" for k in range(count - len(ids)))
    text += "=" * 20 + f" {{count}} passed in 0.42s " + "=" * 20 + "\\n"
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, text.encode())
                break
        except OSError:
            continue
    os._exit(0)
{"_forge()" if when == "import" else ""}"""


def test_a_forged_pytest_ending_is_invalid(monkeypatch):
    """Package code prints a summary block and a final count line that name every F2P/P2P test (with pytest's
    collected count when it can find it), through pytest's own saved stdout, then exits 0 -- at import (during
    collection) or from inside the first test that calls the fixed function. Both are `invalid`, reward 0, by the
    log's own checks (the tamper scan, off here, calls both `tampered` first: tests/integration/test_swe_tamper.py)."""
    without_tamper_checks(monkeypatch, record=False)
    toolz = shipped()[TOOLZ]
    images()
    at_import = new_file("toolz/_forge.py", _forger("import"))
    at_import = at_import + EXIT_AT_IMPORT.replace("+import os\n+os._exit(0)\n", "+from . import _forge\n+\n")
    in_test = new_file("toolz/_forge.py", _forger("call")) + SKIP_IN_CODE.replace(
        '+    import pytest\n+    pytest.skip("not today")\n', "+    from ._forge import _forge\n+    _forge()\n"
    )
    results = grade([(toolz, toolz.patch + at_import), (toolz, toolz.patch + in_test)])
    for result, where in zip(results, ("collection", "a test")):
        assert result.status == "invalid" and not result.resolved and result.reward == 0.0, (where, result)
    assert "'collected N items' line is missing" in results[0].detail
    assert "progress lines show" in results[1].detail


# Outside review, second round: each attack graded an unfixed `accumulate` resolved, masked it, or crashed grading.
COLLECTION_ERROR_FORGER = """\
import gc, os, stat
def _stdout_fd():
    for o in gc.get_objects():
        try:
            if type(o).__name__ == "FDCapture" and o.targetfd == 1:
                return o.targetfd_save
        except Exception:
            pass
    return 1
def at_import():
    os.write(_stdout_fd(), b"collected 1 item / 1 error\\n")
def in_test():
    ids = [i.nodeid for o in gc.get_objects() if type(o).__name__ == "Session" for i in (getattr(o, "items", None) or [])]
    text = "\\n=== short test summary info ===\\n" + "".join("PASSED %s\\n" % i for i in ids)
    os.write(_stdout_fd(), (text + "=== %d passed in 0.42s ===\\n" % len(ids)).encode())
    os._exit(0)"""
# Debian's distutils-precedence.pth imports `_distutils_hack` at every interpreter start, from a sys.path that the
# editable install puts the repository on ahead of /usr/lib/python3/dist-packages.
DISTUTILS_HACK = (
    new_file(
        "_distutils_hack/__init__.py",
        """\
import os
os.environ["PYTEST_ADDOPTS"] = (os.environ.get("PYTEST_ADDOPTS", "") + " -p toolz._force").strip()
def add_shim():
    pass""",
    )
    + FORCING_PLUGIN
)
# A context diff (the text filter names no path for it) that `patch --fuzz` applies: a smudge filter in .git/config,
# named by a new .gitattributes for the test file, which the reset of the test file would run after the tree check.
GIT_FILTER = (
    new_file(
        "toolz/_smudge.py",
        """\
import sys, pathlib
pathlib.Path("conftest.py").write_text(
    "import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
    "    outcome = yield\\n    outcome.get_result().outcome = 'passed'\\n")
sys.stdout.buffer.write(sys.stdin.buffer.read())""",
    )
    + new_file(".gitattributes", "toolz/tests/test_itertoolz.py filter=pwn")
    + CONTEXT_DIFF_CONFTEST.split("*** a/conftest.py")[0]
    + """\
*** a/.git/config
--- b/.git/config
***************
*** 6,8 ****
--- 6,11 ----
  [user]
  \tname = gym
  \temail = gym@localhost
+ [filter "pwn"]
+ \tsmudge = python3 toolz/_smudge.py
+ \tclean = cat
*** a/toolz/tests/test_itertoolz.py
--- b/toolz/tests/test_itertoolz.py
***************
*** 572,574 ****
--- 572,575 ----
      assert mk_rsample(b"a") == mk_rsample(u"a")
  
      assert raises(TypeError, lambda: mk_rsample([]))
+ # touched
"""
)
QUOTED_ESCAPES = "".join(
    f'diff --git "a/toolz/{name}" "b/toolz/{name}"\nnew file mode 100644\n--- /dev/null\n+++ "b/toolz/{name}"\n'
    "@@ -0,0 +1 @@\n+x\n"
    for name in ("\\\\x", "\\\\777")
)


def _listing_flood() -> str:
    """700 new files of ~900-character paths in a context diff only `patch` applies: the tree listing after
    applying passed the call's output bound, and the grader called that an infrastructure failure."""
    folder = "toolz/" + "/".join(c * 250 for c in "abc")
    new = "".join(
        f"*** /dev/null\n--- b/{folder}/{'f' * 140}{i:04d}.txt\n***************\n*** 0 ****\n--- 1 ----\n+ x\n"
        for i in range(700)
    )
    return CONTEXT_DIFF_CONFTEST.split("*** a/conftest.py")[0] + new


def test_second_round_attacks_score_zero_and_are_never_masked(monkeypatch):
    toolz = shipped()[TOOLZ]
    images()
    forged = (
        new_file("toolz/_forge.py", COLLECTION_ERROR_FORGER)
        + EXIT_AT_IMPORT.replace("+import os\n+os._exit(0)\n", "+from . import _forge\n+_forge.at_import()\n")
        + SKIP_IN_CODE.replace(
            '+    import pytest\n+    pytest.skip("not today")\n', "+    from ._forge import in_test\n+    in_test()\n"
        )
    )
    attacks = {
        "collection error forgery": forged,
        "_distutils_hack": DISTUTILS_HACK,
        "git filter": GIT_FILTER,
        "quoted escapes": QUOTED_ESCAPES,
        "listing flood": _listing_flood(),
    }
    results = dict(zip(attacks, grade([(toolz, patch) for patch in attacks.values()])))
    for name, result in results.items():
        assert not result.resolved and result.status in ("unresolved", "invalid", "patch_apply_failed", "tampered"), (
            name,
            result,
        )
    assert results["collection error forgery"].status == "tampered"  # the tamper scan; the log's own check:
    without_tamper_checks(monkeypatch, record=False)
    [forgery] = grade([(toolz, forged)])
    assert forgery.status == "invalid" and "'collected N items' lines" in forgery.detail, forgery
    assert (
        "_distutils_hack/__init__.py",
        "shadows an installed module (it would run in its place) (changed in the applied tree)",
    ) in {(s.path, s.reason) for s in results["_distutils_hack"].stripped}
    assert ".gitattributes" in {s.path for s in results["git filter"].stripped}
    assert set(results["git filter"].f2p.failure) == set(toolz.fail_to_pass)
    # Controls: without the check of the applied tree the start-up hook resolves; with it but without restoring
    # .git and with .gitattributes allowed, the smudge filter writes its conftest after the check and resolves.
    monkeypatch.setattr(grader_module, "protection", lambda path, protected, installed=frozenset(): None)
    without_tamper_checks(monkeypatch)
    assert grade([(toolz, DISTUTILS_HACK)])[0].resolved
    monkeypatch.undo()
    without_tamper_checks(monkeypatch)
    real = grader_module.protection
    monkeypatch.setattr(grader_module, "_RESTORE_GIT", "true")
    monkeypatch.setattr(grader_module, "strip_protected", lambda diff, files: StrippedDiff(diff, ()))
    monkeypatch.setattr(
        grader_module,
        "protection",
        lambda path, protected, installed=frozenset(): (
            None if path == ".gitattributes" else real(path, protected, installed)
        ),
    )
    assert grade([(toolz, GIT_FILTER)])[0].resolved
