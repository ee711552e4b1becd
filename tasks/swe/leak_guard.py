"""The answer must not sit in the image (issue 41, class 3): scan each instance image at build time.

After the instance layer is built (as ``gym-swe-prescan:<id>-<h>``), `tasks.swe.leak_scan` runs in a
throwaway container of it, looking for the gold patch's fixed code in every file but the repository's
base tree. Then:

* **clean**: the instance image is the scanned image plus a label;
* **fixed**: every hit lies outside the repository folders: a final layer removes each file that holds
  it (an archive holding it goes whole) and the bytecode cached beside it; the fixed image is scanned
  again and must be clean, and ``import pytest`` plus the patched modules must still import if they did
  before. A removed file stays in the lower layers, which the agent's container cannot reach;
* **refused** (`LeakRefused`, the instance gets no image): a hit inside the repository folders (their
  git objects or files other than the base tree: the build wrote the future there), a hit left after
  the fix, or a fix that breaks the imports.

The outcome travels as the image label ``gym.swe.leak_scan`` (so a cached image still reports it) and
as the note ``images build`` prints (``tasks build-swe`` prints what each scan looks for). Evidence
(`evidence`): each hunk's added lines, normalised (`leak_scan.normalize`), minus lines shorter than
``MIN_LINE``, imports, and lines the unpatched repository or the standard library already hold; a hunk
with none is represented by its added run and up to ``WINDOW_MAX`` context lines either side, the
smallest window found in neither (at least ``MIN_WINDOW`` bytes), and a hunk that only removes lines by
the lines that now meet (`junctions_of`); its unchanged lines confirm a single short unit
(`context_of`); the patched ``.py`` files give the bytecode to look for.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from images.build import BuiltImage, build_dockerfile
from images.inputs import ImageBuildError
from sandbox.labels import Labels
from tasks.swe import leak_scan, repository
from tasks.swe.diff import split
from tasks.swe.instance import SweInstance

log = logging.getLogger(__name__)

LABEL = "gym.swe.leak_scan"
SCAN_DIR = "/gym-leak-scan"
SCAN_TIMEOUT_S = 900
SCAN_MEMORY = "1536m"
PROBE_TIMEOUT_S = 120
RM_LIST = "/gym-leak-remove.list"  # the fix layer's list of paths (left in a lower layer only)
MIN_LINE = 12  # whitespace-free bytes of a line that is evidence alone
MIN_WINDOW = 32  # ... of a context window standing for a hunk without such a line
WINDOW_MAX = 3
UNITS_PER_HUNK = 8  # the longest ones are kept
UNITS_MAX = 64
CONTEXT_PER_HUNK = 8
GAPPED_TRIES = 100_000  # places of a window's anchor line looked at in the repository (more: too common)
BASE_FILE_MAX = 16 << 20  # a base-tree file larger than this is not part of the "already there" corpus
BASE_CORPUS_MAX = 256 << 20
SOURCES_MAX = 16 << 20  # patched .py text sent to the scan
IMPORT = re.compile(rb"^(?:import[A-Za-z_]|from[A-Za-z_.][\w.]*import)")
WORDY = re.compile(rb"[A-Za-z_]{3}")
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


class LeakRefused(ImageBuildError):
    """The instance's fixed code is readable in its image and the build could not remove it."""


@dataclass(frozen=True)
class Hunk:
    name: str  # path and hunk header
    post: tuple[tuple[str, bool], ...]  # the hunk's lines after the patch: (text, added)
    cuts: tuple[int, ...] = ()  # where lines were removed: the index in ``post`` of the line that follows


def hunks(patch: str) -> list[Hunk]:
    """The hunks of a diff (binary sections have none), each as its post-image lines."""
    out: list[Hunk] = []
    for section in split(patch):
        path = section.paths[-1] if section.paths else "?"
        header, post, cuts = "", [], []
        for line in section.text.splitlines():
            if HUNK.match(line):
                if header:
                    out.append(Hunk(f"{path} {header}", tuple(post), tuple(dict.fromkeys(cuts))))
                header, post, cuts = line.split(" @@")[0] + " @@", [], []
            elif header and line[:1] in (" ", "+"):
                post.append((line[1:], line[:1] == "+"))
            elif header and line == "":
                post.append(("", False))
            elif header and line[:1] == "-":
                cuts.append(len(post))
        if header:
            out.append(Hunk(f"{path} {header}", tuple(post), tuple(dict.fromkeys(cuts))))
    return out


@functools.cache
def stdlib_corpus() -> bytes:
    """The host interpreter's standard library, whitespace deleted: a line found there is too common."""
    root = Path(sysconfig.get_path("stdlib"))
    parts = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__")]
        parts.extend(leak_scan.normalize((Path(dirpath) / n).read_bytes()) for n in filenames if n.endswith(".py"))
    return b"\x00".join(parts)


def substantive(line: bytes) -> bool:
    return len(line) >= MIN_LINE and WORDY.search(line) is not None and not IMPORT.match(line)


def units_of(hunk: Hunk, known) -> list[tuple[bytes, ...]]:
    """The hunk's evidence: substantive new lines, else the smallest new context window (see the module doc)."""
    lines = [leak_scan.normalize(text.encode("utf-8", "surrogateescape")) for text, _ in hunk.post]
    added = [i for i, (_, is_added) in enumerate(hunk.post) if is_added]
    singles = [(lines[i],) for i in added if substantive(lines[i]) and not known(lines[i])]
    if singles:
        return sorted(set(singles), key=lambda unit: (-len(unit[0]), unit))[:UNITS_PER_HUNK]
    runs: list[tuple[int, int]] = []
    for i in added:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    windows = []
    for first, last in runs:
        if not any(lines[first : last + 1]):
            continue  # blank lines added: nothing to find
        for reach in range(1, WINDOW_MAX + 1):
            window = tuple(line for line in lines[max(0, first - reach) : last + 1 + reach] if line)
            joined = b"".join(window)
            if len(joined) >= MIN_WINDOW and any(substantive(line) for line in window) and not known(window):
                windows.append(window)
                break
    return windows[:UNITS_PER_HUNK]


def junctions_of(hunk: Hunk, known) -> list[tuple[bytes, ...]]:
    """A hunk that only removes lines: the lines that now meet where they were, up to ``WINDOW_MAX`` either
    side (the smallest window found in neither the repository nor the standard library). Matched exactly:
    the unpatched code holds the same lines with the removed ones between them."""
    lines = [leak_scan.normalize(text.encode("utf-8", "surrogateescape")) for text, _ in hunk.post]
    windows = []
    for cut in hunk.cuts:
        for reach in range(1, WINDOW_MAX + 1):
            before = [line for line in lines[max(0, cut - reach) : cut] if line]
            after = [line for line in lines[cut : cut + reach] if line]
            window = tuple(before + after)
            joined = b"".join(window)
            if before and after and len(joined) >= MIN_WINDOW and not known(joined):
                windows.append(window)
                break
    return windows[:UNITS_PER_HUNK]


def context_of(hunk: Hunk, known) -> list[bytes]:
    """The hunk's unchanged lines that say which code it is (substantive, not common): what confirms a single
    short unit found in a file (a copy of the fixed code carries its surroundings; a coincidence does not)."""
    lines = {leak_scan.normalize(text.encode("utf-8", "surrogateescape")) for text, added in hunk.post if not added}
    return sorted((line for line in lines if substantive(line) and not known(line)), key=lambda x: (-len(x), x))[
        :CONTEXT_PER_HUNK
    ]


def _base_tree(clone: Path, commit: str, dest: Path) -> tuple[bytes, dict[str, str]]:
    """Export the base tree; its files whitespace-deleted (one corpus) and its blob ids by path."""
    repository.export_tree(clone, commit, dest)
    tracked = {}
    for entry in repository.git("ls-tree", "-r", "-z", commit, cwd=clone).split("\x00"):
        meta, _, path = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == "blob" and fields[0] != "120000":
            tracked[path] = fields[2]
    parts, budget = [], BASE_CORPUS_MAX
    for path in sorted(tracked):
        file = dest / path
        size = file.stat().st_size if file.is_file() else 0
        if 0 < size <= min(BASE_FILE_MAX, budget):
            budget -= size
            parts.append(leak_scan.normalize(file.read_bytes()))
    return b"\x00".join(parts), tracked


def _patched(tree: Path, patch: str) -> bool:
    repository.init(tree)  # git apply in a folder of its own, never relative to an enclosing repository
    try:
        repository.git("apply", "--whitespace=nowarn", "-", cwd=tree, input=patch.encode())
    except repository.GitError:
        return False
    return True


def evidence(instance: SweInstance, clone: Path, repo_dirs: tuple[str, ...]) -> dict:
    """The JSON `leak_scan` reads: the hunks' units, the patched sources, where the base tree sits."""
    found = hunks(instance.patch)
    paths = [h.name.split(" @@")[0] for h in found]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        corpus, tracked = _base_tree(clone, instance.base_commit, tree)
        stdlib = stdlib_corpus()

        def known(unit: bytes | tuple[bytes, ...]) -> bool:
            """In the repository or the standard library: as one text, or (several lines) as the scan's gapped
            match would find it there (undecided after GAPPED_TRIES places counts as found)."""
            if isinstance(unit, bytes):
                return unit in corpus or unit in stdlib
            joined = b"".join(unit)
            if joined in corpus or joined in stdlib:
                return True
            anchor = max(range(len(unit)), key=lambda i: len(unit[i]))
            return any(leak_scan.gapped(text, unit, anchor, GAPPED_TRIES) is not False for text in (corpus, stdlib))

        def common(line: bytes) -> bool:
            return line in stdlib

        hunk_rows = []
        for hunk in found:
            units = units_of(hunk, known)
            exact = [] if any(added for _, added in hunk.post) else junctions_of(hunk, known)
            context = [line.decode("utf-8", "surrogateescape") for line in context_of(hunk, common)]
            hunk_rows.append({"name": hunk.name, "units": units + exact, "need": 1, "context": context})
            hunk_rows[-1]["exact"] = len(exact)  # the last units: matched without gaps
        base_sources = _sources(tree, paths)
        fixed_sources = _sources(tree, paths) if _patched(tree, instance.patch) else {}
    total, rows = 0, []
    for row in hunk_rows:  # every hunk keeps its best units first; UNITS_MAX bounds the scan's work
        keep = row["units"][: max(0, UNITS_MAX - total)]
        total += len(keep)
        rows.append({**row, "units": [[line.decode("utf-8", "surrogateescape") for line in u] for u in keep]})
        rows[-1].update(need=leak_scan.need_of(len(keep)), exact=min(row["exact"], len(keep)))
    return {
        "hunks": [row for row in rows if row["units"]],
        "bare_hunks": [row["name"] for row in rows if not row["units"]],
        "fixed_sources": fixed_sources,
        "base_sources": base_sources,
        "repo_dirs": list(repo_dirs),
        "tracked": tracked,
    }


def _sources(tree: Path, paths: list[str]) -> dict[str, str]:
    """The ``.py`` files among ``paths`` (SOURCES_MAX bytes in all, the rest left out)."""
    out, budget = {}, SOURCES_MAX
    for path in dict.fromkeys(paths):
        file = tree / path
        if path.endswith(".py") and file.is_file() and not file.is_symlink() and file.stat().st_size <= budget:
            budget -= file.stat().st_size
            out[path] = file.read_text(errors="replace")
    return out


def summary(evidence_json: dict) -> str:
    """One line for ``tasks build-swe``: what the image scan will look for."""
    units = sum(len(h["units"]) for h in evidence_json["hunks"])
    hunks_, bare = len(evidence_json["hunks"]), evidence_json["bare_hunks"]
    text = f"leak scan looks for {_count(units, 'line')} of {_count(hunks_, 'hunk')}"
    text += f" + the code of {_count(len(evidence_json['fixed_sources']), 'patched .py file')}"
    if bare:
        text += f"; {_count(len(bare), 'hunk')} with nothing distinctive ({', '.join(bare[:3])})"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


# ---------------------------------------------------------------- Docker


def _archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo(SCAN_DIR.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{SCAN_DIR.lstrip('/')}/{name}")
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _run(client: docker.DockerClient, image: str, argv: list[str], timeout_s: int, files: dict[str, bytes]):
    """Run ``argv`` in a throwaway container of ``image`` (no network, bounded); ``(exit code, stdout, stderr)``."""
    container = client.containers.create(
        image,
        command=argv,
        user="0:0",
        working_dir="/",
        network_disabled=True,
        mem_limit=SCAN_MEMORY,
        memswap_limit=SCAN_MEMORY,
        pids_limit=128,
        cap_drop=["ALL"],
        cap_add=["DAC_READ_SEARCH"],  # read every file of the image, whoever owns it
        security_opt=["no-new-privileges"],
        labels=Labels.for_this_process(timeout_s + 120, role="leak-scan").as_dict(),
    )
    try:
        if files:
            container.put_archive("/", _archive(files))
        container.start()
        try:
            status = container.wait(timeout=timeout_s)
        except Exception as exc:  # the engine's read timeout: the run went past its bound
            raise ImageBuildError(f"`{' '.join(argv[:4])}` in {image} ran past {timeout_s}s ({exc})") from exc
        out = container.logs(stdout=True, stderr=False)
        err = container.logs(stdout=False, stderr=True)
        return int(status.get("StatusCode", -1)), out[-(4 << 20) :], err[-4000:].decode(errors="replace")
    finally:
        container.remove(force=True)


def scan_image(client: docker.DockerClient, image: str, evidence_json: dict) -> dict:
    """`leak_scan` in a throwaway container of ``image``: its report (plus ``wall_s``, the host's clock)."""
    started = time.monotonic()
    files = {
        "leak_scan.py": Path(leak_scan.__file__).read_bytes(),
        "evidence.json": json.dumps(evidence_json).encode(),
    }
    argv = ["python3", "-I", "-S", "-B", f"{SCAN_DIR}/leak_scan.py", f"{SCAN_DIR}/evidence.json"]
    code, out, err = _run(client, image, argv, SCAN_TIMEOUT_S, files)
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        report = json.loads(lines[-1]) if code == 0 and lines else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        raise ImageBuildError(f"the leak scan of {image} failed (exit {code}): {err[-1500:]}")
    report["wall_s"] = round(time.monotonic() - started, 2)
    return report


def _modules(instance: SweInstance) -> list[str]:
    """Top-level modules the gold patch edits (what must still import after a fix)."""
    names = []
    for path in dict.fromkeys(h.name.split(" @@")[0] for h in hunks(instance.patch)):
        parts = path.split("/")
        if parts[0] in ("src", "lib") and len(parts) > 1:
            parts = parts[1:]
        name = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
        if name.isidentifier() and path.endswith(".py") and not name.startswith("test"):
            names.append(name)
    return sorted(set(names))


def _imports(client: docker.DockerClient, image: str, modules: list[str]) -> tuple[bool, str]:
    code = "import pytest\n" + "".join(f"import {name}\n" for name in modules)
    status, out, err = _run(client, image, ["python3", "-c", code], PROBE_TIMEOUT_S, {})
    return status == 0, err[-800:]


# ---------------------------------------------------------------- the guard


def _in_repo(path: str, repo_dirs: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in repo_dirs)


def _listing(paths: list[str], shown: int = 4) -> str:
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def _label(report: dict, action: str, removed: list[str]) -> dict:
    keys = ("files", "bytes", "base_files", "unpacked_streams", "unpacked_bytes", "pyc", "packs")
    keys += ("units", "fingerprints", "partial_count", "seconds", "wall_s")
    data = {key: report.get(key) for key in keys}
    data.update(action=action, hits=report["hit_count"], removed=removed[:20], removed_count=len(removed))
    data["partial"] = report.get("partial", [])[:5]
    return data


def note(scan: dict) -> str:
    """The scan as one line of build output."""
    text = (
        f"leak scan: {scan['files']:,} files, {scan['bytes'] / 1e6:.1f} MB"
        f" (+{scan['unpacked_bytes'] / 1e6:.1f} MB unpacked from {scan['unpacked_streams']:,} streams,"
        f" {scan['pyc']:,} .pyc, {_count(scan['packs'], 'git pack')}), looking for {_count(scan['units'], 'line')}"
        f" + {_count(scan['fingerprints'], 'code object')}, {scan['seconds']:.1f}s: "
    )
    if scan["action"] == "clean":
        text += "clean"
    else:
        text += f"{scan['hits']} files held the fix, removed {scan['removed_count']}: {_listing(scan['removed'])}"
    if scan.get("partial_count"):
        text += f"; {scan['partial_count']} read in part ({'; '.join(scan['partial'][:2])})"
    return text


def recorded(client: docker.DockerClient, tag: str) -> dict | None:
    """The scan a built instance image carries (its label), if any."""
    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return None
    try:
        return json.loads(labels[LABEL])
    except (KeyError, json.JSONDecodeError):
        return None


def _layer(client, base: str, tag: str, inputs: str, rm: list[str], labels: dict[str, str]) -> BuiltImage:
    """``tag`` = ``base`` less the files ``rm`` names (NUL-separated in a list no shell parses), plus labels."""
    lines = ["ARG BASE", "FROM ${BASE}"]
    with tempfile.TemporaryDirectory() as tmp:
        if rm:
            data = b"".join(os.fsencode(path) + b"\x00" for path in rm)
            (Path(tmp) / "remove.list").write_bytes(data)
            lines.append(f"COPY remove.list {RM_LIST}")
            lines.append(f'RUN ["sh", "-c", "xargs -0 rm -rf -- < {RM_LIST} && rm {RM_LIST}"]')
        (Path(tmp) / "Dockerfile").write_text("\n".join(lines) + "\n")
        return build_dockerfile(client, Path(tmp), tag, inputs, {"BASE": base}, True, labels)


def guard(
    client: docker.DockerClient,
    instance: SweInstance,
    clone: Path,
    repo_dirs: tuple[str, ...],
    prescan: BuiltImage,
    tag: str,
    inputs: str,
) -> BuiltImage:
    """Scan ``prescan``; build ``tag`` clean or fixed (see the module doc), or raise `LeakRefused`."""
    started = time.monotonic()
    who = instance.instance_id
    evidence_json = evidence(instance, clone, repo_dirs)
    scanned = client.images.get(prescan.tag).id  # by id: a concurrent build of this instance may move the tags
    report = scan_image(client, scanned, evidence_json)
    hits = report["hit_paths"]
    if report["hit_count"] > len(hits):
        raise LeakRefused(f"{who}: refused: {report['hit_count']} files of the image hold the fixed code")
    inside = [path for path in hits if _in_repo(path, repo_dirs)]
    if inside:
        raise LeakRefused(
            f"{who}: refused: the repository in the image holds the fixed code outside its base tree "
            f"({_listing(inside)}): its git objects or files the build added; the agent could read the answer"
        )
    removed = sorted(set(hits) | set(report["companions"]))
    if hits:
        log.warning("%s: the fixed code is readable in the image at %s: removing it", who, _listing(hits))
        fixed = _layer(client, scanned, tag, f"unverified-{inputs}", removed, {})
        fixed_id = client.images.get(fixed.tag).id
        again = scan_image(client, fixed_id, evidence_json)
        if again["hit_paths"]:
            _drop(client, tag)
            raise LeakRefused(
                f"{who}: refused: the fixed code is still readable after removing {len(removed)} files "
                f"({_listing(again['hit_paths'])})"
            )
        ok, err = _imports(client, fixed_id, _modules(instance))
        if not ok and _imports(client, scanned, _modules(instance))[0]:
            _drop(client, tag)
            raise LeakRefused(
                f"{who}: refused: the fixed code is readable at {_listing(hits)}, and removing it breaks "
                f"`import pytest` / the patched modules: {err.strip()[-300:]}"
            )
        base, action = fixed_id, "fixed"
    else:
        base, action = scanned, "clean"
    scan = _label(report, action, removed)
    built = _layer(client, base, tag, inputs, [], {LABEL: json.dumps(scan)})
    _drop(client, prescan.tag)  # an untag: the instance image is built on it
    seconds = time.monotonic() - started
    log.info("%s: %s", who, note(scan))
    return BuiltImage(built.tag, inputs, True, prescan.seconds + seconds, note(scan))


def _drop(client: docker.DockerClient, tag: str) -> None:
    try:
        client.images.remove(tag, noprune=True)
    except docker.errors.APIError as exc:
        log.debug("could not untag %s: %s", tag, exc)
