"""``python -m gym tasks build-swe``: shipped specs -> local clones + ``instances.jsonl``.

For each package (``owner__name`` clone under ``tasks/swe/repos/``):

1. ``pip download --no-deps --no-binary :all: NAME==VER`` fetches the sdist
   (cached under ``.cache/swe/sdists``); it is unpacked without its top
   directory and without generated ``*.egg-info``, and committed on ``main``;
2. per spec, on branch ``instance/<id>``: the injections make the *base*
   commit (the bug), then the original lines plus our tests make the *fix*
   commit, the future an agent must not see;
3. ``patch`` = the source part of ``git diff base fix``, ``test_patch`` = the
   test-file part.

Commits are deterministic (`tasks.swe.repository`), so a rebuild reproduces the
same ``base_commit`` ids. Nothing third-party is committed to this repository:
both outputs are git-ignored.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from tasks.swe import repository
from tasks.swe.instance import SdistSource, SweInstance
from tasks.swe.spec import InstanceSpec, SpecError

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPOS_DIR = ROOT / "tasks/swe/repos"
DEFAULT_OUT = ROOT / "tasks/swe/instances.jsonl"
DEFAULT_CACHE = ROOT / ".cache/swe"
MARKER = "gym-build-swe"  # file in .git of clones this module made (and may therefore replace)
SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".zip")


def fetch_sdist(package: str, version: str, cache: Path = DEFAULT_CACHE) -> Path:
    """The sdist archive of ``package==version`` (pip download into the cache on first use)."""
    folder = cache / "sdists" / f"{package}-{version}"
    found = [p for p in folder.glob("*") if p.name.endswith(SDIST_SUFFIXES)] if folder.exists() else []
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        log.info("downloading the sdist of %s==%s", package, version)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(folder),
            f"{package}=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = [p for p in folder.glob("*") if p.name.endswith(SDIST_SUFFIXES)]
        if proc.returncode != 0 or not found:
            raise SpecError(f"pip could not download the sdist of {package}=={version}: {proc.stderr[-1500:]}")
    if len(found) > 1:
        raise SpecError(f"{folder} holds several archives: {[p.name for p in found]}")
    return found[0]


def unpack_sdist(archive: Path, dest: Path) -> None:
    """Unpack without the archive's top directory and without generated ``*.egg-info`` folders."""
    with tempfile.TemporaryDirectory() as tmp:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zipped:
                zipped.extractall(tmp)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        tops = list(Path(tmp).iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise SpecError(f"{archive.name}: expected one top directory, found {[t.name for t in tops]}")
        dest.mkdir(parents=True, exist_ok=True)
        for item in tops[0].iterdir():
            shutil.move(str(item), dest / item.name)
    for egg_info in list(dest.rglob("*.egg-info")):
        if egg_info.is_dir():
            shutil.rmtree(egg_info)


def _fresh_clone_dir(clone: Path) -> None:
    if clone.exists():
        if not (clone / ".git" / MARKER).exists():
            raise SpecError(f"{clone} exists and was not made by build-swe; move it away or pick another --repos-dir")
        shutil.rmtree(clone)


def _instance(spec: InstanceSpec, clone: Path) -> SweInstance:
    """Commit the spec's base and fix on its own branch; derive the patches by diffing."""
    repository.git("checkout", "-q", "-B", f"instance/{spec.instance_id}", "main", cwd=clone)
    original: dict[str, str] = {}
    for injection in spec.injections:
        target = clone / injection.path
        if not target.is_file():
            raise SpecError(f"{spec.instance_id}: injection target {injection.path} is not in the sdist")
        text = target.read_text()
        original.setdefault(injection.path, text)
        try:
            target.write_text(injection.apply(text))
        except SpecError as err:
            raise SpecError(f"{spec.instance_id}: {err}") from err
    base = repository.commit_all(clone, f"{spec.instance_id}: base")
    for path, text in original.items():
        (clone / path).write_text(text)
    for addition in spec.tests:
        target = clone / addition.path
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text().rstrip("\n") + "\n\n\n" if target.exists() else ""
        target.write_text(existing + addition.append)
    fix = repository.commit_all(clone, f"{spec.instance_id}: fix")
    test_paths = [addition.path for addition in spec.tests]
    patch = repository.diff(clone, base, fix, exclude=test_paths)
    test_patch = repository.diff(clone, base, fix, paths=test_paths)
    if not patch.strip():
        raise SpecError(f"{spec.instance_id}: the injections change nothing")
    return SweInstance(
        instance_id=spec.instance_id,
        repo=spec.repo,
        base_commit=base,
        patch=patch,
        test_patch=test_patch,
        problem_statement=spec.problem_statement,
        hints_text=spec.hints_text,
        version=spec.version,
        FAIL_TO_PASS=spec.fail_to_pass,
        PASS_TO_PASS=spec.pass_to_pass,
        environment_setup_commit=base,
        source=SdistSource(package=spec.package, version=spec.version),
        install=spec.install,
        test_cmd=spec.test_cmd,
    )


def build_clone(specs: list[InstanceSpec], repos_dir: Path, cache: Path = DEFAULT_CACHE) -> list[SweInstance]:
    """One package's clone with a branch per spec; all ``specs`` must share repo, package and version."""
    first = specs[0]
    if any((s.repo, s.package, s.version) != (first.repo, first.package, first.version) for s in specs):
        raise SpecError(f"specs of {first.repo} disagree on the package or version")
    clone = Path(repos_dir) / first.repo.replace("/", "__")
    _fresh_clone_dir(clone)
    archive = fetch_sdist(first.package, first.version, cache)
    unpack_sdist(archive, clone)
    repository.init(clone)
    (clone / ".git" / MARKER).write_text(f"{first.package}=={first.version}\n")
    repository.commit_all(clone, f"Import {first.package} {first.version} from its sdist ({archive.name})")
    instances = [_instance(spec, clone) for spec in specs]
    repository.git("checkout", "-q", "main", cwd=clone)
    return instances


def build_shipped(
    specs: list[InstanceSpec],
    repos_dir: Path = DEFAULT_REPOS_DIR,
    out: Path = DEFAULT_OUT,
    cache: Path = DEFAULT_CACHE,
) -> list[SweInstance]:
    """Build every spec's clone and write ``out`` (JSON Lines in the published schema)."""
    by_repo: dict[str, list[InstanceSpec]] = {}
    for spec in specs:
        by_repo.setdefault(spec.repo, []).append(spec)
    instances: list[SweInstance] = []
    for repo, group in sorted(by_repo.items()):
        log.info("building %s (%d instances)", repo, len(group))
        instances.extend(build_clone(group, repos_dir, cache))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(instance.row()) + "\n" for instance in instances))
    return instances


def shipped_instance(instance: SweInstance, repos_dir: Path, cache: Path = DEFAULT_CACHE) -> Path:
    """The clone of a shipped (sdist) instance, rebuilt from its spec when missing; checks ``base_commit``."""
    from tasks.swe.spec import load_specs

    clone = Path(repos_dir) / instance.clone_name
    if not clone.exists():
        specs = [s for s in load_specs() if s.repo == instance.repo]
        if not any(s.instance_id == instance.instance_id for s in specs):
            raise SpecError(f"{instance.instance_id}: no shipped spec, and no clone at {clone}")
        build_clone(specs, repos_dir, cache)
    try:
        repository.rev_parse(clone, instance.base_commit)
    except repository.GitError as err:
        raise SpecError(f"{instance.instance_id}: base_commit {instance.base_commit} is not in {clone}") from err
    return clone
