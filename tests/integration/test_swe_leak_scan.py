"""The answer must not sit in the image (issue 41, class 3), in real image builds and the real sandbox.

Attacks: an instance whose install step plants its own fix across the image in every form
(`tests/swe_leak_support.py`: vendored, site-packages, /opt, /root, a diff, gzip/bzip2/xz, a wheel,
a sourceless egg, a zip of a tar.gz, a tar, a sourceless .pyc, a pip-cache entry, a git repository
with the fix commit packed), one that writes the fix into the repository's own git objects, one that
hides it inside pytest; and the shipped instance whose repository Debian's setuptools vendors
(more-itertools, the issue's example). What an agent could read is probed from inside a workspace
of the built image, as the sandbox user, decoding each form as an agent would.
Controls: the shipped instances build, their scan is reported, their gold patch still resolves;
a gold patch of trivial lines builds clean.

This module imports nothing the leak scan added, so it runs against the code before it too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import docker
import pytest
import trio

from images.inputs import ImageBuildError
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.swe.evaluation import grading_sandbox
from tasks.swe.grader import SweGrader, grade_predictions, instance_sandbox
from tasks.swe.images import build_env, build_instance_image, build_swe_base, docker_client
from tasks.swe.workspace import prepare
from tests import swe_leak_support as demo
from tests.swe_support import images, shipped

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

LABEL = "gym.swe.leak_scan"
IN_IMAGE = [form for form in demo.PLANTS if form not in demo.LOST_IN_LAYERS]
VISIBLE = [form for form in IN_IMAGE if form not in demo.HIDDEN_AT_RUN_TIME]
MORE_ITERTOOLS = "more-itertools__more-itertools-gym-1"
MORE_ITERTOOLS_FIX = "max(0, len(iterable) - n)"


_ENVS: set[str] = set()  # environment images these tests built (their setup.py is the demo's)


@pytest.fixture(scope="module")
def client():
    client = docker_client()
    yield client
    mine = [
        tag for image in client.images.list() for tag in image.tags if tag.split(":", 1)[-1].startswith(demo.PREFIX)
    ]
    for tag in [*mine, *sorted(_ENVS)]:  # every image these tests built, and nothing else
        try:
            client.images.remove(tag, force=True)
        except docker.errors.APIError:
            pass
    client.close()


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return tmp_path_factory.mktemp("leak-repos")


def build(client, repos, name: str, forms: list[str], base: str = demo.BASE_CORE, fixed: str = demo.FIXED_CORE):
    """The instance's image through the real build (its install step plants ``forms``)."""
    instance = demo.clone(repos, name, base, fixed, forms)
    clone = repos / instance.clone_name
    _ENVS.add(build_env(client, build_swe_base(client), instance, clone).tag)
    return instance, build_instance_image(client, instance, repos)


def probe(tag: str, instance, forms: list[str]) -> dict[str, bool]:
    """Which forms show the fix to an agent: a workspace of ``tag``, the sandbox user, the probe program."""
    sandbox = instance_sandbox(grading_sandbox(None), tag)

    async def main():
        async with WorkspacePool(sandbox, gc_at_start=False) as pool:
            async with pool.acquire("pytest-leak-probe") as ws:
                await prepare(ws, instance)
                argv = ["python3", "-c", demo.PROBE, demo.FIXED_NEEDLE, demo.FIXED_CORE, *forms]
                result = await ws.exec(ExecRequest(argv=argv, cwd="/workspace", timeout_s=120))
                assert result.exit_code == 0, result.stderr_text
                return json.loads(result.stdout_text)

    return trio.run(main)


def as_root(client, tag: str, script: str) -> str:
    """What the image holds, read as root (beyond the agent's view: /tmp is a fresh tmpfs in a workspace)."""
    return client.containers.run(tag, ["sh", "-c", script], remove=True, network_disabled=True, user="0").decode()


def scan_of(client, tag: str) -> dict | None:
    text = (client.images.get(tag).labels or {}).get(LABEL)
    return json.loads(text) if text else None


# ---------------------------------------------------------------- every form, planted by the install step


@pytest.fixture(scope="module")
def planted(client, repos):
    instance, built = build(client, repos, "planted", IN_IMAGE)
    return instance, built, probe(built.tag, instance, VISIBLE)


@pytest.mark.parametrize("form", VISIBLE)
def test_a_planted_copy_is_not_readable_in_the_agents_workspace(planted, form):
    _, _, seen = planted
    assert seen[form] is False, f"the agent reads the fix from {demo.PLANTS[form]} ({form})"


def test_the_image_holds_no_planted_copy_and_the_build_says_so(client, planted):
    _, built, _ = planted
    paths = [demo.PLANTS[form] for form in IN_IMAGE]
    script = " ".join(f'for f in {path}; do test -e "$f" && echo "$f"; done;' for path in paths)
    listing = as_root(client, built.tag, script + " true")
    assert listing.split() == []  # /tmp's copy too, which a workspace hides under its tmpfs
    scan = scan_of(client, built.tag)
    assert scan is not None and scan["action"] == "fixed", scan
    assert scan["hits"] >= len(IN_IMAGE) and scan["units"] == 2 and scan["fingerprints"] >= 1
    assert "removed" in built.layers[-1].note and "leak scan:" in built.layers[-1].note


def test_the_fixed_image_still_grades_the_gold_patch_resolved(planted):
    instance, built, _ = planted

    async def main():
        async with WorkspacePool(instance_sandbox(grading_sandbox(None), built.tag), gc_at_start=False) as pool:
            return await SweGrader().grade(pool, instance, instance.patch)

    result = trio.run(main)
    assert result.resolved, result.detail


# ---------------------------------------------------------------- refused: the repository itself, pytest itself


def test_the_fix_in_the_repositorys_own_git_objects_is_refused(client, repos):
    """A commit of the fix on another ref of the image's repository: `git log --all -p` would show it."""
    try:
        instance, built = build(client, repos, "repo", ["repo-git", "repo-build"])
    except ImageBuildError as err:
        assert "refused" in str(err) and "repository in the image holds the fixed code" in str(err), err
        return
    seen = probe(built.tag, instance, ["repo-git"])
    pytest.fail(f"built, and the agent reads the fix with git log --all -p: {seen}")


def test_a_fix_that_would_break_pytest_is_refused(client, repos):
    """The fix appended to pytest's own package: removing that file breaks `import pytest`, so no image."""
    try:
        instance, built = build(client, repos, "pytest", ["pytest"])
    except ImageBuildError as err:
        assert "refused" in str(err) and "breaks `import pytest`" in str(err), err
        return
    seen = probe(built.tag, instance, ["pytest"])
    pytest.fail(f"built, and the agent reads the fix in _pytest/__init__.py: {seen}")


# ---------------------------------------------------------------- the example, and the shipped instances


def test_the_vendored_more_itertools_is_gone_from_its_workspace():
    """Debian's pkg_resources vendors more_itertools with the fixed `tail` (and python-wheels' setuptools wheel)."""
    instance = shipped()[MORE_ITERTOOLS]
    script = (
        f"grep -rlF '{MORE_ITERTOOLS_FIX}' /usr /opt /etc /var /srv /root 2>/dev/null; "
        "python3 - <<'EOF'\n"
        "import glob, zipfile\n"
        "for wheel in glob.glob('/usr/share/python-wheels/*.whl'):\n"
        "    for name in zipfile.ZipFile(wheel).namelist():\n"
        f"        if zipfile.ZipFile(wheel).read(name).find(b'{MORE_ITERTOOLS_FIX}') != -1:\n"
        "            print(wheel + '!' + name)\n"
        "EOF\n"
    )

    async def main():
        sandbox = instance_sandbox(grading_sandbox(None), images()[MORE_ITERTOOLS])
        async with WorkspacePool(sandbox, gc_at_start=False) as pool:
            async with pool.acquire("pytest-leak-probe") as ws:
                await prepare(ws, instance)
                result = await ws.exec(ExecRequest(argv=["bash", "-c", script], cwd="/workspace", timeout_s=120))
                repo = await ws.exec(
                    ExecRequest(
                        argv=["grep", "-c", "len(iterable) - n", "repo/more_itertools/recipes.py"],
                        cwd="/workspace",
                        timeout_s=30,
                    )
                )
                return result.stdout_text, repo.stdout_text

    found, repo = trio.run(main)
    assert found.split() == [], f"the agent reads the fixed `tail` at {found.split()}"
    assert repo.strip() == "1"  # the repository's own (buggy) line is there: the probe reads what it should


def test_the_shipped_instances_build_and_report_their_scan(client):
    scans = {key: scan_of(client, tag) for key, tag in images().items()}
    assert {key: scan and scan["action"] for key, scan in scans.items()} == {
        "pytoolz__toolz-gym-1": "clean",
        "jpvanhal__inflection-gym-1": "clean",
        MORE_ITERTOOLS: "fixed",
    }
    assert scans[MORE_ITERTOOLS]["removed"] == [
        "/usr/lib/python3/dist-packages/pkg_resources/_vendor/more_itertools/__pycache__/recipes.cpython-311.pyc",
        "/usr/lib/python3/dist-packages/pkg_resources/_vendor/more_itertools/recipes.py",
        "/usr/share/python-wheels/setuptools-66.1.1-py3-none-any.whl",
    ]
    for scan in scans.values():
        assert scan["files"] > 10_000 and scan["bytes"] > 200e6 and scan["units"] >= 1
        assert scan["seconds"] < 120, scan  # 3.5-3.8 s each on the 2-core VM


def test_the_gold_patches_still_resolve_on_the_scanned_images():
    pairs = [(instance, instance.patch) for instance in shipped().values()]
    results = trio.run(grade_predictions, pairs, images(), SweGrader(), grading_sandbox(None))
    assert {r.instance_id: r.status for r in results} == {i.instance_id: "resolved" for i, _ in pairs}


# ---------------------------------------------------------------- honest controls and the CLI


def test_a_trivial_gold_patch_builds_clean(client, repos):
    """Blank lines, pass, return None, a lone bracket and an import line: nothing in the image is refused or removed."""
    _, built = build(client, repos, "trivial", [], demo.TRIVIAL_BASE, demo.TRIVIAL_FIXED)
    scan = scan_of(client, built.tag)
    assert scan is not None and scan["action"] == "clean" and scan["hits"] == 0, scan


def test_images_build_prints_the_scan_and_refuses_in_one_line(client, repos, tmp_path):
    trivial = demo.clone(repos, "cli", demo.TRIVIAL_BASE, demo.TRIVIAL_FIXED, [])
    file = tmp_path / "instances.jsonl"
    file.write_text(json.dumps(trivial.row()) + "\n")
    cmd = [sys.executable, "-m", "gym", "images", "build", "--swe", str(file), "--repos-dir", str(repos)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith(f"gym-swe-instance:{demo.PREFIX}"))
    assert "; leak scan: " in line and " files, " in line and line.endswith(": clean"), line
    refused = demo.clone(repos, "cli-refused", demo.BASE_CORE, demo.FIXED_CORE, ["repo-git"])
    file.write_text(json.dumps(refused.row()) + "\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 4, (proc.returncode, proc.stderr[-2000:])
    assert "refused: the repository in the image holds the fixed code" in proc.stderr, proc.stderr[-2000:]


def test_build_swe_says_what_the_scan_looks_for(tmp_path):
    out, clones = tmp_path / "instances.jsonl", tmp_path / "repos"
    cmd = [sys.executable, "-m", "gym", "tasks", "build-swe", "--out", str(out), "--repos-dir", str(clones)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if "base_commit=" in line]
    assert len(lines) == 3 and all("leak scan looks for 1 line of 1 hunk" in line for line in lines), lines
