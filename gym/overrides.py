"""Command-line overrides of config fields: ``--set KEY=VALUE``, KEY a dotted path, VALUE YAML.

Overrides edit the raw mapping read from a config file, before validation, so an overridden config
is validated exactly like the file and its errors name the same dotted fields::

    >>> parse_override("episode.max_turns=4")
    (('episode', 'max_turns'), 4)
    >>> parse_override("task_pool.path=other.jsonl")
    (('task_pool', 'path'), 'other.jsonl')
    >>> parse_override("tools.enabled=[bash, submit]")
    (('tools', 'enabled'), ['bash', 'submit'])
    >>> config = {"episode": {"max_turns": 8}, "sources": [{"weight": 1}, {"weight": 1}]}
    >>> apply_overrides(config, [parse_override("episode.max_turns=4"), parse_override("sources.1.weight=2")])
    {'episode': {'max_turns': 4}, 'sources': [{'weight': 1}, {'weight': 2}]}
    >>> apply_overrides({}, [parse_override("sampling.top_k=5")])   # missing keys are created
    {'sampling': {'top_k': 5}}
    >>> config["episode"]["max_turns"]                              # the input is never changed
    8

Rules: a path through a list uses the index (``sources.0.weight``); a key missing from a mapping is
created (validation then rejects it if the model has no such field); VALUE is YAML, so ``4``,
``0.5``, ``true``, ``null``, ``[a, b]`` and ``{k: v}`` are typed and a plain word stays a string
(``'4'`` quotes a number; as in the config files, YAML 1.1 reads ``1e-3`` without a dot as a string,
which the pydantic models accept for a float field). A path that walks into a scalar, an index out of
range, an item without ``=`` or with an empty key or segment raise `OverrideError` naming the override.
"""

from __future__ import annotations

import argparse
import copy
import reprlib
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import yaml

from sandbox.config_file import load_yaml

Override = tuple[tuple[str, ...], Any]
"""A parsed ``--set``: the path of keys (list indexes as digit strings) and the value."""


class OverrideError(ValueError):
    """A ``--set`` item that is malformed or does not fit the config it is applied to."""


def parse_override(text: str) -> Override:
    """``"a.b.0.c=VALUE"`` -> ``(("a", "b", "0", "c"), yaml(VALUE))``."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise OverrideError(f"{text!r}: expected KEY=VALUE (e.g. episode.max_turns=4)")
    if not key.strip():
        raise OverrideError(f"{text!r}: empty key before '='")
    path = tuple(key.split("."))
    if not all(part.strip() for part in path):
        raise OverrideError(f"{text!r}: empty segment in the dotted key {key!r}")
    try:
        value = load_yaml(raw)
    except yaml.YAMLError as err:
        reason = getattr(err, "problem", None) or " ".join(str(err).split())
        raise OverrideError(f"{text!r}: the value is not valid YAML: {reason}") from None
    return path, value


def apply_overrides(mapping: Any, overrides: Iterable[Override]) -> Any:
    """A deep copy of ``mapping`` with every override set, in order (later ones win)."""
    result = copy.deepcopy(mapping)
    for path, value in overrides:
        result = _set(result, path, copy.deepcopy(value))
    return result


def _set(root: Any, path: tuple[str, ...], value: Any) -> Any:
    """Set ``path`` in ``root`` (already a private copy) and return it."""
    dotted, node = ".".join(path), root
    for depth, part in enumerate(path):
        where = ".".join(path[:depth]) or "the config"
        last = depth == len(path) - 1
        if isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        elif isinstance(node, list):
            if not (part.isascii() and part.isdigit()):
                raise OverrideError(f"{dotted!r}: {where} is a list, {part!r} is not an index")
            index = int(part)
            if index >= len(node):
                raise OverrideError(f"{dotted!r}: index {index} out of range ({where} has {len(node)} items)")
            if last:
                node[index] = value
            else:
                node = node[index]
        else:
            raise OverrideError(f"{dotted!r}: {where} is {reprlib.repr(node)}, not a mapping or a list")
    return root


def add_argument(parser: argparse.ArgumentParser, example: str, scope: str = "") -> None:
    """The repeatable ``--set KEY=VALUE`` option of a command (collected in ``args.set``)."""
    parser.add_argument(
        "--set",
        dest="set",
        action="append",
        type=_argument,
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config field before validation (repeatable, later ones win): KEY is a "
        f"dotted path{scope}, list items by index; VALUE is YAML (4, 0.5, true, null, [a, b], "
        f"{{k: v}}; a plain word is a string); e.g. --set {example}",
    )


def _argument(text: str) -> Override:
    try:
        return parse_override(text)
    except OverrideError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def exit_usage(command: str, err: OverrideError) -> NoReturn:
    """Stop the way argparse does on a bad argument: one line on stderr, exit status 2."""
    print(f"python -m gym {command}: error: argument --set: {err}", file=sys.stderr)
    raise SystemExit(2)
