"""Which top-level names a new module of the candidate's may not take (issue 42, class 5): what the test run finds
outside the repository and what pytest imports, never the repository's own modules (a fix to tomli in the tomli
repository is the fix), while every other protection holds inside them."""

from __future__ import annotations

from tasks.swe.diff import RUNNER_MODULES, protection, strip_protected
from tasks.swe.grader import shadowing
from tests.swe_support import new_file


def test_the_repositorys_own_modules_never_shadow_and_new_ones_still_do():
    listing = {"outside": ["_distutils_hack", "iniconfig", "json", "pluggy", "pytest"], "own": ["iniconfig", "src"]}
    shadowed = shadowing(listing)
    assert "iniconfig" not in shadowed and {"pluggy", "pytest", "_distutils_hack"} <= shadowed
    assert RUNNER_MODULES - {"iniconfig"} <= shadowed  # what pytest imports when it exists, installed or not
    tests = {"tests/test_iniconfig.py"}
    assert protection("iniconfig/__init__.py", tests, shadowed) is None  # the fix itself
    assert protection("iniconfig/_parse.py", tests, shadowed) is None  # a new module of the own package
    for path in ("pluggy/__init__.py", "_pytest/runner.py", "pygments.py", "src/tomli/__init__.py"):
        assert protection(path, tests, shadowed) == "shadows the test runner", path
    assert protection("_distutils_hack/__init__.py", tests, shadowed).startswith("shadows an installed module")
    # every other rule still holds inside the own package
    assert protection("iniconfig/conftest.py", tests, shadowed) == "pytest configuration or conftest"
    assert protection("iniconfig/sitecustomize.py", tests, shadowed) == "interpreter start-up hook"
    assert protection("iniconfig/tests/helper.py", tests, shadowed) == "test module"
    assert protection("json.py", tests, shadowed) == "shadows a standard-library module"
    # control: knowing nothing of the repository (None), pytest's imports are protected, the own one included
    assert protection("iniconfig/__init__.py", tests) == "shadows the test runner"


def test_the_text_filter_leaves_names_that_shadow_to_the_applied_tree():
    own_fix = new_file("iniconfig/_parse.py", "x = 1")
    shadow = new_file("pluggy/__init__.py", "x = 1")
    conftest = new_file("conftest.py", "x = 1")
    kept = strip_protected(own_fix + shadow + conftest, set())
    assert kept.diff == own_fix + shadow
    assert [(s.path, s.reason) for s in kept.stripped] == [("conftest.py", "pytest configuration or conftest")]
