"""Which Docker engines a command acts on: ``--config FILE`` and ``--engine URL`` (`gym gc`, `gym images build`).

- Neither: the one engine of the default sandbox config (``DOCKER_HOST``, else the local socket), as before.
- ``--config FILE``: a sandbox, environment or train config; its sandbox section (``sandbox:``, a train
  config's ``environment.sandbox``, or the whole file) names every engine of ``sandbox.engines``, each with
  its own TLS, or the one engine of ``sandbox.engine``.
- ``--engine URL`` (repeatable): these engines, in order. One that ``sandbox.engines`` of ``--config`` names
  is reached with that entry's TLS; any other with TLS from the environment (``DOCKER_TLS_VERIFY``,
  ``DOCKER_CERT_PATH``) as the docker CLI reads it, and the rest of the config's ``sandbox.engine`` (timeouts).

Every engine is resolved here (sandbox/engine_url.py), before any I/O: a URL that cannot be used, TLS files
that are not there or plaintext tcp:// to a remote host is a SandboxConfigError (exit 2) naming it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.config import SandboxConfig

CONFIG_HELP = (
    "act on the engines of this sandbox, environment or train config: every one of its sandbox.engines (each "
    "with its own TLS), else its sandbox.engine"
)
ENGINE_HELP = (
    "act on this engine (repeatable): unix:///PATH, tcp://HOST:PORT (TLS: an entry of --config's "
    "sandbox.engines, else DOCKER_TLS_VERIFY/DOCKER_CERT_PATH) or ssh://"
)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--engine", action="append", default=[], metavar="URL", help=ENGINE_HELP)


def chosen(args: argparse.Namespace) -> bool:
    """Whether engines were named on the command line (output then names the engine of each line)."""
    return args.config is not None or bool(args.engine)


def sandbox_section(path: Path) -> SandboxConfig:
    """The sandbox config of a sandbox, environment or train config file (errors name the file and field)."""
    from sandbox.config import SandboxConfig
    from sandbox.config_file import read_config, validate_config
    from sandbox.errors import SandboxConfigError

    data = read_config(path, SandboxConfigError)
    if not isinstance(data, dict):
        raise SandboxConfigError(f"{path}: a config is a mapping, not a {type(data).__name__}")
    section, where = _section(data)
    if isinstance(section, str):  # a train config naming its environment by file or registered name
        from gym.registry import environment_config

        return environment_config(section).sandbox
    return validate_config(SandboxConfig, section, f"{path}: {where}" if where else str(path), SandboxConfigError)


def _section(data: dict[str, Any]) -> tuple[Any, str]:
    """The sandbox mapping of a config file's data and its dotted place ("" for the whole file)."""
    if "sandbox" in data:
        return data["sandbox"] or {}, "sandbox"
    environment = data.get("environment")
    if isinstance(environment, dict):
        return environment.get("sandbox") or {}, "environment.sandbox"
    if isinstance(environment, str):
        return environment, "environment"
    if "task_pool" in data:  # an environment without a sandbox section: the default sandbox
        return {}, "sandbox"
    return data, ""


def engine_configs(config_path: Path | None, urls: list[str]) -> list[SandboxConfig]:
    """One single-engine sandbox config per engine chosen (module docstring), each resolved before any I/O."""
    from sandbox.config import SandboxConfig
    from sandbox.engine_url import resolve_engine
    from sandbox.errors import SandboxConfigError

    config = sandbox_section(config_path) if config_path is not None else SandboxConfig()
    if not urls:
        configs = [single for _, single in config.engine_configs()] or [config]
        for single in configs:
            resolve_engine(single.engine)  # raises naming sandbox.engine.base_url or DOCKER_HOST
        return configs
    entries = {entry.url: single for entry, single in config.engine_configs()}
    configs = []
    for url in dict.fromkeys(urls):  # each engine once, in the order given
        try:
            single = entries[url] if url in entries else _engine_of(config, url)
            resolve_engine(single.engine)
        except SandboxConfigError as exc:
            raise SandboxConfigError(f"--engine {url}: {exc}") from None
        configs.append(single)
    return configs


def _engine_of(config: SandboxConfig, url: str) -> SandboxConfig:
    """``config`` with its one engine at ``url``: the config's own TLS only if it names that very URL."""
    from pydantic import ValidationError

    from sandbox.config import DockerEngineConfig
    from sandbox.errors import SandboxConfigError

    engine = config.engine
    if engine.base_url != url:
        data = engine.model_dump() | {"base_url": url, "tls": None, "allow_insecure_tcp": False}
        try:
            engine = DockerEngineConfig.model_validate(data)
        except ValidationError as exc:
            raise SandboxConfigError("; ".join(error["msg"] for error in exc.errors())) from None
    return config.model_copy(update={"engine": engine, "engines": [], "require_labels": []})
