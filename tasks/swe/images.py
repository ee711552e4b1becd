"""SWE instance images, three layers each cached by a content hash (like the SWE-bench harness).

* **base** ``gym-swe-base:<hash>``: the runner image + ``python``, system git
  settings (`images/swe/base.Dockerfile`). Hash: runner inputs + Dockerfile.
* **environment** ``gym-swe-env:<hash>``: the instance's ``install``
  requirements, with a wheelhouse holding them, the repository's build
  backend and its runtime dependencies (`images/swe/env.Dockerfile`). Hash:
  base + interpreter + ``install`` + build requirements + the repository's
  dependency files (``pyproject.toml``, ``setup.py``, ``setup.cfg``,
  ``requirements*.txt`` at base_commit), so instances of one repository and
  version share it.
* **instance** ``gym-swe-instance:<id>-<hash>``: the repository at
  ``base_commit`` as a scrubbed one-commit repository, installed editable
  (`images/swe/instance.Dockerfile`). Hash: environment + Dockerfile + the
  tree id of ``base_commit`` + the gold patch + the leak scan's code. Built
  first as ``gym-swe-prescan:<id>-<hash>`` and scanned for the gold patch's
  fixed code outside the base tree (`tasks.swe.leak_guard`): the tagged image
  is the scanned one (clean), or it plus a layer removing the copies (fixed);
  an instance whose copies cannot be removed gets no image (refused).

Wheels are downloaded on the host (``pip download``, only when a layer is
missing) into the build context; ``docker build`` runs without network and
installs with ``pip --no-index``. Containers never have network. The host's
interpreter (CPython 3.11) resolves the wheels the image's CPython 3.11 uses.

What building the repository needs is resolved on the host, as pip's build
front end would: the ``[build-system]`` requirements (pip's legacy default
without one), then what the build backend's own hooks ask for on top
(``get_requires_for_build_wheel`` and ``_editable``: ``editables`` for a
hatchling editable install, ``wheel`` for an older setuptools), called in a
folder of the static requirements installed from the wheelhouse. The tree the
host reads is a one-commit git repository, as in the image, so a version taken
from git (setuptools-scm, hatch-vcs, pbr) is found without the clone's
history; a pretend version derived from the instance
(``SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<NAME>``, `pretend_version`) is set on
the host and in the image's install step.
"""

from __future__ import annotations

import configparser
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import docker

from images.build import BuiltImage, build_all, build_dockerfile, cached
from images.inputs import ROOT, ImageBuildError, digest
from tasks.errors import TaskError
from tasks.swe import leak_guard, leak_scan, repository
from tasks.swe.instance import SdistSource, SweInstance, load_instances
from tasks.swe.shipped import DEFAULT_REPOS_DIR, shipped_instance

log = logging.getLogger(__name__)

DOCKERFILES = ROOT / "images/swe"
PYTHON = "cpython3.11"  # the Debian interpreter of the base rootfs
REPO_IN_IMAGE = "/opt/swe/repo"
WORKSPACE_REPO = "/workspace/repo"
REPO_DIRS = (WORKSPACE_REPO, REPO_IN_IMAGE)  # where the image holds the base tree
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"  # pip's backend for a project that names none (PEP 517)
# A PEP 440 public version (SWE-bench's `version` is the release line, "2.5"); anything else pretends 0.0.0.
PUBLIC_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$")
FALLBACK_VERSION = "0.0.0"
DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
HOOK_TIMEOUT_S = 600
DEPENDENCY_FILES = re.compile(r"^(pyproject\.toml|setup\.py|setup\.cfg|requirements[^/]*\.txt)$")
INSTANCE_LABEL = "gym.swe.instance"


@dataclass(frozen=True)
class InstanceImage:
    """The image an instance's workspaces and graders run in."""

    instance_id: str
    tag: str
    layers: tuple[BuiltImage, ...]  # base, environment, instance
    seconds: float  # wall clock of the whole build, wheel downloads included

    @property
    def built(self) -> bool:
        return any(layer.built for layer in self.layers[1:])


def _dockerfile(name: str) -> bytes:
    return (DOCKERFILES / f"{name}.Dockerfile").read_bytes()


def build_swe_base(client: docker.DockerClient, force: bool = False) -> BuiltImage:
    runner = build_all(client, force)[-1]
    dockerfile = _dockerfile("base")
    inputs = digest("swe-base", runner.inputs, dockerfile)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Dockerfile").write_bytes(dockerfile)
        return build_dockerfile(
            client, Path(tmp), f"gym-swe-base:{inputs}", inputs, {"BASE": runner.tag}, force or runner.built
        )


def clone_of(instance: SweInstance, repos_dir: Path | None) -> Path:
    """The local clone holding the instance's ``base_commit``."""
    if isinstance(instance.source, SdistSource):
        return shipped_instance(instance, repos_dir or DEFAULT_REPOS_DIR)
    if repos_dir is None:
        raise TaskError(f"{instance.instance_id}: its repository comes from a local clone: pass --repos-dir DIR")
    clone = Path(repos_dir) / instance.clone_name
    if not clone.exists():
        raise TaskError(f"{instance.instance_id}: no clone of {instance.repo} at {clone}")
    try:
        repository.rev_parse(clone, instance.base_commit)
    except repository.GitError as err:
        raise TaskError(f"{instance.instance_id}: base_commit {instance.base_commit} is not in {clone}") from err
    return clone


def dependency_files(clone: Path, commit: str) -> dict[str, str]:
    """The top-level files that declare the repository's dependencies, at ``commit``."""
    names = repository.git("ls-tree", "--name-only", commit, cwd=clone).split("\n")
    return {
        name: repository.git("show", f"{commit}:{name}", cwd=clone) for name in names if DEPENDENCY_FILES.match(name)
    }


@dataclass(frozen=True)
class BuildSystem:
    """How pip builds the repository (PEP 517/518): what it installs first, and the backend it then calls."""

    requires: tuple[str, ...]
    backend: str  # "module:object"
    backend_path: tuple[str, ...] = ()  # in-tree backends: folders of the repository put on sys.path


def build_system(files: dict[str, str]) -> BuildSystem:
    """The repository's ``[build-system]``, with pip's defaults where pyproject.toml names none."""
    system: dict = {}
    if "pyproject.toml" in files:
        try:
            system = tomllib.loads(files["pyproject.toml"]).get("build-system", {})
        except tomllib.TOMLDecodeError as err:
            raise ImageBuildError(f"pyproject.toml does not parse: {err}") from err
    requires = system.get("requires")
    if not isinstance(requires, list) or not all(isinstance(req, str) for req in requires):
        return BuildSystem(DEFAULT_BUILD_REQUIRES, LEGACY_BACKEND)
    backend = system.get("build-backend")
    paths = system.get("backend-path", [])
    return BuildSystem(
        tuple(requires),
        backend if isinstance(backend, str) and backend else LEGACY_BACKEND,
        tuple(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else (),
    )


def distribution_name(files: dict[str, str]) -> str | None:
    """The repository's distribution name: pyproject's ``[project].name``, setup.cfg's ``[metadata] name`` or a
    literal ``name=`` in setup.py; None when none of them names it."""
    names: list[object] = []
    if "pyproject.toml" in files:
        try:
            names.append(tomllib.loads(files["pyproject.toml"]).get("project", {}).get("name"))
        except (tomllib.TOMLDecodeError, AttributeError):
            pass
    if "setup.cfg" in files:
        config = configparser.ConfigParser(interpolation=None)
        try:
            config.read_string(files["setup.cfg"])
            names.append(config.get("metadata", "name", fallback=None))
        except configparser.Error:
            pass
    if "setup.py" in files and (match := re.search(r"""\bname\s*=\s*["']([^"']+)["']""", files["setup.py"])):
        names.append(match.group(1))
    return next((name.strip() for name in names if isinstance(name, str) and DIST_NAME.match(name.strip())), None)


def pretend_version(instance: SweInstance) -> str:
    """The version a repository that takes its version from git gets: the instance's ``version`` when it is a
    PEP 440 public version (SWE-bench's release line, "2.5"; a shipped instance's pinned version), else 0.0.0.
    Instances of one release line share it, so they share their environment image."""
    version = instance.version.strip()
    return version if PUBLIC_VERSION.match(version) else FALLBACK_VERSION


def version_environment(files: dict[str, str], version: str) -> dict[str, str]:
    """``SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<NAME>`` for the repository's distribution (none when its name is
    unknown). Only the per-distribution form: the plain ``SETUPTOOLS_SCM_PRETEND_VERSION`` reaches every package
    pip builds in the same run, so a dependency built from its sdist with setuptools-scm would take the
    repository's version and pip would refuse its metadata. Where the per-distribution form is not read
    (hatch-vcs passes setuptools-scm no name), the one-commit repository gives the version (``0.1.dev1+g...``)."""
    name = distribution_name(files)
    if name is None:
        return {}
    suffix = re.sub(r"[-_.]+", "_", name).upper()
    return {f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{suffix}": version}


# Run on the host with -I -S in the repository's tree: the backend's hooks, from the static requirements only
# (installed into argv[2], .pth files honoured, as in pip's build environment), write what they add (JSON).
_BACKEND_HOOKS = r"""
import importlib, json, os, site, sys
out, target, backend, *paths = sys.argv[1:]
site.addsitedir(target)
sys.path[:0] = [os.path.abspath(path) for path in paths]
module, _, attribute = backend.partition(":")
hooks = importlib.import_module(module)
for part in filter(None, attribute.split(".")):
    hooks = getattr(hooks, part)
found = list(hooks.get_requires_for_build_wheel(None))
if hasattr(hooks, "get_requires_for_build_editable"):
    found += list(hooks.get_requires_for_build_editable(None))
with open(out, "w") as handle:
    json.dump(found, handle)
"""


def backend_requires(system: BuildSystem, tree: Path, wheels: Path, env: dict[str, str]) -> tuple[str, ...]:
    """What the backend's hooks ask for besides ``system.requires`` (pip installs both before it builds the
    editable install), called in ``tree`` with the static requirements installed from ``wheels`` only."""
    with tempfile.TemporaryDirectory() as tmp:
        target, out = Path(tmp) / "build-env", Path(tmp) / "requires.json"
        pip = [sys.executable, "-m", "pip", "--isolated", "install", "--quiet", "--disable-pip-version-check"]
        pip += ["--no-index", "--find-links", str(wheels), "--only-binary", ":all:", "--target", str(target)]
        if system.requires:  # an in-tree backend may need nothing installed
            _host(f"installing the build requirements {list(system.requires)}", [*pip, *system.requires])
        argv = [sys.executable, "-I", "-S", "-c", _BACKEND_HOOKS, str(out), str(target), system.backend]
        hooks = f"the build backend {system.backend}'s requirement hooks"
        _host(hooks, [*argv, *system.backend_path], cwd=tree, env={**os.environ, **env})
        try:
            found = json.loads(out.read_text())
        except (OSError, ValueError) as err:
            raise ImageBuildError(f"{hooks} wrote no list: {err}") from err
    return tuple(dict.fromkeys(req for req in found if isinstance(req, str) and req not in system.requires))


def _host(what: str, argv: list[str], **kwargs) -> None:
    """Run a build step on the host; ImageBuildError naming ``what`` when it fails or passes HOOK_TIMEOUT_S."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S, **kwargs)
    except subprocess.TimeoutExpired as err:
        raise ImageBuildError(f"{what}: no end after {HOOK_TIMEOUT_S} s") from err
    if proc.returncode != 0:
        raise ImageBuildError(f"{what} failed: {proc.stderr[-1500:]}")


def _pip_download(dest: Path, *args: str, env: dict[str, str] | None = None) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise ImageBuildError(f"`pip download {' '.join(args)}` failed: {proc.stderr[-2000:]}")


def build_env(
    client: docker.DockerClient, base: BuiltImage, instance: SweInstance, clone: Path, force: bool = False
) -> BuiltImage:
    files = dependency_files(clone, instance.base_commit)
    system = build_system(files)
    versions = version_environment(files, pretend_version(instance))
    dockerfile = _dockerfile("env")
    inputs = digest(
        "swe-env",
        base.inputs,
        PYTHON,
        dockerfile,
        json.dumps(sorted(instance.install)),
        json.dumps([system.requires, system.backend, system.backend_path]),
        json.dumps(files, sort_keys=True),
        json.dumps(versions, sort_keys=True),
    )
    tag = f"gym-swe-env:{inputs}"
    if not (force or base.built) and cached(client, tag, inputs):
        return BuiltImage(tag, inputs, False, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        wheels = context / "wheels"
        wheels.mkdir()
        log.info("%s: downloading the environment's wheels", instance.instance_id)
        if instance.install:
            _pip_download(wheels, *instance.install)
        _pip_download(wheels, "--only-binary", ":all:", *system.requires)
        # The tree as the image holds it: one commit, so a version read from git is found (`version_environment`).
        tree = context / "tree"
        repository.snapshot(clone, instance.base_commit, tree)
        if extra := backend_requires(system, tree, wheels, versions):
            log.info("%s: the build backend also needs %s", instance.instance_id, ", ".join(extra))
            _pip_download(wheels, "--only-binary", ":all:", *extra)
        _pip_download(wheels, str(tree), env=versions)  # the repository's runtime dependencies, from its metadata
        (context / "requirements.txt").write_text("".join(f"{req}\n" for req in instance.install))
        (context / "Dockerfile").write_bytes(dockerfile)
        (context / ".dockerignore").write_text("tree\n")  # only the wheels enter the image
        return build_dockerfile(client, context, tag, inputs, {"BASE": base.tag}, True)


def _slug(instance_id: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", instance_id.lower()).strip(".-")[:96] or "instance"


def build_instance(
    client: docker.DockerClient, env: BuiltImage, instance: SweInstance, clone: Path, force: bool = False
) -> BuiltImage:
    """The instance layer, scanned for the gold patch's fixed code before it gets its tag (`leak_guard`)."""
    dockerfile = _dockerfile("instance")
    tree = repository.tree_of(clone, instance.base_commit)
    scanner = b"".join(Path(module.__file__).read_bytes() for module in (leak_scan, leak_guard))
    versions = version_environment(dependency_files(clone, instance.base_commit), pretend_version(instance))
    words = " ".join(f"{name}={value}" for name, value in sorted(versions.items()))  # shell words: [A-Z0-9_=.+]
    inputs = digest("swe-instance", env.inputs, dockerfile, tree, scanner, instance.patch, words)
    slug = _slug(instance.instance_id)
    tag = f"gym-swe-instance:{slug}-{inputs}"
    if not (force or env.built) and cached(client, tag, inputs):
        scan = leak_guard.recorded(client, tag)
        return BuiltImage(tag, inputs, False, 0.0, leak_guard.note(scan) + " (at build)" if scan else "")
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        repository.snapshot(clone, instance.base_commit, context / "repo")
        (context / "Dockerfile").write_bytes(dockerfile)
        prescan_tag = f"gym-swe-prescan:{slug}-{inputs}"
        buildargs = {"BASE": env.tag, "VERSION_ENV": words}
        prescan = build_dockerfile(client, context, prescan_tag, inputs, buildargs, force or env.built)
    return leak_guard.guard(client, instance, clone, REPO_DIRS, prescan, tag, inputs)


def build_instance_image(
    client: docker.DockerClient,
    instance: SweInstance,
    repos_dir: Path | None,
    force: bool = False,
    base: BuiltImage | None = None,
) -> InstanceImage:
    """The three layers of one instance (each skipped when its input hash is unchanged)."""
    started = time.monotonic()
    base = base or build_swe_base(client, force)
    clone = clone_of(instance, repos_dir)
    env = build_env(client, base, instance, clone, force)
    image = build_instance(client, env, instance, clone, force)
    return InstanceImage(instance.instance_id, image.tag, (base, env, image), time.monotonic() - started)


def build_swe_images(
    client: docker.DockerClient, instances: list[SweInstance], repos_dir: Path | None, force: bool = False
) -> tuple[dict[str, InstanceImage], dict[str, str]]:
    """Images of every instance: ``(images by id, error by id)``; one failure does not stop the rest."""
    base = build_swe_base(client, force)
    images: dict[str, InstanceImage] = {}
    errors: dict[str, str] = {}
    for index, instance in enumerate(instances, 1):
        try:
            images[instance.instance_id] = build_instance_image(client, instance, repos_dir, force, base)
        except (ImageBuildError, TaskError, repository.GitError) as err:
            log.error("%s: %s", instance.instance_id, err)
            errors[instance.instance_id] = str(err)
            continue
        built = images[instance.instance_id]
        log.info(
            "image %d/%d %s: %s%s",
            index,
            len(instances),
            instance.instance_id,
            f"built in {built.seconds:.1f}s" if built.built else "cached",
            f"; {built.layers[-1].note}" if built.layers[-1].note else "",
        )
    return images, errors


def build_task_file(
    client: docker.DockerClient, path: Path, repos_dir: Path | None, force: bool = False
) -> list[BuiltImage]:
    """``python -m gym images build --swe FILE``: every instance's image; ImageBuildError if any failed."""
    try:
        loaded = load_instances(path)
    except TaskError as err:
        raise ImageBuildError(str(err)) from err
    images, errors = build_swe_images(client, list(loaded.instances), repos_dir, force)
    if errors:
        raise ImageBuildError(
            f"{len(errors)} of {len(loaded.instances)} SWE images failed: "
            + "; ".join(f"{key}: {value[:300]}" for key, value in errors.items())
        )
    return [BuiltImage(i.tag, i.layers[-1].inputs, i.built, i.seconds, i.layers[-1].note) for i in images.values()]


def docker_client() -> docker.DockerClient:
    """A client for image builds (long timeout); ImageBuildError when the engine is unreachable."""
    try:
        client = docker.from_env(version="auto", timeout=900)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageBuildError(
            f"cannot reach the Docker engine (is dockerd running? `bin/setup` starts it): {exc}"
        ) from exc
    return client


def build_images(
    instances: list[SweInstance], repos_dir: Path | None, force: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    """``(image tag by instance id, build error by instance id)``: each instance's image, built unless cached by
    its input hash (`tasks.swe.images`)."""
    try:
        client = docker_client()
    except ImageBuildError as err:
        return {}, {i.instance_id: str(err) for i in instances}
    try:
        images, errors = build_swe_images(client, instances, repos_dir, force)
    finally:
        client.close()
    return {key: image.tag for key, image in images.items()}, errors
