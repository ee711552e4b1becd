"""Build the images without a registry: Debian rootfs -> `docker import` -> Dockerfiles FROM it.

The base root filesystem comes from Debian packages with mmdebstrap (or
debootstrap), using this machine's configured apt sources and release. Every
image carries a label with the hash of its inputs, and the gym's own images are
tagged with it (``images.inputs``); a build whose inputs are unchanged is skipped.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from images.inputs import (
    BASE_PACKAGES,
    BASE_REPOSITORY,
    RUNNER_DOCKERFILE,
    ImageBuildError,
    base_inputs,
    host_release,
    runner_inputs,
    runner_sources,
    runner_tag,
)

log = logging.getLogger(__name__)
INPUTS_LABEL = "gym.inputs"


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    inputs: str
    built: bool  # False when the cache was used
    seconds: float
    note: str = ""  # what the build output adds to the image's line (an SWE image: its leak scan)


def cached(client: docker.DockerClient, tag: str, inputs: str) -> bool:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(INPUTS_LABEL) == inputs


def build_rootfs(release: str, packages: tuple[str, ...], out: Path) -> None:
    """A minbase Debian tarball with ``packages``, from the machine's configured apt sources."""
    include = ",".join(packages)
    if shutil.which("mmdebstrap"):
        cmd = ["mmdebstrap", "--variant=minbase", f"--include={include}", "--quiet", release, str(out)]
    elif shutil.which("debootstrap"):
        return _debootstrap(release, include, out)
    else:
        raise ImageBuildError("neither mmdebstrap nor debootstrap is installed (bin/setup installs mmdebstrap)")
    log.info("building the %s rootfs with %s (about 30 s)", release, include)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageBuildError(f"mmdebstrap failed ({proc.returncode}): {proc.stderr[-2000:]}")


def _debootstrap(release: str, include: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as target:
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={include}", release, target],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise ImageBuildError(f"debootstrap failed ({proc.returncode}): {proc.stderr[-2000:]}")
        subprocess.run(["tar", "-C", target, "-cf", str(out), "."], check=True)


def build_base(client: docker.DockerClient, force: bool = False) -> BuiltImage:
    release = host_release()
    inputs = base_inputs(release)
    tag = f"{BASE_REPOSITORY}:{inputs}"
    started = time.monotonic()
    if not force and cached(client, tag, inputs):
        return BuiltImage(tag, inputs, False, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        build_rootfs(release, BASE_PACKAGES, tarball)
        log.info("importing the rootfs as %s", tag)
        client.api.import_image_from_file(
            str(tarball), repository=BASE_REPOSITORY, tag=inputs, changes=[f'LABEL {INPUTS_LABEL}="{inputs}"']
        )
    return BuiltImage(tag, inputs, True, time.monotonic() - started)


def build_dockerfile(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    inputs: str,
    buildargs: dict[str, str],
    force: bool = False,
    labels: dict[str, str] | None = None,
) -> BuiltImage:
    """``docker build`` of a prepared context, labelled with its input hash (and ``labels``); skipped when cached."""
    started = time.monotonic()
    if not force and cached(client, tag, inputs):
        return BuiltImage(tag, inputs, False, 0.0)
    log.info("building %s", tag)
    try:
        client.images.build(
            path=str(context),
            tag=tag,
            buildargs=buildargs,
            labels={**(labels or {}), INPUTS_LABEL: inputs},
            rm=True,
            forcerm=True,
            network_mode="none",
        )
    except docker.errors.BuildError as exc:
        tail = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in exc.build_log)[-2000:]
        raise ImageBuildError(f"docker build of {tag} failed: {exc}\n{tail}") from exc
    return BuiltImage(tag, inputs, True, time.monotonic() - started)


def build_runner(client: docker.DockerClient, base: BuiltImage, force: bool = False) -> BuiltImage:
    """``gym-runner:<inputs>``: the tag ``images.inputs.runner_image()`` names for this checkout."""
    dockerfile = RUNNER_DOCKERFILE.read_bytes()
    sources = runner_sources()
    inputs = runner_inputs(base.inputs, dockerfile, sources)
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_bytes(dockerfile)
        for path, data in sources.items():
            (context / path).parent.mkdir(parents=True, exist_ok=True)
            (context / path).write_bytes(data)
        return build_dockerfile(client, context, runner_tag(inputs), inputs, {"BASE": base.tag}, force or base.built)


def build_all(client: docker.DockerClient, force: bool = False) -> list[BuiltImage]:
    base = build_base(client, force)
    return [base, build_runner(client, base, force)]
