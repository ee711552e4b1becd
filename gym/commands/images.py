"""`python -m gym images build`: the base rootfs and the sandbox images, cached by input hash.

`python -m gym images tag` prints the runner image's tag for this checkout (what
``SandboxConfig.image`` defaults to, and what compose.yaml's ``GYM_RUNNER_IMAGE`` wants).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gym.cli import HELP_FORMATTER, epilog


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build",
        help="build what is missing or whose inputs changed",
        epilog=epilog(("", "--force", "--swe tasks/swe/instances.jsonl --repos-dir tasks/swe/repos")),
        formatter_class=HELP_FORMATTER,
    )
    build.add_argument("--force", action="store_true", help="rebuild even when the input hash is unchanged")
    build.add_argument(
        "--swe", type=Path, default=None, metavar="FILE", help="also the images of an SWE instances file"
    )
    build.add_argument("--repos-dir", type=Path, default=None, metavar="DIR", help="SWE clones as DIR/owner__name")
    sub.add_parser(
        "tag",
        help="print this checkout's runner image tag (gym-runner:<hash of its inputs>); no Docker needed",
        epilog=epilog(("", "| xargs docker image inspect --format '{{.Id}}'")),
        formatter_class=HELP_FORMATTER,
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "tag":
        from images.inputs import runner_image

        print(runner_image())
        return 0
    import docker

    from images.build import build_all
    from sandbox.docker_engine import DEFAULT_SOCKET, root_cause
    from sandbox.errors import EngineUnreachable

    try:
        client = docker.from_env(version="auto", timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:  # one line, exit 3 (docs/cli.md); a failed build exits 4
        url = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
        raise EngineUnreachable(f"the Docker engine at {url} does not answer: {root_cause(exc)}") from exc
    images = build_all(client, force=args.force)
    if args.swe is not None:
        from tasks.swe.images import build_task_file

        images += build_task_file(client, args.swe, args.repos_dir, force=args.force)
    for image in images:
        state = f"built in {image.seconds:.1f}s" if image.built else "cached"
        print(f"{image.tag:<32} inputs={image.inputs} {state}")
    return 0
