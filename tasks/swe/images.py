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
"""

from __future__ import annotations

import json
import logging
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


def build_requires(files: dict[str, str]) -> tuple[str, ...]:
    """``[build-system].requires`` of pyproject.toml, else pip's legacy default."""
    if "pyproject.toml" in files:
        try:
            system = tomllib.loads(files["pyproject.toml"]).get("build-system", {})
        except tomllib.TOMLDecodeError as err:
            raise ImageBuildError(f"pyproject.toml does not parse: {err}") from err
        if isinstance(system.get("requires"), list):
            return tuple(system["requires"])
    return DEFAULT_BUILD_REQUIRES


def _pip_download(dest: Path, *args: str) -> None:
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
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageBuildError(f"`pip download {' '.join(args)}` failed: {proc.stderr[-2000:]}")


def build_env(
    client: docker.DockerClient, base: BuiltImage, instance: SweInstance, clone: Path, force: bool = False
) -> BuiltImage:
    files = dependency_files(clone, instance.base_commit)
    requires = build_requires(files)
    dockerfile = _dockerfile("env")
    inputs = digest(
        "swe-env",
        base.inputs,
        PYTHON,
        dockerfile,
        json.dumps(sorted(instance.install)),
        json.dumps(requires),
        json.dumps(files, sort_keys=True),
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
        _pip_download(wheels, "--only-binary", ":all:", *requires)
        tree = context / "tree"
        repository.export_tree(clone, instance.base_commit, tree)
        _pip_download(wheels, str(tree))  # the repository's runtime dependencies, from its own metadata
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
    inputs = digest("swe-instance", env.inputs, dockerfile, tree, scanner, instance.patch)
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
        prescan = build_dockerfile(client, context, prescan_tag, inputs, {"BASE": env.tag}, force or env.built)
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
