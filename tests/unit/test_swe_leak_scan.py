"""The leak scan on a folder standing for an image: every form of the planted fix is found, honest files are not.

The forms are planted by the same ``plant.py`` the integration tests run inside a real image build
(`tests/swe_leak_support.py`), here under ``PLANT_ROOT``; the scanner runs on the host's interpreter.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import json
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from tasks.swe import leak_guard, leak_scan, repository
from tests import swe_leak_support as demo

ALL_FORMS = [*demo.PLANTS, "repo-git", "repo-build"]


class Image:
    """A folder laid out like an instance image: the base tree at workspace/repo, the evidence for it."""

    def __init__(self, tmp: Path, base: str = demo.BASE_CORE, fixed: str = demo.FIXED_CORE, name: str = "demo"):
        self.instance = demo.clone(tmp / "repos", name, base, fixed, [])
        self.clone = tmp / "repos" / self.instance.clone_name
        self.root = tmp / "root"
        self.repo = self.root / "workspace/repo"
        repository.snapshot(self.clone, self.instance.base_commit, self.repo)
        self.evidence = leak_guard.evidence(self.instance, self.clone, (str(self.repo),))

    def plant(self, *forms: str) -> None:
        config = json.loads((self.repo / "plant.json").read_text())
        (self.repo / "plant.json").write_text(json.dumps({**config, "forms": list(forms)}))
        os.environ["PLANT_ROOT"] = str(self.root)
        try:
            runpy.run_path(str(self.repo / "plant.py"))
        finally:
            del os.environ["PLANT_ROOT"]
        (self.repo / "plant.json").write_text(json.dumps(config))  # back to the base tree's bytes

    def write(self, path: str, data: bytes | str) -> Path:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        return target

    def scan(self) -> dict:
        return leak_scan.scan(leak_scan.Evidence.from_json(self.evidence), str(self.root)).as_json()

    def hits(self) -> list[str]:
        return ["/" + os.path.relpath(path, self.root) for path in self.scan()["hit_paths"]]


@pytest.fixture
def image(tmp_path) -> Image:
    return Image(tmp_path)


# ---------------------------------------------------------------- evidence


def test_the_evidence_is_the_distinctive_added_lines(image):
    (hunk,) = image.evidence["hunks"]
    assert hunk["units"] == [
        ['raiseValueError("windowwidthmustbepositive,got%r"%width)'],
        ["forstartinrange(len(values)-width+1):"],
    ]  # `if width <= 0:` is too short to be evidence alone
    assert hunk["need"] == 2
    assert list(image.evidence["fixed_sources"]) == ["leakdemo/core.py"]
    assert "window_sums([1, 2, 3], 2)" in (image.repo / demo.TEST_FILE).read_text()
    assert set(image.evidence["tracked"]) >= {"setup.py", "plant.py", "leakdemo/core.py"}


def test_lines_the_repository_or_the_standard_library_already_hold_are_not_evidence():
    known_in_repo = leak_scan.normalize(b"    total = compute_the_total(values)")
    hunk = leak_guard.Hunk(
        "x.py @@ -1 +1,6 @@",
        (
            ("def f(values):", False),
            ("    total = compute_the_total(values)", True),  # already in the repository
            ("    raise NotImplementedError()", True),  # in the standard library
            ("    from collections import OrderedDict", True),  # an import
            ("    return None", True),  # too short
            ("    )", True),
            ("    return total_of_every_window_in_order(values)", True),
        ),
    )
    units = leak_guard.units_of(hunk, lambda unit: unit in known_in_repo or unit in leak_guard.stdlib_corpus())
    assert units == [(b"returntotal_of_every_window_in_order(values)",)]


def test_a_trivial_gold_patch_never_hits_ordinary_files(tmp_path):
    """Blank lines, pass, return None, a lone bracket and an import: no file of a Python install holds them
    in the patch's order, so the standard library copied into the image is clean."""
    image = Image(tmp_path, demo.TRIVIAL_BASE, demo.TRIVIAL_FIXED, "trivial")
    for hunk in image.evidence["hunks"]:
        for unit in hunk["units"]:
            assert len(unit) > 1, unit  # windows of context, never a trivial line alone
    stdlib = Path(sysconfig.get_path("stdlib"))
    for package in ("json", "email", "importlib", "unittest", "asyncio"):
        shutil.copytree(stdlib / package, image.root / "usr/lib/python3.11" / package)
    report = image.scan()
    assert report["files"] > 200 and report["hit_count"] == 0


def test_a_hunk_of_short_lines_is_found_by_its_window(tmp_path):
    base = demo.BASE_CORE.replace("    sums = []\n", "    if width < 0:\n        return []\n    sums = []\n")
    fixed = base.replace("if width < 0:", "if width <= 0:")
    image = Image(tmp_path, base, fixed, "short")
    (hunk,) = image.evidence["hunks"]
    assert len(hunk["units"]) == 1 and len(hunk["units"][0]) > 1  # `ifwidth<=0:` alone is too short
    image.write("/usr/lib/python3/dist-packages/old/core.py", base)  # the unpatched code vendored: no hit
    assert image.hits() == []
    image.write("/usr/lib/python3/dist-packages/new/core.py", fixed)
    assert image.hits() == ["/usr/lib/python3/dist-packages/new/core.py"]


# ---------------------------------------------------------------- forms


def test_the_base_tree_alone_is_clean(image):
    image.write("/usr/lib/python3/dist-packages/old/core.py", demo.BASE_CORE)  # the unpatched code elsewhere
    image.write("/usr/lib/python3/dist-packages/old/core.pyc", _pyc(demo.BASE_CORE))
    report = image.scan()
    assert report["hit_count"] == 0, report["hits"]
    assert report["base_files"] >= 4 and report["packs"] == 1  # the repository's own pack: base objects only
    assert report["units"] == 2 and report["fingerprints"] >= 1


@pytest.mark.parametrize("form", ALL_FORMS)
def test_every_planted_form_is_found(image, form):
    if form == "xattr" and not _user_xattrs(image.root):
        pytest.skip("this filesystem keeps no user extended attributes (the image's overlay does)")
    image.plant(form)
    hits = image.hits()
    if form == "repo-git":
        assert any(h.startswith("/workspace/repo/.git/objects/") for h in hits), hits
    elif form == "repo-build":
        assert hits == ["/workspace/repo/build/lib/leakdemo/core.py"]
    elif form == "git":
        assert any(fnmatch.fnmatch(h, demo.PLANTS["git"]) for h in hits), hits  # the pack; the work tree too
    elif form == "names":  # the two distinctive lines' files, and no other name
        assert len(hits) == 2 and all(h.startswith("/opt/leakdemo/names/") for h in hits), hits
        assert any(fnmatch.fnmatch(h, demo.PLANTS["names"]) for h in hits), hits
    else:
        assert hits == [demo.PLANTS[form]]


def _user_xattrs(folder: Path) -> bool:
    probe = folder / "xattr-probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.probe", b"1")
    except OSError:
        return False
    finally:
        probe.unlink()
    return True


def test_a_short_line_alone_is_no_hit_without_the_code_around_it(tmp_path):
    """A fixed line under 40 bytes occurs by chance in other code (`except (KeyError, IndexError):`): found
    alone it is no hit; with half the hunk's unchanged lines beside it (a copy of the code) it is."""
    fixed = demo.BASE_CORE.replace("    return sums\n", "    return list(sums)\n")
    image = Image(tmp_path, demo.BASE_CORE, fixed, "short-line")
    (hunk,) = image.evidence["hunks"]
    assert hunk["units"] == [["returnlist(sums)"]] and len(hunk["context"]) >= 2, hunk
    image.write("/usr/lib/python3/dist-packages/other/util.py", "def flatten(sums):\n    return list(sums)\n")
    assert image.hits() == []
    image.write("/usr/lib/python3/dist-packages/vendored/core.py", fixed)
    assert image.hits() == ["/usr/lib/python3/dist-packages/vendored/core.py"]


def test_a_fix_that_only_removes_a_line_is_found_by_the_lines_that_now_meet(tmp_path):
    """Nothing added: the lines either side of the removed one, matched exactly (the unpatched copy holds
    them with the 10-byte `sums.pop()` between, which a gapped match would skip)."""
    base = demo.BASE_CORE.replace("width]))\n", "width]))\n        sums.pop()\n")
    image = Image(tmp_path, base, demo.BASE_CORE, "removal")
    (hunk,) = image.evidence["hunks"]
    assert hunk["exact"] == 1 and hunk["units"] == [["sums.append(sum(values[start:start+width]))", "returnsums"]]
    image.write("/usr/lib/python3/dist-packages/old/core.py", base)
    assert image.hits() == []
    image.write("/usr/lib/python3/dist-packages/new/core.py", demo.BASE_CORE)
    assert image.hits() == ["/usr/lib/python3/dist-packages/new/core.py"]


def test_half_a_hunk_is_not_a_hit(image):
    image.write("/opt/half.py", "for start in range(len(values) - width + 1):\n")
    assert image.hits() == []
    image.write("/opt/whole.py", 'raise ValueError("window width must be positive, got %r" % width)\n')
    image.write("/opt/whole.py", (image.root / "opt/whole.py").read_text() + (image.root / "opt/half.py").read_text())
    assert image.hits() == ["/opt/whole.py"]


def test_a_diff_of_the_fix_is_found_by_a_window_with_markers_between_its_lines(tmp_path):
    base = demo.BASE_CORE.replace("    sums = []\n", "    if width < 0:\n        return []\n    sums = []\n")
    image = Image(tmp_path, base, base.replace("if width < 0:", "if width <= 0:"), "short")
    image.write("/root/fix.diff", image.instance.patch)
    assert image.hits() == ["/root/fix.diff"]


def test_a_changed_file_at_a_tracked_path_of_the_repository_is_scanned(image):
    (image.repo / "leakdemo/core.py").write_text(demo.FIXED_CORE)
    assert image.hits() == ["/workspace/repo/leakdemo/core.py"]


def test_bytecode_beside_a_hit_is_removed_with_it(image):
    source = image.write("/usr/lib/python3/dist-packages/vendored/core.py", demo.FIXED_CORE)
    image.write(
        "/usr/lib/python3/dist-packages/vendored/__pycache__/core.cpython-39.pyc", b"\x61\x0d\x0d\x0a" + b"0" * 40
    )
    report = image.scan()
    assert ["/" + os.path.relpath(p, image.root) for p in report["companions"]] == [
        "/usr/lib/python3/dist-packages/vendored/__pycache__/core.cpython-39.pyc"
    ]
    assert report["hit_paths"] == [str(source)]
    assert any("another Python" in why for why in report["partial"])  # reported, never parsed


# ---------------------------------------------------------------- what cannot be read, and the bounds


def test_what_cannot_be_read_is_reported(image):
    image.write("/opt/blob.zst", b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("secret.py", "x = 1\n")
    data = bytearray(buffer.getvalue())
    data[6] |= 1  # the local entry's "encrypted" flag
    image.write("/opt/locked.zip", bytes(data))
    report = image.scan()
    assert report["hit_count"] == 0
    assert any(p.endswith("blob.zst: zstd (not readable here)") for p in report["partial"])
    assert any(p.endswith("locked.zip!secret.py: encrypted zip entry") for p in report["partial"])


def test_a_decompression_bomb_stays_within_its_bounds(image, monkeypatch):
    monkeypatch.setattr(leak_scan, "NESTED_MAX", 1 << 20)
    monkeypatch.setattr(leak_scan, "STREAM_MAX", 8 << 20)
    image.write("/opt/bomb.gz", gzip.compress(b"\0" * (256 << 20), 1))  # 256 MiB of zeros in ~250 kB
    tracemalloc.start()
    started = time.monotonic()
    report = image.scan()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert any(p.endswith(f"stream over {8 << 20} bytes") for p in report["partial"]), report["partial"]
    assert report["unpacked_bytes"] <= 8 << 20
    assert peak < 64 << 20, peak  # what was kept: NESTED_MAX, one chunk and the overlap, never the stream
    assert time.monotonic() - started < 30


def test_text_past_the_kept_part_of_a_stream_is_still_read(image, monkeypatch):
    monkeypatch.setattr(leak_scan, "NESTED_MAX", 1 << 20)
    filler = b"# filler line of an honest file\n" * (3 << 16)  # 6 MiB before the fix
    image.write("/opt/late.py.gz", gzip.compress(filler + demo.FIXED_CORE.encode()))
    report = image.scan()
    assert ["/" + os.path.relpath(p, image.root) for p in report["hit_paths"]] == ["/opt/late.py.gz"]
    assert any("the rest read as text only" in p for p in report["partial"])


def test_fifos_and_links_are_not_followed(image, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "core.py").write_text(demo.FIXED_CORE)
    (image.root / "opt").mkdir(exist_ok=True)
    os.symlink(outside, image.root / "opt/elsewhere")
    os.symlink(outside / "core.py", image.root / "opt/core.py")
    os.mkfifo(image.root / "opt/pipe")
    assert image.hits() == []  # and the walk returned: the fifo was never opened


def test_nothing_to_look_for_only_counts_files(image):
    image.evidence = {**image.evidence, "hunks": [], "fixed_sources": {}}
    image.plant("vendored")
    report = image.scan()
    assert report["hit_count"] == 0 and report["files"] > 0 and report["unpacked_streams"] == 0


def test_the_scanner_runs_alone_under_an_isolated_interpreter(image, tmp_path):
    """As in the image: ``python3 -I -S -B leak_scan.py EVIDENCE [ROOT]``, standard library only."""
    image.plant("xz")
    folder = tmp_path / "scan"
    folder.mkdir()
    (folder / "evidence.json").write_text(json.dumps(image.evidence))
    script = shutil.copy(leak_scan.__file__, folder / "leak_scan.py")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(script), str(folder / "evidence.json"), str(image.root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["hit_paths"] == [str(image.root / "var/tmp/core.py.xz")]


# ---------------------------------------------------------------- pieces


def test_hunks_are_read_as_their_post_image():
    patch = (
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
        "@@ -10,1 +10,2 @@\n z = 1\n+w = 2\n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+n = 1\n"
        "diff --git a/img.png b/img.png\nGIT binary patch\nliteral 3\nKcmZ?wU|;|M0RR91\n\n"
    )
    found = leak_guard.hunks(patch)
    assert [h.name for h in found] == ["a.py @@ -1,2 +1,2 @@", "a.py @@ -10,1 +10,2 @@", "new.py @@ -0,0 +1 @@"]
    assert found[0].post == (("x = 1", False), ("y = 3", True)) and found[0].cuts == (1,)
    assert found[2].post == (("n = 1", True),)


def test_need_is_all_or_a_high_fraction():
    assert [leak_scan.need_of(n) for n in (1, 2, 3, 4, 5, 8, 10)] == [1, 2, 3, 4, 4, 7, 8]


def test_the_note_says_what_was_scanned_and_done():
    scan = {
        "files": 12079,
        "bytes": 300_574_223,
        "unpacked_bytes": 65_350_557,
        "unpacked_streams": 2823,
        "pyc": 1523,
        "packs": 2,
        "units": 1,
        "fingerprints": 2,
        "seconds": 3.6,
        "action": "fixed",
        "hits": 3,
        "removed": ["/usr/a.py", "/usr/a.pyc", "/usr/b.whl"],
        "removed_count": 3,
        "partial_count": 0,
        "partial": [],
    }
    text = leak_guard.note(scan)
    assert text.startswith("leak scan: 12,079 files, 300.6 MB (+65.4 MB unpacked from 2,823 streams")
    assert text.endswith("3 files held the fix, removed 3: /usr/a.py, /usr/a.pyc, /usr/b.whl")
    assert leak_guard.note({**scan, "action": "clean"}).endswith("3.6s: clean")


def _pyc(source: str) -> bytes:
    import importlib.util
    import marshal

    return importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(compile(source, "core.py", "exec"))
