"""The scan for an instance's answer in its image: the gold patch's fixed code anywhere but the base tree.

One file, longer than a module usually is, because it is copied alone into the image and run there.

This module runs **inside a throwaway container of the image** (``python3 -I -S -B leak_scan.py
EVIDENCE.json``, standard library only, one JSON report on stdout) and in the unit tests on a folder.
It walks the final filesystem the agent's container sees (a file a later layer deleted is not there;
the agent has no access to the lower layers either) and reads every regular file but the virtual
ones (``/proc``, ``/sys``, ``/dev``) and, in the repository folders, the files byte-identical to their
base-tree blob (checked by blob id; anything else there, untracked or changed, is scanned).

What counts as the answer (the evidence, `tasks.swe.leak_guard` derives it on the host):

* **lines**: per hunk of the gold patch, its added lines with all whitespace deleted; a line that is
  too short, an import, or already in the unpatched repository or the standard library is not
  evidence, and a hunk without such a line is represented by its added run with up to three lines of
  context either side (the smallest window found in neither). A file *hits* a hunk when it holds
  at least ``need`` of the hunk's units (80 %, rounded up) as whitespace-free text, a multi-line unit
  also with up to ``GAP`` bytes between its lines (a diff's ``+``, a comment mark, an escape); a single
  unit shorter than ``STRONG_UNIT`` counts only with half the hunk's unchanged lines beside it.
* **bytecode**: each code object of the patched files, compiled here by the image's interpreter,
  that no unpatched file of the repository compiles to (docstrings, names of files and line numbers
  left out; tiny bodies ignored). A ``.pyc`` (at a stream's start) holding one *hits*.

Text is compared after `normalize`: whitespace deleted, quotes read as ``"``, a comma before a closing
bracket dropped. Every stream is also carved for compressed data wherever it starts (zip local entries,
including a zip appended to or embedded in another file, gzip, bzip2, xz) and for zlib (git's loose
objects) and legacy ``.lzma`` at its start; what comes out is scanned the same way, nested up to
``DEPTH_MAX`` deep. A git pack (or bundle) is indexed with ``git index-pack`` in a scratch repository and
each object, deltas resolved, is a stream. File names (each folder's names as one text) and extended
attributes are read too.

Bounds, each checked before anything is allocated: files are mapped, never read whole, and text is
scanned in ``CHUNK`` slices; a decompressed stream is kept for nesting up to ``NESTED_MAX`` and read on
as text up to ``STREAM_MAX``; all decompressed bytes together stop at ``TOTAL_UNPACKED_MAX``; a
``.pyc`` over ``PYC_MAX`` or a pack over ``PACK_MAX`` is not parsed. Whatever a bound cut short, or
what cannot be read (an encrypted or exotic zip entry, zstd, a ``.pyc`` of another Python, a pack git
cannot index) is listed under ``partial``: reported, not evidence. Not found: the answer re-encoded
(base64, rot13, UTF-16, encryption), compiled differently (other optimisation level, other Python).
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.util
import json
import lzma
import marshal
import math
import mmap
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

WHITESPACE = b" \t\r\n\f\v"
QUOTES = bytes.maketrans(b"'", b'"')
CHUNK = 8 << 20  # raw bytes normalised at once
OVERLAP = 64 << 10  # carried into the next chunk: a unit spans at most this many raw bytes
GAP = 16  # bytes allowed between the lines of a multi-line unit (after whitespace is deleted)
ANCHOR_TRIES = 256  # occurrences of a unit's anchor line tried per chunk
NESTED_MAX = 64 << 20  # decompressed bytes of one stream kept for nested carving
STREAM_MAX = 1 << 30  # decompressed bytes of one stream read at all
TOTAL_UNPACKED_MAX = 8 << 30  # decompressed bytes of a whole scan
DEPTH_MAX = 4
INPUT_PIECE = 1 << 20  # compressed bytes fed to a decompressor at once
PYC_MAX = 32 << 20
PACK_MAX = 256 << 20
BASE_COMPILE_MAX = 64 << 20  # source bytes of the repository compiled for its own fingerprints
MIN_CODE_BYTES = 40  # co_code of a smaller code object (a one-line body) is not evidence
LISTED = 40  # paths listed per report field
XATTRS_MAX = 64  # extended attributes read per file
HIT_PATHS_MAX = 10_000  # paths a fix may remove (more: the host refuses the instance)
VIRTUAL = ("/proc", "/sys", "/dev")
PYC_MAGIC = importlib.util.MAGIC_NUMBER
ZIP_LOCAL = struct.Struct("<4sHHHHHIIIHH")
ZIP_METHODS = frozenset({0, 8, 9, 12, 14, 93, 95, 98, 99})  # stored, deflate(64), bzip2, lzma, zstd, xz, ppmd, aes
MAGICS = (
    (b"PK\x03\x04", "zip"),
    (b"\x1f\x8b\x08", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"BZh", "bzip2"),
)
BZIP2_HEAD = re.compile(rb"BZh[1-9]1AY&SY")
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
STRONG_UNIT = 40  # whitespace-free bytes of a line that is the fix found alone
PACK_HEAD = re.compile(rb"PACK\x00\x00\x00[\x02\x03]")
BUNDLE_HEAD = re.compile(rb"# v[23] git bundle\n")


def normalize(data: bytes) -> bytes:
    """Delete every ASCII whitespace byte (indentation, line breaks, spacing do not hide a line), read every
    quote as ``"`` and drop a comma before a closing bracket (a formatter's quote style and magic commas)."""
    data = data.translate(QUOTES, WHITESPACE)
    return data.replace(b",)", b")").replace(b",]", b"]").replace(b",}", b"}")


@dataclass(frozen=True)
class Unit:
    hunk: int
    lines: tuple[bytes, ...]  # normalised, non-empty
    context: bool = False  # a line the hunk leaves unchanged: confirms a short unit, is never evidence alone
    exact: bool = False  # lines that meet where a hunk removed others: never matched with gaps

    @property
    def joined(self) -> bytes:
        return b"".join(self.lines)

    @property
    def strong(self) -> bool:
        """Long or several lines: found alone, it is the fix. A shorter line also occurs by chance: of the
        3,239 source lines of toolz that would count, 24 are somewhere else in its image, all under 40 bytes."""
        return len(self.lines) > 1 or len(self.joined) >= STRONG_UNIT


@dataclass(frozen=True)
class Evidence:
    """What the scan looks for, from the JSON the host writes (`tasks.swe.leak_guard.evidence`)."""

    units: tuple[Unit, ...]  # the hunks' units, then their context lines
    need: tuple[int, ...]  # per hunk: units a file must hold to hit it
    confirm: tuple[int, ...]  # per hunk: context lines that must come with a single short unit
    hunk_names: tuple[str, ...]
    fixed_sources: dict[str, str]  # patched .py files (path -> text): their code objects are evidence
    base_sources: dict[str, str]  # the same files unpatched
    repo_dirs: tuple[str, ...]  # where the base tree sits in the image
    tracked: dict[str, str]  # base tree: path -> blob id

    @classmethod
    def from_json(cls, data: dict) -> Evidence:
        def encoded(lines: list[str]) -> tuple[bytes, ...]:
            return tuple(line.encode("utf-8", "surrogateescape") for line in lines)

        hunks = data["hunks"]
        units = [
            Unit(index, encoded(unit), exact=position >= len(hunk["units"]) - hunk.get("exact", 0))
            for index, hunk in enumerate(hunks)
            for position, unit in enumerate(hunk["units"])
        ]
        units += [
            Unit(index, encoded([line]), context=True)
            for index, hunk in enumerate(hunks)
            for line in hunk.get("context", ())
        ]
        return cls(
            units=tuple(units),
            need=tuple(int(hunk["need"]) for hunk in hunks),
            confirm=tuple(confirm_of(len(hunk.get("context", ()))) for hunk in hunks),
            hunk_names=tuple(str(hunk["name"]) for hunk in hunks),
            fixed_sources=dict(data.get("fixed_sources", {})),
            base_sources=dict(data.get("base_sources", {})),
            repo_dirs=tuple(data.get("repo_dirs", ())),
            tracked=dict(data.get("tracked", {})),
        )

    def hits(self, found: set[int]) -> list[tuple[int, int]]:
        """``(hunk, units found)`` of each hunk that ``found`` (indices into ``units``) holds."""
        fix: dict[int, list[Unit]] = {}
        context: dict[int, int] = {}
        for index in found:
            unit = self.units[index]
            if unit.context:
                context[unit.hunk] = context.get(unit.hunk, 0) + 1
            else:
                fix.setdefault(unit.hunk, []).append(unit)
        return [
            (hunk, len(units))
            for hunk, units in sorted(fix.items())
            if len(units) >= self.need[hunk]
            and (len(units) > 1 or units[0].strong or context.get(hunk, 0) >= self.confirm[hunk])
        ]


def need_of(count: int) -> int:
    """Units of a hunk a file must hold: all or a high fraction (80 %, rounded up), at least one."""
    return max(1, math.ceil(0.8 * count))


def confirm_of(count: int) -> int:
    """Context lines a single short unit needs beside it: half the hunk's (rounded up)."""
    return math.ceil(0.5 * count)


class Matcher:
    """Whitespace-free substring search of every unit in a chunk of normalised text."""

    def __init__(self, units: tuple[Unit, ...]) -> None:
        self.units = units
        self.joined = [unit.joined for unit in units]
        self.anchors = [max(range(len(u.lines)), key=lambda i: len(u.lines[i])) for u in units]

    def feed(self, text: bytes, found: set[int]) -> None:
        for index, unit in enumerate(self.units):
            if index not in found and (self.joined[index] in text or self._gapped(text, unit, self.anchors[index])):
                found.add(index)

    @staticmethod
    def _gapped(text: bytes, unit: Unit, anchor: int) -> bool:
        if len(unit.lines) == 1 or unit.exact:
            return False
        return gapped(text, unit.lines, anchor, ANCHOR_TRIES) is True


def gapped(text: bytes, lines: tuple[bytes, ...], anchor: int, tries: int) -> bool | None:
    """Whether ``lines`` occur in order in ``text``, each at most GAP bytes after the previous one, looking
    at the first ``tries`` places of the anchor line; None when there were more (undecided)."""
    pos = text.find(lines[anchor])
    while pos != -1:
        if tries == 0:
            return None
        tries -= 1
        if _follows(text, lines, anchor, pos):
            return True
        pos = text.find(lines[anchor], pos + 1)
    return False


def _follows(text: bytes, lines: tuple[bytes, ...], anchor: int, pos: int) -> bool:
    end = pos + len(lines[anchor])
    for line in lines[anchor + 1 :]:
        found = text.find(line, end, end + GAP + len(line))
        if found == -1:
            return False
        end = found + len(line)
    start = pos
    for line in reversed(lines[:anchor]):
        found = text.rfind(line, max(0, start - GAP - len(line)), start)
        if found == -1 or found + len(line) > start:
            return False
        start = found
    return True


# ---------------------------------------------------------------- bytecode


def _code_fingerprint(code, memo: dict) -> str:
    """A digest of what a code object does: bytecode, names, constants (nested code by digest), no docstring,
    file name, line numbers or qualified name."""
    key = id(code)
    if key in memo:
        return memo[key][0]
    consts = list(code.co_consts)
    if consts and isinstance(consts[0], str):
        consts = consts[1:]  # the docstring (3.11 puts it first; a body without one starts with None)
    parts = [
        code.co_code,
        repr((code.co_names, code.co_varnames, code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode(),
    ]
    for const in consts:
        if hasattr(const, "co_code"):
            parts.append(b"code:" + _code_fingerprint(const, memo).encode())
        else:
            parts.append(b"const:" + repr(const).encode("utf-8", "backslashreplace"))
    digest = hashlib.sha256(b"\x00".join(parts)).hexdigest()
    memo[key] = (digest, code)
    return digest


def code_objects(code) -> list:
    out, stack = [], [code]
    while stack:
        item = stack.pop()
        out.append(item)
        stack.extend(const for const in item.co_consts if hasattr(const, "co_code"))
    return out


def fingerprints(code) -> set[str]:
    memo: dict = {}
    return {_code_fingerprint(item, memo) for item in code_objects(code) if len(item.co_code) >= MIN_CODE_BYTES}


def _compiled(text: str, name: str):
    try:
        return compile(text, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def evidence_fingerprints(evidence: Evidence, repo_root: str | None) -> set[str]:
    """Code objects of the patched files that no file of the base tree compiles to (read from ``repo_root``,
    each file checked against its blob id: whatever else sits there is not the base)."""
    fixed: set[str] = set()
    for path, text in evidence.fixed_sources.items():
        code = _compiled(text, path)
        if code is not None:
            fixed |= fingerprints(code)
    if not fixed:
        return fixed
    base: set[str] = set()
    for path, text in evidence.base_sources.items():
        code = _compiled(text, path)
        if code is not None:
            base |= fingerprints(code)
    budget = BASE_COMPILE_MAX
    for relative, blob in sorted(evidence.tracked.items()) if repo_root else ():
        path = os.path.join(repo_root, relative)
        if not relative.endswith(".py") or os.path.islink(path) or not os.path.isfile(path):
            continue
        size = os.path.getsize(path)
        if size > budget:
            continue
        budget -= size
        with open(path, "rb") as handle:
            data = handle.read(size)
        if hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest() == blob:  # the base tree's file only
            code = _compiled(data.decode("utf-8", "replace"), path)
            base |= fingerprints(code) if code is not None else set()
    return fixed - base


# ---------------------------------------------------------------- the scan


@dataclass
class Report:
    files: int = 0
    bytes: int = 0
    base_files: int = 0  # repository files byte-identical to the base tree (not scanned)
    unpacked_streams: int = 0
    unpacked_bytes: int = 0
    pyc: int = 0
    packs: int = 0
    unreadable: int = 0
    unreadable_paths: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    partial_count: int = 0
    hits: dict[str, list[dict]] = field(default_factory=dict)  # outer path -> what was found where
    hit_count: int = 0
    companions: list[str] = field(default_factory=list)
    units: int = 0
    fingerprints: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict:
        hits = [{"path": path, "found": found} for path, found in sorted(self.hits.items())[:LISTED]]
        return {
            "files": self.files,
            "bytes": self.bytes,
            "base_files": self.base_files,
            "unpacked_streams": self.unpacked_streams,
            "unpacked_bytes": self.unpacked_bytes,
            "pyc": self.pyc,
            "packs": self.packs,
            "unreadable": self.unreadable,
            "unreadable_paths": self.unreadable_paths[:LISTED],
            "partial": self.partial[:LISTED],
            "partial_count": self.partial_count,
            "hit_count": self.hit_count,
            "hits": hits,
            "hit_paths": sorted(self.hits),
            "companions": sorted(set(self.companions)),
            "units": self.units,
            "fingerprints": self.fingerprints,
            "seconds": round(self.seconds, 3),
        }


class Scanner:
    def __init__(self, evidence: Evidence, fixed_fingerprints: set[str], scratch: str) -> None:
        self.evidence = evidence
        self.matcher = Matcher(evidence.units)
        self.fixed_fingerprints = fixed_fingerprints
        self.scratch = scratch
        units = sum(1 for unit in evidence.units if not unit.context)
        self.report = Report(units=units, fingerprints=len(fixed_fingerprints))
        self.unpacked_total = 0
        self.idle = not units and not fixed_fingerprints  # nothing to look for: files are only counted

    # -- bookkeeping
    def _partial(self, where: str, why: str) -> None:
        self.report.partial_count += 1
        if len(self.report.partial) < LISTED:
            self.report.partial.append(f"{where}: {why}")

    def _record(self, outer: str, where: str, found: set[int]) -> None:
        for hunk, count in self.evidence.hits(found):
            total = sum(1 for unit in self.evidence.units if unit.hunk == hunk and not unit.context)
            name = self.evidence.hunk_names[hunk]
            self._hit(outer, {"where": where, "kind": "lines", "hunk": name, "units": f"{count}/{total}"})

    def _hit(self, outer: str, found: dict) -> None:
        """Record a hit (at most HIT_PATHS_MAX files and 8 findings each are kept; every file is counted)."""
        if outer not in self.report.hits:
            self.report.hit_count += 1
            if len(self.report.hits) >= HIT_PATHS_MAX:
                return
            self.report.hits[outer] = []
        elif len(self.report.hits[outer]) >= 8:
            return
        self.report.hits[outer].append(found)

    # -- text
    def _text(self, buf, found: set[int], start: int = 0, end: int | None = None) -> None:
        end = len(buf) if end is None else end
        if not self.matcher.units:
            return
        for offset in range(start, end, CHUNK):
            self.matcher.feed(normalize(buf[offset : min(end, offset + CHUNK + OVERLAP)]), found)
            if len(found) == len(self.matcher.units):
                return

    # -- one stream (a file's map, or decompressed bytes)
    def stream(self, buf, outer: str, where: str, depth: int, carve: bool = True) -> None:
        if self.idle:
            return
        found: set[int] = set()
        self._text(buf, found)
        self._record(outer, where, found)
        self._sniff(buf, outer, where, depth)
        if carve and depth < DEPTH_MAX:
            self._carve(buf, outer, where, depth)

    def _sniff(self, buf, outer: str, where: str, depth: int) -> None:
        head = bytes(buf[:64])
        if head[:4] == PYC_MAGIC:
            self._pyc(buf, outer, where)
        elif head[2:4] == b"\r\n" and where.endswith(".pyc"):
            self._partial(where, "bytecode of another Python")
        elif PACK_HEAD.match(head):
            self._pack(buf, 0, outer, where, depth)
        elif BUNDLE_HEAD.match(head):
            cut = bytes(buf[: 1 << 16]).find(b"\n\n")
            if cut != -1:
                self._pack(buf, cut + 2, outer, where, depth)
        elif head[:4] == ZSTD_MAGIC:
            self._partial(where, "zstd (not readable here)")
        elif _lzma_alone(head) and depth < DEPTH_MAX:
            self._inflate(buf, 0, lambda: lzma.LZMADecompressor(lzma.FORMAT_ALONE), outer, f"{where}!lzma", depth)
        elif len(head) >= 2 and head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0 and depth < DEPTH_MAX:
            self._inflate(buf, 0, lambda: zlib.decompressobj(15), outer, f"{where}!zlib", depth)

    def _carve(self, buf, outer: str, where: str, depth: int) -> None:
        for magic, kind in MAGICS:
            pos = buf.find(magic)
            while pos != -1:
                if kind == "zip":
                    self._zip_entry(buf, pos, outer, where, depth)
                elif kind == "gzip":
                    self._inflate(buf, pos, lambda: zlib.decompressobj(31), outer, f"{where}!gzip@{pos}", depth)
                elif kind == "xz":
                    self._inflate(buf, pos, lzma.LZMADecompressor, outer, f"{where}!xz@{pos}", depth)
                elif BZIP2_HEAD.match(bytes(buf[pos : pos + 10])):
                    self._inflate(buf, pos, bz2.BZ2Decompressor, outer, f"{where}!bzip2@{pos}", depth)
                pos = buf.find(magic, pos + 1)

    def _zip_entry(self, buf, pos: int, outer: str, where: str, depth: int) -> None:
        if pos + ZIP_LOCAL.size > len(buf):
            return
        _, version, flags, method, _, _, _, csize, usize, nlen, xlen = ZIP_LOCAL.unpack_from(buf, pos)
        raw_name = bytes(buf[pos + 30 : pos + 30 + nlen])
        data = pos + 30 + nlen + xlen
        if not (0 < nlen <= 1024 and version & 0xFF <= 63 and method in ZIP_METHODS and data <= len(buf)):
            return  # four bytes that only look like a zip entry (machine code, compressed data)
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError:
            return
        if not name.isprintable():
            return
        inner = f"{where}!{name}"
        if flags & 1:
            self._partial(inner, "encrypted zip entry")
        elif method == 0:
            size = csize or usize
            if size and data + size <= len(buf):  # stored: its text was scanned with the outer stream
                self._sniff(memoryview(buf)[data : data + size], outer, inner, depth + 1)
        elif method == 8:
            self._inflate(buf, data, lambda: zlib.decompressobj(-15), outer, inner, depth)
        elif method == 12:
            self._inflate(buf, data, bz2.BZ2Decompressor, outer, inner, depth)
        else:
            self._partial(inner, f"zip method {method} (not readable here)")

    def _inflate(self, buf, start: int, factory, outer: str, where: str, depth: int) -> None:
        """Decompress from ``start``; scan what comes out (nothing: the magic was a coincidence).

        The first NESTED_MAX bytes are kept (scanned as a stream: text, sniffed, carved); the rest, up to
        STREAM_MAX, is scanned as text in slices and never kept."""
        try:
            decompressor = factory()
        except (lzma.LZMAError, ValueError, OSError):
            return
        kept, found = bytearray(), set()
        carry, text_only, total, pos, cut = b"", False, 0, start, ""
        stalled = 0
        while (piece := self._next_output(decompressor, buf, pos, pos == start)) is not None:
            output, moved = piece[0], piece[1] != pos
            pos = piece[1]
            if not output:
                stalled = 0 if moved else stalled + 1
                if stalled > 2:
                    break
                continue
            if self.unpacked_total + len(output) > TOTAL_UNPACKED_MAX:
                cut = "the scan's decompression budget is spent"
                break
            if total + len(output) > STREAM_MAX:
                cut = f"stream over {STREAM_MAX} bytes"
                break
            total += len(output)
            self.unpacked_total += len(output)
            if not text_only and len(kept) + len(output) <= NESTED_MAX:
                kept += output
                continue
            if not text_only:
                text_only, carry = True, bytes(kept[-OVERLAP:])
                self._text(kept, found)
                self._partial(where, f"over {NESTED_MAX} bytes: the rest read as text only")
            self._text(carry + output, found)
            carry = (carry + output)[-OVERLAP:]
        if total == 0:
            return
        self.report.unpacked_streams += 1
        self.report.unpacked_bytes += total
        if cut:
            self._partial(where, cut)
        if not text_only:
            self._text(kept, found)
        self._record(outer, where, found)
        self._sniff(kept, outer, where, depth + 1)
        if depth + 1 < DEPTH_MAX:
            self._carve(kept, outer, where, depth + 1)

    @staticmethod
    def _next_output(decompressor, buf, pos: int, first: bool):
        """``(output, next input position)``; None at the end or when the data is not (or no longer) this
        format. The first piece is small: most magic bytes found by carving are a coincidence."""
        size = 1 << 14 if first else INPUT_PIECE
        try:
            if isinstance(decompressor, (bz2.BZ2Decompressor, lzma.LZMADecompressor)):
                if decompressor.eof:
                    return None
                if decompressor.needs_input:
                    piece = bytes(buf[pos : pos + size])
                    if not piece:
                        return None
                    return decompressor.decompress(piece, CHUNK), pos + len(piece)
                return decompressor.decompress(b"", CHUNK), pos
            if decompressor.eof:
                return None
            if decompressor.unconsumed_tail:
                return decompressor.decompress(decompressor.unconsumed_tail, CHUNK), pos
            piece = bytes(buf[pos : pos + size])
            if not piece:
                return None
            return decompressor.decompress(piece, CHUNK), pos + len(piece)
        except (zlib.error, OSError, lzma.LZMAError, EOFError, ValueError):
            return None

    # -- bytecode
    def _pyc(self, buf, outer: str, where: str) -> None:
        if len(buf) > PYC_MAX:
            self._partial(where, f"bytecode over {PYC_MAX} bytes")
            return
        try:
            code = marshal.loads(bytes(buf[16:]))
        except (EOFError, ValueError, TypeError):
            self._partial(where, "bytecode that does not load")
            return
        if not hasattr(code, "co_code"):
            return
        self.report.pyc += 1
        objects = code_objects(code)
        memo: dict = {}
        if self.fixed_fingerprints and any(
            len(item.co_code) >= MIN_CODE_BYTES and _code_fingerprint(item, memo) in self.fixed_fingerprints
            for item in objects
        ):
            self._hit(outer, {"where": where, "kind": "bytecode"})
        strings = [const for item in objects for const in item.co_consts if isinstance(const, (str, bytes))]
        text = b"\n".join(s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass") for s in strings)
        found: set[int] = set()
        self._text(text, found)
        self._record(outer, f"{where}!constants", found)

    # -- git
    def _pack(self, buf, start: int, outer: str, where: str, depth: int) -> None:
        size = len(buf) - start
        if size > PACK_MAX:
            self._partial(where, f"git pack over {PACK_MAX} bytes")
            return
        git = shutil.which("git")
        if git is None:
            self._partial(where, "git pack, and no git to read it")
            return
        repo = tempfile.mkdtemp(dir=self.scratch)
        try:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": repo, "LC_ALL": "C"}
            env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)  # no configuration of the image
            subprocess.run([git, "init", "-q", "--bare", repo], env=env, check=True, capture_output=True)
            pack = os.path.join(repo, "objects", "pack", "pack-scan.pack")
            with open(pack, "wb") as handle:
                for offset in range(start, len(buf), CHUNK):
                    handle.write(buf[offset : min(len(buf), offset + CHUNK)])
            proc = subprocess.run([git, "index-pack", pack], env=env, cwd=repo, capture_output=True)
            if proc.returncode != 0:
                self._partial(where, "git pack that git cannot index")
                return
            self.report.packs += 1
            self._objects(git, repo, env, outer, where, depth)
        finally:
            shutil.rmtree(repo, ignore_errors=True)

    def _objects(self, git: str, repo: str, env: dict, outer: str, where: str, depth: int) -> None:
        """Every object of the scratch repository (deltas resolved by git), each scanned as a stream."""
        cmd = [git, "--git-dir", repo, "cat-file", "--batch-all-objects", "--batch", "--unordered"]
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            out = proc.stdout
            while True:
                header = out.readline(256)
                if not header:
                    break
                parts = header.split()
                if len(parts) != 3 or not parts[2].isdigit():
                    self._partial(where, "unexpected git cat-file output")
                    proc.kill()
                    break
                oid, size = parts[0].decode(), int(parts[2])
                inner = f"{where}!{oid}"
                if size <= NESTED_MAX:
                    data = out.read(size)
                    self.report.unpacked_bytes += size
                    self.stream(data, outer, inner, depth + 1)
                else:
                    found: set[int] = set()
                    carry, left = b"", size
                    while left:
                        piece = out.read(min(CHUNK, left))
                        if not piece:
                            break
                        left -= len(piece)
                        self._text(carry + piece, found)
                        carry = (carry + piece)[-OVERLAP:]
                    self._record(outer, inner, found)
                    self._partial(inner, f"git object over {NESTED_MAX} bytes: read as text only")
                out.read(1)  # the newline after the content

    # -- the filesystem
    def _base_file(self, path: str, buf, size: int) -> bool:
        for root in self.evidence.repo_dirs:
            if path.startswith(root.rstrip("/") + "/"):
                relative = path[len(root.rstrip("/")) + 1 :]
                blob = self.evidence.tracked.get(relative)
                if blob is None:
                    return False
                digest = hashlib.sha1(b"blob %d\x00" % size)
                for offset in range(0, size, CHUNK):
                    digest.update(buf[offset : min(size, offset + CHUNK)])
                return digest.hexdigest() == blob
        return False

    def file(self, path: str) -> None:
        try:
            info = os.lstat(path)
        except OSError:
            self._unreadable(path)
            return
        if not stat.S_ISLNK(info.st_mode):
            self._xattrs(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return  # links are scanned where they point; fifos, sockets and devices hold nothing of the image
        try:
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                if self._base_file(path, buf, info.st_size):
                    self.report.base_files += 1
                    return
                self.report.files += 1
                self.report.bytes += info.st_size
                self.stream(buf, path, path, 0)
        except (OSError, ValueError):
            self._unreadable(path)

    def tree(self, root: str, exclude: tuple[str, ...] = ()) -> Report:
        started = time.monotonic()
        skip = {os.path.normpath(p) for p in (*VIRTUAL, *exclude)}
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda err: self._unreadable(str(err.filename))):
            dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in skip)
            self._names(dirpath, [*dirnames, *filenames])
            self._xattrs(dirpath)
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if path not in skip:
                    self.file(path)
        self.report.companions = [c for hit in self.report.hits for c in _bytecode_of(hit)]
        self.report.seconds = time.monotonic() - started
        return self.report

    def _names(self, folder: str, names: list[str]) -> None:
        """File names are text an agent reads with ``ls``: the names of one folder are one stream, and each
        name holding a line of a hunk they hit is a hit on its path."""
        if self.idle or not names:
            return
        found: set[int] = set()
        self.matcher.feed(normalize(b"\n".join(os.fsencode(name) for name in names)), found)
        hunks = {hunk for hunk, _ in self.evidence.hits(found)}
        for name in names if hunks else ():
            own: set[int] = set()
            self.matcher.feed(normalize(os.fsencode(name)), own)
            if any(self.evidence.units[i].hunk in hunks and not self.evidence.units[i].context for i in own):
                self._hit(os.path.join(folder, name), {"where": os.path.join(folder, name), "kind": "name"})

    def _xattrs(self, path: str) -> None:
        """Extended attributes travel in image layers and read like file content (``getfattr``)."""
        try:
            names = os.listxattr(path, follow_symlinks=False)
        except OSError:
            return
        for name in names[:XATTRS_MAX]:
            try:
                value = os.getxattr(path, name, follow_symlinks=False)  # the kernel bounds a value to 64 KiB
            except OSError:
                continue
            self.stream(value, path, f"{path}!xattr:{name}", DEPTH_MAX)

    def _unreadable(self, path: str) -> None:
        self.report.unreadable += 1
        if len(self.report.unreadable_paths) < LISTED:
            self.report.unreadable_paths.append(path)


def _lzma_alone(head: bytes) -> bool:
    """The header of a legacy ``.lzma`` stream: properties byte 0x5D, a dictionary size of 2^n or 3 x 2^n."""
    if len(head) < 13 or head[0] != 0x5D:
        return False
    size = int.from_bytes(head[1:5], "little")
    return size >= 4096 and (size & (size - 1) == 0 or (size // 3) & (size // 3 - 1) == 0)


def _bytecode_of(path: str) -> list[str]:
    """The cached bytecode beside a source file (``__pycache__/name.*.pyc``, ``name.pyc``) that exists."""
    if not path.endswith(".py"):
        return []
    folder, name = os.path.split(path)
    stem = name[:-3]
    cache = Path(folder, "__pycache__")
    found = [str(p) for p in cache.glob(f"{glob_escape(stem)}.*.pyc")] if cache.is_dir() else []
    legacy = os.path.join(folder, stem + ".pyc")
    return found + ([legacy] if os.path.isfile(legacy) else [])


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def scan(evidence: Evidence, root: str = "/", exclude: tuple[str, ...] = (), scratch: str | None = None) -> Report:
    """Scan the tree at ``root`` for the evidence (the repository's code is compiled from its first repo dir)."""
    repo_root = next((d for d in evidence.repo_dirs if os.path.isdir(d)), None)
    fixed = evidence_fingerprints(evidence, repo_root)
    own_scratch = scratch is None
    scratch = scratch or tempfile.mkdtemp()
    try:
        return Scanner(evidence, fixed, scratch).tree(root, exclude)
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``leak_scan.py EVIDENCE.json [ROOT]``: the report as one JSON line on stdout."""
    evidence_path = Path(argv[0])
    data = json.loads(evidence_path.read_text())
    root = argv[1] if len(argv) > 1 else "/"
    scan_dir = str(evidence_path.parent)
    scratch = os.path.join(scan_dir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    report = scan(Evidence.from_json(data), root, exclude=(scan_dir, *data.get("exclude", ())), scratch=scratch)
    sys.stdout.write(json.dumps(report.as_json()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
