"""`python -m gym images build`: the base rootfs and the sandbox images, cached by input hash.

On the engine of ``DOCKER_HOST`` (or the local socket), or on each engine ``--config FILE`` / ``--engine URL``
choose (gym/engine_selection.py) in turn, over unix://, TLS tcp:// or ssh://; each line then starts with its
engine's URL. Of several engines, one that does not answer is one ``gym: error:`` line on stderr, the others
are still built, and the exit code is 3; a failed build stops the command (exit 4).

`python -m gym images tag` prints the runner image's tag for this checkout (what
``SandboxConfig.image`` defaults to, and what compose.yaml's ``GYM_RUNNER_IMAGE`` wants).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gym.cli import HELP_FORMATTER, epilog
from gym.engine_selection import add_engine_options, chosen

if TYPE_CHECKING:
    import docker

    from images.build import BuiltImage
    from sandbox.docker_engine import Engine

BUILD_TIMEOUT_S = 600  # one API call of a build: importing the base rootfs, a docker build


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build",
        help="build what is missing or whose inputs changed",
        epilog=epilog(
            (
                "",
                "--force",
                "--swe tasks/swe/instances.jsonl --repos-dir tasks/swe/repos",
                "--config fleet.yaml",
                "--engine tcp://10.0.0.7:2376 --engine tcp://10.0.0.8:2376",
            )
        ),
        formatter_class=HELP_FORMATTER,
    )
    build.add_argument("--force", action="store_true", help="rebuild even when the input hash is unchanged")
    build.add_argument(
        "--swe", type=Path, default=None, metavar="FILE", help="also the images of an SWE instances file"
    )
    build.add_argument("--repos-dir", type=Path, default=None, metavar="DIR", help="SWE clones as DIR/owner__name")
    add_engine_options(build)
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
    from gym.engine_selection import engine_configs
    from gym.fault import ExitCode, one_line
    from sandbox.docker_engine import Engine
    from sandbox.errors import InfraError

    engines = [Engine(config) for config in engine_configs(args.config, args.engine)]  # all resolved first
    failed = []
    for engine in engines:
        try:
            client = build_client(engine)
        except InfraError as exc:  # one engine: the CLI's one-line error, exit 3 (docs/cli.md); a failed build exits 4
            if len(engines) == 1:
                raise
            print(f"gym: error: {engine.url}: {one_line(exc)}", file=sys.stderr)
            failed.append(engine.url)
            continue
        at = f"{engine.url}: " if chosen(args) else ""
        try:
            for image in build_on(client, args):
                state = f"built in {image.seconds:.1f}s" if image.built else "cached"
                note = f"; {image.note}" if image.note else ""  # an SWE image: its leak scan (tasks.swe.leak_guard)
                print(f"{at}{image.tag:<32} inputs={image.inputs} {state}{note}", flush=True)
        finally:
            client.close()
    if failed:
        print(f"built on {len(engines) - len(failed)} of {len(engines)} engines; did not answer: {', '.join(failed)}")
    return ExitCode.INFRA if failed else ExitCode.OK


def build_client(engine: Engine) -> docker.DockerClient:
    """A client of ``engine`` for builds (a long timeout), once the engine answered a ping (else InfraError)."""
    import trio

    trio.run(functools.partial(engine.call, "ping", engine.client.api.ping))
    return engine.target.docker_client(timeout=BUILD_TIMEOUT_S, version=engine.config.engine.api_version)


def build_on(client: docker.DockerClient, args: argparse.Namespace) -> list[BuiltImage]:
    """The base and runner images, and the SWE images of ``--swe``, on one engine."""
    from images.build import build_all

    images = build_all(client, force=args.force)
    if args.swe is not None:
        from tasks.swe.images import build_task_file

        images += build_task_file(client, args.swe, args.repos_dir, force=args.force)
    return images
