"""`python -m gym sandbox-serve [CONFIG]`: the sandbox service (SandboxFusion's /run_code, our /v1/grade).

CONFIG is a YAML `gym.service.app.SandboxServeConfig` (default: configs/sandbox_serve.yaml); `--host` and
`--port` override its `server:` section. The port is bound and the workspace pool opened (its image checked, its
warm containers started) before the service answers; a port in use fails at once (exit 6), a missing image with
the command that builds it (exit 4). SIGTERM or Ctrl-C stops it and removes every container it started.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path("configs/sandbox_serve.yaml")


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument(
        "config", type=Path, nargs="?", default=DEFAULT_CONFIG, help=f"sandbox-serve YAML (default: {DEFAULT_CONFIG})"
    )
    parser.add_argument("--host", default=None, help="bind address (default: the config's, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="TCP port; 0 picks a free one (default: the config's)")


def run(args: argparse.Namespace) -> int:
    from gym.integrations.scorer import Scorer
    from gym.service.app import SandboxServeConfig, SandboxService, listen, serve
    from sandbox.pool_thread import PoolThread

    config = SandboxServeConfig.load(args.config)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:  # validated like the YAML itself
        server = type(config.server).model_validate({**config.server.model_dump(), **overrides})
        config = config.model_copy(update={"server": server})
    sock = listen(config.server.host, config.server.port)
    log.info("sandbox-serve config: %s", config.model_dump_json())
    pool = PoolThread(config.sandbox, config.server.max_running)
    scorer = Scorer(config.grade)  # its own pool, opened on the first program to grade
    try:
        pool.start()
        asyncio.run(serve(SandboxService(config, pool, scorer), sock))
    finally:  # every container of both pools removed before the process ends
        pool.close()
        scorer.close()
        sock.close()
    return 0
