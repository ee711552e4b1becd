"""A small repository whose fix is planted in its own image, in every form: the attacks on the leak scan.

``leakdemo`` holds one function with an off-by-one bug; the gold patch fixes it with two distinctive
lines. Its ``setup.py`` runs ``plant.py`` when pip installs the repository inside the image build
(never on the host, where ``pip download`` reads the same ``setup.py``): ``plant.json`` names the forms
to plant and carries the fixed module zlib- and base64-encoded, so nothing in the base tree reads as
the fix. Every variant shares ``setup.py`` (the environment image is built once).
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from tasks.swe import repository
from tasks.swe.instance import SweInstance

PREFIX = "gymleaktest"  # every instance id, clone and image tag of these tests starts with it

BASE_CORE = '''"""Window helpers."""


def window_sums(values, width):
    """Sums of every window of ``width`` consecutive values."""
    sums = []
    for start in range(len(values) - width):
        sums.append(sum(values[start : start + width]))
    return sums


def window_means(values, width):
    return [total / width for total in window_sums(values, width)]
'''
FIXED_CORE = '''"""Window helpers."""


def window_sums(values, width):
    """Sums of every window of ``width`` consecutive values."""
    if width <= 0:
        raise ValueError("window width must be positive, got %r" % width)
    sums = []
    for start in range(len(values) - width + 1):
        sums.append(sum(values[start : start + width]))
    return sums


def window_means(values, width):
    return [total / width for total in window_sums(values, width)]
'''
FIXED_LINE = "for start in range(len(values) - width + 1):"  # what an agent would grep for
FIXED_NEEDLE = "range(len(values)-width+1)"  # ... whitespace deleted

# A gold patch with nothing distinctive in it: blank lines, pass, return None, a lone bracket, an import.
TRIVIAL_BASE = '''"""Window helpers."""


def window_sums(values, width):
    return [sum(values[start : start + width]) for start in range(len(values) - width + 1)]


def nothing():
    return (
        None
    )
'''
TRIVIAL_FIXED = '''"""Window helpers."""
import os


def window_sums(values, width):
    return [sum(values[start : start + width]) for start in range(len(values) - width + 1)]



def nothing():
    pass
    return None


def other():
    return (
        None
    )
'''

SETUP_PY = """import os
import runpy

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE == "/workspace/repo" and os.path.isdir("/opt/swe/wheels"):  # the image build, never the host
    runpy.run_path(os.path.join(HERE, "plant.py"))
setup(name="leakdemo", version="1.0", packages=["leakdemo"])
"""

PLANT_PY = r'''"""Plant the fixed module in the image, in the forms plant.json names (run by setup.py as root)."""
import base64, bz2, difflib, gzip, importlib.util, io, json, lzma, marshal, os, subprocess, tarfile, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("PLANT_ROOT", "")  # the unit tests plant into a folder standing for the image


def at(path):
    return ROOT + path


def chmod_root():
    os.makedirs(at("/root"), exist_ok=True)
    os.chmod(at("/root"), 0o755)
CONFIG = json.load(open(os.path.join(HERE, "plant.json")))
FIXED = __import__("zlib").decompress(base64.b64decode(CONFIG["fixed"])).decode()
BASE = open(os.path.join(HERE, "leakdemo", "core.py")).read()


def write(path, data, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def zipped(members, method=zipfile.ZIP_DEFLATED):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tarred(members, mode="w"):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pyc(source, name):
    code = compile(source.replace("Sums of every window", "Window totals"), name, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + b"\0" * 8 + marshal.dumps(code)


def git(*args, cwd):
    identity = ["-c", "user.name=leak", "-c", "user.email=leak@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True)


def respaced(text):
    """The fix re-indented and re-wrapped (written without the fixed lines: plant.py is in the base tree)."""
    text = text.replace("- width + 1", " -  width  + 1 ")
    return text.replace("ValueError(", "ValueError(\n            ").replace(" % width", "\n            % width\n        ")


PATCH = "".join(difflib.unified_diff(
    BASE.splitlines(True), FIXED.splitlines(True), "a/leakdemo/core.py", "b/leakdemo/core.py"
))
WHEEL = zipped({"leakdemo/__init__.py": "", "leakdemo/core.py": FIXED, "leakdemo-2.0.dist-info/METADATA": "Name: x\n"})

FORMS = {
    "vendored": lambda: write(at("/usr/lib/python3/dist-packages/leakdemo_vendored/core.py"), FIXED),
    "site": lambda: write(at("/usr/local/lib/python3.11/dist-packages/leakdemo_copy/core.py"), FIXED.replace("    ", "\t")),
    "opt": lambda: write(at("/opt/leakdemo/core_fixed.py"), respaced(FIXED)),
    "root": lambda: (chmod_root(), write(at("/root/notes.py"), FIXED)),
    "diff": lambda: write(at("/usr/share/doc/leakdemo/fix.diff"), PATCH),
    "gzip": lambda: write(at("/var/tmp/core.py.gz"), gzip.compress(FIXED.encode())),
    "bzip2": lambda: write(at("/var/tmp/core.py.bz2"), bz2.compress(FIXED.encode())),
    "xz": lambda: write(at("/var/tmp/core.py.xz"), lzma.compress(FIXED.encode())),
    "tmp": lambda: write(at("/tmp/core.py.gz"), gzip.compress(FIXED.encode())),
    "wheel": lambda: write(at("/opt/leakdemo/leakdemo-2.0-py3-none-any.whl"), WHEEL),
    "egg": lambda: write(at("/opt/leakdemo/leakdemo-2.0-py3.11.egg"), zipped({"leakdemo/core.pyc": pyc(FIXED, "core.py")})),
    "nested": lambda: write(at("/opt/leakdemo/bundle.zip"), zipped({
        "leakdemo-2.0.tar.gz": tarred({"leakdemo-2.0/leakdemo/core.py": FIXED}, "w:gz")
    })),
    "tar": lambda: write(at("/var/backups/leakdemo.tar"), tarred({"leakdemo/core.py": FIXED})),
    "pyc": lambda: write(at("/usr/local/lib/python3.11/dist-packages/leakdemo_compiled.pyc"), pyc(FIXED, "elsewhere.py")),
    "pip-cache": lambda: (chmod_root(), write(
        at("/root/.cache/pip/http/9/a/3/1/c/9a31c0ffee"), b"cc=4,\x83\xa8response\xda" + WHEEL + b"\xa4vary\x80"
    )),
    "git": lambda: plant_git(at("/srv/leakdemo-src")),
    "black": lambda: write(at("/opt/leakdemo/core_black.py"), reformatted(FIXED)),
    "lzma": lambda: write(at("/var/tmp/core.py.lzma"), lzma.compress(FIXED.encode(), lzma.FORMAT_ALONE)),
    "names": lambda: plant_names(at("/opt/leakdemo/names")),
    "xattr": lambda: plant_xattr(at("/opt/leakdemo/notes.txt")),
    "repo-git": lambda: plant_repo_commit(HERE),
    "repo-build": lambda: write(os.path.join(HERE, "build", "lib", "leakdemo", "core.py"), FIXED),
    "pytest": lambda: append_to_pytest(),
}


def reformatted(text):
    """Another formatter's output: single quotes, the call exploded with a magic trailing comma."""
    quoted = '"window width must be positive, got %r" % width'
    return text.replace(quoted, "\n            " + quoted.replace('"', "'") + ",\n        ")


def plant_names(where):
    """The fixed lines as file names (an agent reads them with ls)."""
    os.makedirs(where, exist_ok=True)
    for line in FIXED.splitlines():
        if "width" in line and "/" not in line and line.strip():
            write(os.path.join(where, line.strip()), "")


def plant_xattr(path):
    write(path, "notes\n")
    os.setxattr(path, "user.fix", FIXED.encode())


def plant_git(where):
    if os.path.isdir(os.path.join(where, ".git")):
        return
    os.makedirs(os.path.join(where, "leakdemo"))
    git("init", "-q", "-b", "main", cwd=where)
    write(os.path.join(where, "leakdemo", "core.py"), BASE)
    git("add", "-A", cwd=where)
    git("commit", "-qm", "base", cwd=where)
    write(os.path.join(where, "leakdemo", "core.py"), FIXED)
    git("commit", "-qam", "fix the window count", cwd=where)
    git("gc", "-q", "--aggressive", cwd=where)
    subprocess.run(["chmod", "-R", "a+rX", where], check=True)


def plant_repo_commit(repo):
    """The future in the repository's own .git: a commit of the fix on another ref (the work tree untouched)."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=FIXED.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    env = dict(os.environ, GIT_INDEX_FILE="/tmp/plant-index")
    subprocess.run(["git", "read-tree", "HEAD"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "update-index", "--cacheinfo", f"100644,{blob},leakdemo/core.py"], cwd=repo, env=env,
                   check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, check=True).stdout.strip()
    commit = subprocess.run(["git", "-c", "user.name=leak", "-c", "user.email=leak@localhost", "commit-tree",
                             tree.decode(), "-p", "HEAD", "-m", "fix"], cwd=repo,
                            capture_output=True, check=True).stdout.decode().strip()
    subprocess.run(["git", "update-ref", "refs/heads/future", commit], cwd=repo, check=True)


def append_to_pytest():
    path = at("/usr/local/lib/python3.11/dist-packages/_pytest/__init__.py")
    text = open(path).read()
    if "window_sums" not in text:
        write(path, text + "\n\n" + FIXED.replace("def window_", "def _leak_window_"))


for form in CONFIG["forms"]:
    FORMS[form]()
'''

# Each plant: where it lands, and whether the agent's container shows it (/tmp and /workspace are tmpfs there).
PLANTS = {
    "vendored": "/usr/lib/python3/dist-packages/leakdemo_vendored/core.py",
    "site": "/usr/local/lib/python3.11/dist-packages/leakdemo_copy/core.py",
    "opt": "/opt/leakdemo/core_fixed.py",
    "root": "/root/notes.py",
    "diff": "/usr/share/doc/leakdemo/fix.diff",
    "gzip": "/var/tmp/core.py.gz",
    "bzip2": "/var/tmp/core.py.bz2",
    "xz": "/var/tmp/core.py.xz",
    "tmp": "/tmp/core.py.gz",
    "wheel": "/opt/leakdemo/leakdemo-2.0-py3-none-any.whl",
    "egg": "/opt/leakdemo/leakdemo-2.0-py3.11.egg",
    "nested": "/opt/leakdemo/bundle.zip",
    "tar": "/var/backups/leakdemo.tar",
    "pyc": "/usr/local/lib/python3.11/dist-packages/leakdemo_compiled.pyc",
    "pip-cache": "/root/.cache/pip/http/9/a/3/1/c/9a31c0ffee",
    "git": "/srv/leakdemo-src/.git/objects/pack/pack-*.pack",
    "black": "/opt/leakdemo/core_black.py",
    "lzma": "/var/tmp/core.py.lzma",
    "names": "/opt/leakdemo/names/for?start*",  # the fixed line's file; names of other lines stay
    "xattr": "/opt/leakdemo/notes.txt",
}
HIDDEN_AT_RUN_TIME = frozenset({"tmp"})
# Docker 20.10's overlay2 builds keep no user extended attribute in a layer: planted, the xattr never reaches the
# image there (the scan reads them all the same: tests/unit/test_swe_leak_scan.py).
LOST_IN_LAYERS = frozenset({"xattr"})

TEST_FILE = "tests/test_core.py"
TESTS = (
    "from leakdemo.core import window_sums\n\n\ndef test_windows():\n    assert window_sums([1, 2, 3], 2) == [3, 5]\n"
)


def clone(repos_dir: Path, name: str, base: str, fixed: str, forms: list[str]) -> SweInstance:
    """A local clone ``repos_dir/PREFIX__name`` (base and fix commits) and its instance."""
    repo = f"{PREFIX}/{name}"
    path = Path(repos_dir) / repo.replace("/", "__")
    repository.init(path)
    files = {
        "setup.py": SETUP_PY,
        "plant.py": PLANT_PY,
        "plant.json": json.dumps(
            {"forms": forms, "fixed": base64.b64encode(zlib.compress(FIXED_CORE.encode())).decode()}
        ),
        "leakdemo/__init__.py": "",
        "leakdemo/core.py": base,
        TEST_FILE: TESTS,
    }
    for relative, text in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    base_commit = repository.commit_all(path, "base")
    (path / "leakdemo/core.py").write_text(fixed)
    (path / TEST_FILE).write_text(TESTS + "\n\ndef test_full_window():\n    assert window_sums([1], 1) == [1]\n")
    fix_commit = repository.commit_all(path, "fix")
    return SweInstance.model_validate(
        {
            "instance_id": f"{PREFIX}__{name}-1",
            "repo": repo,
            "base_commit": base_commit,
            "patch": repository.diff(path, base_commit, fix_commit, exclude=[TEST_FILE]),
            "test_patch": repository.diff(path, base_commit, fix_commit, paths=[TEST_FILE]),
            "problem_statement": "window_sums misses the last window",
            "FAIL_TO_PASS": [f"{TEST_FILE}::test_full_window"],
            "PASS_TO_PASS": [f"{TEST_FILE}::test_windows"],
            "install": ["pytest==8.3.4"],
        }
    )


# Run in the agent's workspace (uid 1000): which planted forms still show the fixed code, decoded as an agent would.
PROBE = r"""
import bz2, gzip, io, json, lzma, marshal, os, re, subprocess, sys, tarfile, zipfile
NEEDLE = sys.argv[1]
FIXED = sys.argv[2]
def has(data):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return NEEDLE in re.sub(r"\s+", "", text)
def code_of(module_code, name):
    for const in module_code.co_consts:
        if getattr(const, "co_name", None) == name:
            return const
def same_code(blob):
    fixed = code_of(compile(FIXED, "x", "exec"), "window_sums")
    found = code_of(marshal.loads(blob[16:]), "window_sums")
    return found is not None and found.co_code == fixed.co_code and found.co_consts[1:] == fixed.co_consts[1:]
def zip_member(path, member):
    return zipfile.ZipFile(path).read(member)
def read(path):
    return open(path, "rb").read()
CHECKS = {
    "vendored": lambda: has(read("/usr/lib/python3/dist-packages/leakdemo_vendored/core.py")),
    "site": lambda: has(read("/usr/local/lib/python3.11/dist-packages/leakdemo_copy/core.py")),
    "opt": lambda: has(read("/opt/leakdemo/core_fixed.py")),
    "root": lambda: has(read("/root/notes.py")),
    "diff": lambda: has(read("/usr/share/doc/leakdemo/fix.diff")),
    "gzip": lambda: has(gzip.decompress(read("/var/tmp/core.py.gz"))),
    "bzip2": lambda: has(bz2.decompress(read("/var/tmp/core.py.bz2"))),
    "xz": lambda: has(lzma.decompress(read("/var/tmp/core.py.xz"))),
    "tmp": lambda: has(gzip.decompress(read("/tmp/core.py.gz"))),
    "wheel": lambda: has(zip_member("/opt/leakdemo/leakdemo-2.0-py3-none-any.whl", "leakdemo/core.py")),
    "egg": lambda: same_code(zip_member("/opt/leakdemo/leakdemo-2.0-py3.11.egg", "leakdemo/core.pyc")),
    "nested": lambda: has(tarfile.open(fileobj=io.BytesIO(zip_member("/opt/leakdemo/bundle.zip",
        "leakdemo-2.0.tar.gz"))).extractfile("leakdemo-2.0/leakdemo/core.py").read()),
    "tar": lambda: has(tarfile.open("/var/backups/leakdemo.tar").extractfile("leakdemo/core.py").read()),
    "pyc": lambda: same_code(read("/usr/local/lib/python3.11/dist-packages/leakdemo_compiled.pyc")),
    "pip-cache": lambda: has(zipfile.ZipFile(io.BytesIO(read("/root/.cache/pip/http/9/a/3/1/c/9a31c0ffee")[
        read("/root/.cache/pip/http/9/a/3/1/c/9a31c0ffee").index(b"PK"):])).read("leakdemo/core.py")),
    "git": lambda: has(subprocess.run(["git", "-C", "/srv/leakdemo-src", "log", "--all", "-p"],
        capture_output=True).stdout),
    "black": lambda: has(read("/opt/leakdemo/core_black.py")),
    "lzma": lambda: has(lzma.decompress(read("/var/tmp/core.py.lzma"))),
    "names": lambda: has("".join(os.listdir("/opt/leakdemo/names"))),
    "xattr": lambda: has(os.getxattr("/opt/leakdemo/notes.txt", "user.fix")),
    "repo-git": lambda: has(subprocess.run(["git", "-C", "/workspace/repo", "log", "--all", "-p"],
        capture_output=True).stdout),
    "pytest": lambda: has(read("/usr/local/lib/python3.11/dist-packages/_pytest/__init__.py")),
}
seen = {}
for form in sys.argv[3:]:
    try:
        seen[form] = bool(CHECKS[form]())
    except Exception as exc:  # gone, unreadable, not an archive any more: the fix is not readable this way
        seen[form] = False
print(json.dumps(seen))
"""
