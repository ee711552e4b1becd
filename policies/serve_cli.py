"""`python -m gym serve CONFIG`: run the token-in/token-out policy server.

CONFIG is a YAML `policies.serve_config.ServeConfig` (see configs/policy_tiny.yaml);
`--host` and `--port` override its `server:` section. The port is bound before the policy is
built, so a port in use fails at once (exit 6, docs/cli.md), not after the model loads.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument("config", type=Path, help="serve YAML (e.g. configs/policy_tiny.yaml)")
    parser.add_argument("--host", default=None, help="bind address (default: the config's, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="TCP port; 0 picks a free one (default: the config's)")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); OSError EADDRINUSE when the port is taken,
    EADDRNOTAVAIL when ``host`` is no address of this machine or does not resolve (exit 6, gym.fault)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:  # its errno is a resolver code (EAI_*), not an errno gym.fault could read
        raise OSError(errno.EADDRNOTAVAIL, f"cannot bind {host}: the name does not resolve ({exc.strerror})") from exc
    # SO_REUSEADDR, as aiohttp's own bind; aiohttp listens again with the served backlog (policies.server.LISTEN_BACKLOG)
    return socket.create_server(address, family=family, backlog=128)


def chat_renderer(config, path: Path):
    """The chat format of the server's chat completions (`ServeConfig.chat_format`): a model family's, from the
    gym's chat formats (`gym.format.openai_chat`, the environment's own choice for this tokenizer), or None for
    Harmony and tokenizers without a chat template (the server renders those itself, without tools)."""
    from policies.serve_config import ServeConfigError

    if config.tokenizer is None:
        if config.chat_format not in ("auto", "harmony"):
            raise ServeConfigError(f"{path}: chat_format: {config.chat_format} needs `tokenizer:` (its chat template)")
        return None
    from gym.format.openai_chat import load_openai_chat
    from gym.format.template import ChatFormatError
    from gym.format.tokenizer import TokenizerError

    try:
        return load_openai_chat(Path(config.tokenizer), config.chat_format)
    except (ChatFormatError, TokenizerError) as exc:
        raise ServeConfigError(f"{path}: chat_format: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from policies.memory_tuning import freeze_startup_objects, keep_freed_memory
    from policies.serve_config import ServeConfig, ServeConfigError, build_engine

    config = ServeConfig.load(args.config)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:  # validated like the YAML itself
        server_options = type(config.server).model_validate({**config.server.model_dump(), **overrides})
        config = config.model_copy(update={"server": server_options})
    from policies.tokenizer import TextTokenizer

    try:  # before anything is bound or logged: a missing or unreadable file is the config's error, in one line
        tokenizer = TextTokenizer(config.tokenizer) if config.tokenizer else None
    except (OSError, ValueError) as exc:
        raise ServeConfigError(f"{args.config}: tokenizer: {exc}") from None
    chat = chat_renderer(config, args.config)
    sock = listen(config.server.host, config.server.port)
    log.info("serve config: %s", config.model_dump_json())

    from policies.server import PolicyServer, serve

    scorer = None  # loaded first: a bad checkpoint fails before the policy is built
    if config.verifier is not None:
        from policies.scorer import StepScorer

        try:
            scorer = StepScorer.load(config.verifier, device=config.engine.device)
        except FileNotFoundError as exc:
            raise ServeConfigError(f"{args.config}: verifier: {exc}") from None
    import torch  # imported late: a bad config or a taken port fails fast

    if config.engine.threads is not None:
        torch.set_num_threads(config.engine.threads)
    log.info("torch threads: %d", torch.get_num_threads())
    keep_freed_memory()  # a step's big tensors reuse freed heap instead of fresh pages (policies/memory_tuning.py)
    engine = build_engine(config)
    if tokenizer is not None and tokenizer.vocab_size > engine.vocab_size:
        raise ServeConfigError(
            f"{args.config}: tokenizer {config.tokenizer} has {tokenizer.vocab_size} tokens but the policy's "
            f"vocabulary is {engine.vocab_size}: ids past it could not be embedded"
        )
    server = PolicyServer(engine, config.server, tokenizer, scorer=scorer, chat=chat)
    freeze_startup_objects()  # full collections skip what lives as long as the server (policies/memory_tuning.py)
    interrupted = False
    try:
        asyncio.run(serve(server, sock))
    except KeyboardInterrupt:  # Ctrl-C: stopped by a signal, so 130 (128 + SIGINT) as a shell reports it
        log.info("stopped")
        interrupted = True
    finally:  # stop the engine's worker and spawned replicas now, each within a bound, not at interpreter exit
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    return 130 if interrupted else 0
