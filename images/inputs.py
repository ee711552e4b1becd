"""What the gym's own images are built from, and the content-addressed tags that follow from it.

An image's tag is ``REPOSITORY:<16-hex digest of its inputs>``, so two checkouts
of different runner code on one Docker engine (a CI clone beside a dev tree)
never overwrite each other's image. Computing a tag reads a few files and does
no Docker I/O; ``runner_image()`` is what ``SandboxConfig.image`` defaults to.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_REPOSITORY = "gym-base"
RUNNER_REPOSITORY = "gym-runner"
RUNNER_DOCKERFILE = ROOT / "images/runner/Dockerfile"
# What the runner image carries of this tree (stdlib only), at the same paths under /opt/gym: the runner
# package, the wire constants it shares with the host, and the CP grader's driver (compiled there once, so a test
# loads it instead of compiling it: tasks.grader.driver_program).
RUNNER_PACKAGE = ROOT / "sandbox/runner"
RUNNER_WIRE = ROOT / "sandbox/wire.py"
RUNNER_DRIVER = ROOT / "tasks/driver.py"
# Debian packages of the base image: python3 for the runner and graders; pip/venv/git/patch for SWE images.
# libnss-myhostname: localhost (and the container's hostname) resolve without /etc/hosts, which Docker leaves empty
# in a container started with networking disabled (sandbox.docker_engine.HOSTS_LABEL).
BASE_PACKAGES = (
    "python3",
    "python3-pip",
    "python3-venv",
    "git",
    "procps",
    "patch",
    "ca-certificates",
    "libnss-myhostname",
)
# Stands in for the release in a tag computed where /etc/os-release names none: such a tag matches
# no image, and `images build` there fails with the reason.
UNKNOWN_RELEASE = "unknown-release"


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the step and the cause."""


def digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def host_release() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ImageBuildError("cannot tell this machine's Debian release from /etc/os-release (VERSION_CODENAME)")


def base_inputs(release: str) -> str:
    """Input hash of the base rootfs: the Debian release and the package list."""
    return digest("base", release, *BASE_PACKAGES)


def runner_sources() -> dict[str, bytes]:
    """The runner's source files and the grader's driver, by their path in this tree (and under /opt/gym in the
    image)."""
    paths = [RUNNER_WIRE, RUNNER_DRIVER, *sorted(RUNNER_PACKAGE.glob("*.py"))]
    return {path.relative_to(ROOT).as_posix(): path.read_bytes() for path in paths}


def runner_inputs(base: str, dockerfile: bytes, sources: dict[str, bytes]) -> str:
    """Input hash of the runner image: the base's inputs, its Dockerfile and the runner's files (paths and bytes)."""
    return digest("runner", base, dockerfile, *(part for path in sorted(sources) for part in (path, sources[path])))


def runner_tag(inputs: str) -> str:
    return f"{RUNNER_REPOSITORY}:{inputs}"


def checkout_runner_inputs() -> tuple[str, bytes, dict[str, bytes]]:
    """``(base inputs, Dockerfile, the runner's files)`` of this checkout on this machine."""
    try:
        release = host_release()
    except (OSError, ImageBuildError):
        release = UNKNOWN_RELEASE
    return base_inputs(release), RUNNER_DOCKERFILE.read_bytes(), runner_sources()


@functools.cache
def runner_image() -> str:
    """The runner image tag of this checkout (files read once per process)."""
    return runner_tag(runner_inputs(*checkout_runner_inputs()))
