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

# The largest shipped config is ~30 KB; a file far past that is not a config, and PyYAML would spend minutes on it.
MAX_CONFIG_BYTES = 1 << 20
# Aliases make a YAML tree a graph: ten lines of nested anchors expand to a billion nodes once anything walks the
# data (validation errors, the resolved config written as JSON). A real config has a few hundred nodes.
MAX_CONFIG_NODES = 100_000
ErrorType = Callable[[str], Exception]  # an exception class, or a function making one from the message


def read_config(path: str | Path, error: ErrorType = ValueError) -> Any:
    """The data of a YAML (or ``*.toml``) file; an empty file is ``{}``. ``error`` names the file in one line.

    A relative path the working directory lacks is looked up among the shipped files (sandbox.distribution);
    relative paths inside it that name files beside it are made absolute (`anchored`)."""
    path = resolve(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise error(f"{path}: larger than {MAX_CONFIG_BYTES >> 20} MiB, not a config file")
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read the config: {getattr(err, 'strerror', None) or err}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else load_yaml(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML: {err}") from None
    except yaml.YAMLError as err:
        # PyYAML names the stream "<unicode string>": the file is already named at the front
        where = " ".join(str(err).split()).replace(' in "<unicode string>",', " at")
        raise error(f"{path}: not valid YAML: {where}") from None
    return {} if data is None else anchored(data, path.parent)


def anchored(data: Any, base: Path) -> Any:
    """``data`` with every relative file path that names a file beside the config (``base``), and none under
    the working directory, made absolute: a user's config finds its own files from any directory. A file under
    the working directory wins (as everywhere); a path neither place has is left as written (a shipped file,
    found by sandbox.distribution.resolve, or a name that is not a path)."""
    if isinstance(data, dict):
        return {key: anchored(value, base) for key, value in data.items()}
    if isinstance(data, list):
        return [anchored(value, base) for value in data]
    if not isinstance(data, str) or not data or "\0" in data or len(data) > 4096 or Path(data).is_absolute():
        return data
    try:
        if Path(data).exists() or not (base / data).exists():
            return data
    except OSError:  # a name too long for the file system, or unreadable: not a path here
        return data
    return str((base / data).resolve())


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, with a YAMLError instead for a key given twice in one mapping, collections
    nested past MAX_CONFIG_DEPTH or aliases that expand past MAX_CONFIG_NODES (a config file or a ``--set``)."""
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _Refused:
        raise
    except yaml.YAMLError as err:
        if _FAST_LOADER is yaml.SafeLoader or len(text) > _EXPLAINED_BYTES:
            raise
        fast_error = err
    # libyaml says "found character that cannot start any token"; PyYAML names the tab and shows the line
    try:
        yaml.load(text, Loader=_ExplainingLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise err from None
    except RecursionError:  # nesting libyaml did not get far enough to measure
        pass
    raise fast_error


class _Refused(yaml.YAMLError):
    """Valid YAML this reader refuses: a duplicated key, nesting past MAX_CONFIG_DEPTH, an alias bomb."""


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 1 MiB in a second, pure Python in 30
MAX_CONFIG_DEPTH = 100


def _check_depth(text: str) -> None:
    """YAMLError when collections nest deeper than MAX_CONFIG_DEPTH: libyaml's composer recurses in C and
    segfaults on some ten thousand nested brackets, so the flat event stream is checked before composing."""
    depth = 0
    for event in yaml.parse(text, Loader=_FAST_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                raise _Refused(f"line {event.start_mark.line + 1}: nested more than {MAX_CONFIG_DEPTH} deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


_EXPLAINED_BYTES = 64 << 10  # a broken file this small is re-read by the pure-Python parser for its message


class _Strict:
    """safe_load that refuses what PyYAML lets through: a key given twice in one mapping (PyYAML keeps the
    last silently) and aliases that expand past MAX_CONFIG_NODES (a billion-laughs file)."""

    def construct_document(self, node: yaml.Node) -> Any:
        _count_nodes(node, {}, MAX_CONFIG_NODES)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base`: merged keys may be overridden, that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: SafeConstructor rejects it itself
                if first is not key_node:
                    raise _Refused(
                        f"line {key_node.start_mark.line + 1}: the key {key!r} is given a second time "
                        f"(first on line {first.start_mark.line + 1})"
                    )
        return super().construct_mapping(node, deep=deep)


class _StrictLoader(_Strict, _FAST_LOADER):  # type: ignore[misc, valid-type]
    pass


class _ExplainingLoader(_Strict, yaml.SafeLoader):
    pass


def _count_nodes(node: yaml.Node, sizes: dict[int, int], limit: int) -> int:
    """The number of nodes ``node`` expands to (an alias counts as often as it is used); YAMLError past ``limit``."""
    if id(node) in sizes:
        return sizes[id(node)]
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_count_nodes(child, sizes, limit) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_count_nodes(k, sizes, limit) + _count_nodes(v, sizes, limit) for k, v in node.value)
    if size > limit:
        raise _Refused(f"it expands to more than {limit} values (an alias bomb?)")
    sizes[id(node)] = size
    return size


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
