"""Config files of every kind (train, environment, serve, sandbox): one reader, one error text.

A file is YAML, or TOML when its name ends in ``.toml``. An invalid field reads as one line per
problem, ``FILE: dotted.field.path: message``, with the path the user wrote: pydantic inserts the
member's tag or class name into the location of an error inside a union
(``task_pool.mixture.sources.0.pool.jsonl.pth``); those parts are not in the file and are dropped
(``task_pool.sources.0.pool.pth``), and a union whose every member failed at one path reads as one line.

It lives in the lowest layer (torch- and Docker-free) so that every layer's config can use it; each
caller passes its own error class (SandboxConfigError, ServeConfigError, ConfigError, ...).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from sandbox.distribution import resolve

Model = TypeVar("Model", bound=BaseModel)
ErrorType = Callable[[str], Exception]  # an exception class, or a function making one from the message


def read_config(path: str | Path, error: ErrorType = ValueError) -> Any:
    """The data of a YAML (or ``*.toml``) file; an empty file is ``{}``. ``error`` names the file in one line.

    A relative path the working directory lacks is looked up among the shipped files (sandbox.distribution)."""
    path = resolve(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read the config: {getattr(err, 'strerror', None) or err}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML: {err}") from None
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    return {} if data is None else data


def validate_config(model: type[Model], data: Any, source: str, error: ErrorType = ValueError) -> Model:
    """``model`` validated from ``data``; ``error`` carries one line per invalid field (describe_errors)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise error(describe_errors(err, source, data)) from None


def load_config(path: str | Path, model: type[Model], error: ErrorType = ValueError) -> Model:
    """Read ``path`` (read_config) and validate it as ``model``."""
    return validate_config(model, read_config(path, error), str(path), error)


def describe_errors(err: ValidationError, source: str, data: Any = None) -> str:
    """One line per problem: ``source: dotted.field.path: message`` (union member labels dropped when
    ``data``, the validated input, is given); problems at the same path are merged.

    A union tries every member: the error of a member the input does not resemble (``environment``: not a
    path) is dropped when another member's error reaches deeper into what the user wrote."""
    found = []
    for item in err.errors():
        parts = _written(item["loc"], data, item["type"] == "missing")
        found.append((tuple(parts), len(parts) < len(item["loc"]), item["msg"]))
    merged: dict[str, list[str]] = {}
    for parts, in_union, message in found:
        if in_union and any(len(other) > len(parts) and other[: len(parts)] == parts for other, _, _ in found):
            continue
        messages = merged.setdefault(".".join(str(part) for part in parts) or "(top level)", [])
        if message not in messages:
            messages.append(message)
    return "\n".join(f"{source}: {where}: {' or '.join(messages)}" for where, messages in merged.items())


def _written(loc: tuple, data: Any, missing: bool) -> list:
    """The parts of ``loc`` that name keys or indexes of ``data``; a missing field keeps its last part."""
    if data is None:
        return list(loc)
    parts, node = [], data
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            parts.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
        elif missing and index == len(loc) - 1:
            parts.append(part)
        # else: a union member's tag or class name, not in the file
    return parts
