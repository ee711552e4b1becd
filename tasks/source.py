"""Reading dataset rows from local files, one row at a time, bad rows reported not raised.

Two readers:

* ``plain``: ``.jsonl``/``.ndjson`` (optionally ``.gz``) line by line, and
  ``.json`` (optionally ``.gz``) holding a JSON array of rows (or JSON Lines
  under a ``.json`` name, as some hubs publish). A line that is not a JSON
  object becomes a `RowError` with its index; the rest still load.
* ``datasets``: parquet / arrow files and ``save_to_disk`` directories through
  the ``datasets`` library (never the network: local files only), and
  json/jsonl when asked for explicitly. Arrow needs one schema per file, so
  rows are already well-typed there; row-level problems surface in the format
  parsers, which report them with the same index.

``auto`` picks ``datasets`` for parquet/arrow/directories and ``plain`` for
JSON, because the plain reader can skip a single malformed line where arrow
would reject the whole file.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from sandbox.distribution import resolve
from tasks.errors import SourceError

log = logging.getLogger(__name__)

Reader = Literal["auto", "plain", "datasets"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
_JSON_SUFFIXES = (".json", ".json.gz")
_ARROW_SUFFIXES = (".parquet", ".arrow")


class RowError(BaseModel):
    """A row that could not be read or parsed; it is skipped and reported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    reason: str


_BOM = b"\xef\xbb\xbf"  # Windows tools start UTF-8 text with it; json.loads refuses it


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def _jsonl_rows(lines: Iterator[bytes]) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Rows of JSON Lines read as bytes: a line that is not UTF-8 is that row's fault (one bad byte in a
    scraped statement), unless it is the first, which says the file is not text at all (UnicodeDecodeError)."""
    index = -1
    for raw in lines:
        if index < 0:
            raw = raw.removeprefix(_BOM)
        if not raw.strip():
            continue
        index += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if index == 0:
                raise
            yield index, RowError(index=index, reason=f"not UTF-8 text: {err.reason} at byte {err.start}")
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:  # nesting past the parser's depth: that row only
            yield index, RowError(index=index, reason=f"invalid JSON: {type(err).__name__}: {err}")
            continue
        if not isinstance(row, dict):
            yield index, RowError(index=index, reason=f"row is a {type(row).__name__}, not a JSON object")
            continue
        yield index, row


def _plain_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    name = path.name
    if name.endswith(_JSONL_SUFFIXES):
        with _open_bytes(path) as handle:
            yield from _jsonl_rows(handle)
        return
    with _open_bytes(path) as handle:
        raw = handle.read().removeprefix(_BOM)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
        # Hubs often publish JSON Lines under a .json name.
        yield from _jsonl_rows(iter(raw.splitlines()))
        return
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise SourceError(f"{path}: top-level JSON is a {type(data).__name__}, expected a list of rows")
    for index, row in enumerate(data):
        if isinstance(row, dict):
            yield index, row
        else:
            yield index, RowError(index=index, reason=f"row is a {type(row).__name__}, not a JSON object")


def _datasets_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    import pyarrow  # datasets' own dependency: its readers raise pyarrow's errors on a file that is not arrow

    try:
        loaded = _datasets_load(path)
    except pyarrow.ArrowException as err:  # random bytes named .parquet/.arrow, a truncated file
        raise SourceError(f"{path}: not a readable {path.suffix.lstrip('.') or 'arrow'} file: {err}") from err
    for index, row in enumerate(loaded):
        yield index, dict(row)


def _datasets_load(path: Path):
    import datasets  # optional heavy import, only when a file needs it

    if path.is_dir():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            split = next(iter(loaded))
            log.info("%s: using split %r of %s", path, split, list(loaded))
            loaded = loaded[split]
    elif path.name.endswith(".parquet"):
        import pyarrow.parquet

        pyarrow.parquet.read_metadata(str(path))  # not parquet: raise here, before datasets logs it at ERROR
        loaded = datasets.Dataset.from_parquet(str(path), keep_in_memory=True)
    elif path.name.endswith(".arrow"):
        loaded = datasets.Dataset.from_file(str(path), in_memory=True)
    elif path.name.endswith(_JSONL_SUFFIXES + _JSON_SUFFIXES):
        loaded = datasets.Dataset.from_json(str(path), keep_in_memory=True)
    else:
        raise SourceError(f"{path}: the datasets reader handles parquet, arrow, json(l) and save_to_disk folders")
    return loaded


def read_rows(path: Path, reader: Reader = "auto") -> Iterator[tuple[int, dict[str, Any] | RowError]]:
    """Yield ``(index, row)`` or ``(index, RowError)`` for every row of ``path`` (a relative path the working
    directory lacks is looked up among the shipped files: sandbox.distribution)."""
    path = resolve(path)
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if reader == "auto":
        reader = "datasets" if path.is_dir() or path.name.endswith(_ARROW_SUFFIXES) else "plain"
    if reader == "datasets":
        yield from _datasets_rows(path)
        return
    if not path.name.endswith(_JSONL_SUFFIXES + _JSON_SUFFIXES):
        raise SourceError(f"{path}: the plain reader handles .jsonl, .ndjson and .json (optionally .gz)")
    try:  # a whole file that is not text is the file's fault, not one row's
        yield from _plain_rows(path)
    except UnicodeDecodeError as err:
        raise SourceError(f"{path}: not UTF-8 text (a binary file?): {err.reason}") from err
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise SourceError(f"{path}: not a readable gzip file: {err}") from err
