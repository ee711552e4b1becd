"""The build backend's own requirements, asked of its hooks on the host as pip's front end asks (issue 42, class 5):
real interpreter processes over an in-tree backend of our own, offline (the real hatchling asking for
``editables`` is built into an image in tests/integration/test_swe_builds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from images.inputs import ImageBuildError
from tasks.swe.images import BuildSystem, backend_requires

# An in-tree backend (PEP 517 backend-path) that asks for more when it builds an editable install, names the
# pretend version it was given, and says whether the host's site-packages (PyYAML, a dependency of the gym) leaked
# into its environment.
BACKEND = """\
import os


def get_requires_for_build_wheel(config_settings=None):
    try:
        import yaml  # noqa: F401

        leaked = ["host-site-packages"]
    except ImportError:
        leaked = []
    return ["wheel-helper>=1", *leaked]


def get_requires_for_build_editable(config_settings=None):
    return ["editables~=0.3", "version-" + os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_DEMO", "none")]
"""


def tree_with(tmp_path: Path, backend: str) -> Path:
    tree = tmp_path / "tree"
    (tree / "_build").mkdir(parents=True)
    (tree / "_build" / "demo_backend.py").write_text(backend)
    return tree


def test_the_backend_is_asked_for_its_wheel_and_editable_requirements(tmp_path):
    tree = tree_with(tmp_path, BACKEND)
    system = BuildSystem((), "demo_backend", ("_build",))
    env = {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_DEMO": "2.5"}
    found = backend_requires(system, tree, tmp_path, env)
    assert found == ("wheel-helper>=1", "editables~=0.3", "version-2.5")  # no host package in its environment
    without_editable = BuildSystem((), "demo_backend:Hooks", ("_build",))
    (tree / "_build" / "demo_backend.py").write_text(
        "class Hooks:\n    @staticmethod\n    def get_requires_for_build_wheel(config_settings=None):\n"
        "        return ['wheel']\n"
    )
    assert backend_requires(without_editable, tree, tmp_path, {}) == ("wheel",)


def test_a_backend_that_fails_or_needs_what_is_not_there_is_a_build_error_naming_it(tmp_path):
    tree = tree_with(tmp_path, "def get_requires_for_build_wheel(config_settings=None):\n    raise KeyError('x')\n")
    with pytest.raises(ImageBuildError, match="(?s)demo_backend.s requirement hooks failed.*KeyError"):
        backend_requires(BuildSystem((), "demo_backend", ("_build",)), tree, tmp_path, {})
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with pytest.raises(ImageBuildError, match=r"installing the build requirements \['no-such-backend'\]"):
        backend_requires(BuildSystem(("no-such-backend",), "nsb.api"), tree, wheels, {})
