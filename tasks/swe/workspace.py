"""The agent's side of an SWE instance: preparing its workspace and taking its change as a diff.

Layout of a workspace on an instance image (root filesystem read-only,
``/workspace`` a fresh tmpfs per container)::

    /workspace/PROBLEM_STATEMENT.md   the issue text (outside the repository: never part of the diff)
    /workspace/repo/                  the repository at base_commit, writable, one orphan commit
    /opt/swe/repo/                    the same repository as built into the image, read-only

``prepare`` copies ``/opt/swe/repo`` into the tmpfs (``cp -R -P`` as the sandbox
user, so the copy is the agent's) because the image's own ``/workspace`` is
hidden by the tmpfs mount. The editable install points at
``/workspace/repo``, so the agent's edits are what ``import`` sees. Nothing of
``test_patch`` is in the image or the workspace.

``workspace_diff`` takes the agent's change as ``git diff --binary`` of its
work tree against the pristine commit. It never runs anything in the agent's
container: the tree is copied out (``get_archive``, which spends no call of
the episode's budget) into a *fresh* container of the same image, without the
agent's ``.git``, and diffed there by the read-only git directory of
``/opt/swe/repo`` with a throwaway index and object directory. New commits, a
deleted ``.git``, hooks or git config planted by the agent change nothing.
"""

from __future__ import annotations

import shlex
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest, ExecResult
from sandbox.workspace import Workspace
from tasks.swe.instance import SweInstance

PRISTINE_REPO = "/opt/swe/repo"
REPO = "/workspace/repo"
PROBLEM_FILE = "/workspace/PROBLEM_STATEMENT.md"
MAX_DIFF_BYTES = 16 << 20

AGENT_TAR = "/workspace/agent.tar"
AGENT_TREE = "/workspace/agent"
MAX_TREE_BYTES = 64 << 20  # the tar and its unpacked copy must fit the fresh container's tmpfs

# Unpack the agent's tree without any .git (nested ones included), then diff it with the read-only pristine git dir and a
# scratch index/object directory.
_EXTRACT = """
set -eu
mkdir {tree}
tar -xf {tar} -C {tree} --no-same-owner --exclude=.git
rm -f {tar}
scratch=$(mktemp -d /tmp/gym-diff.XXXXXX)
mkdir "$scratch/objects"
export GIT_DIR={git_dir} GIT_WORK_TREE={tree}/repo GIT_INDEX_FILE="$scratch/index" \\
       GIT_OBJECT_DIRECTORY="$scratch/objects" GIT_ALTERNATE_OBJECT_DIRECTORIES={git_dir}/objects \\
       GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() {{ git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.autocrlf=false "$@"; }}
cd {tree}/repo
g read-tree HEAD
g add -A .
g diff --cached --binary --no-color --no-ext-diff --no-textconv --no-renames HEAD
rm -rf "$scratch"
"""


def _failed(result: ExecResult) -> bool:
    return result.failure != FailureKind.OK or result.exit_code != 0


def _problem(what: str, result: ExecResult) -> str:
    return f"{what}: {result.failure.value} (exit {result.exit_code}) {result.stderr_text[-800:]} {result.detail}"


async def put_file(ws: Workspace, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (parents created); InfraError when the sandbox cannot."""
    written = await ws.write_file(path, data)
    if written.failure != FailureKind.OK:
        raise InfraError(f"writing {path}: {written.failure.value}: {written.detail}")


async def copy_repo(ws: Workspace, timeout_s: float = 300.0) -> None:
    """``/opt/swe/repo`` -> ``/workspace/repo``; InfraError when the copy fails (a full disk included)."""
    result = await ws.exec(
        ExecRequest(argv=["cp", "-R", "-P", PRISTINE_REPO, REPO], cwd="/workspace", timeout_s=timeout_s)
    )
    if _failed(result):
        raise InfraError(_problem(f"copying the repository into {ws.id[:12]}", result))


async def prepare(ws: Workspace, instance: SweInstance) -> None:
    """Make ``ws`` (a container of the instance's image) the agent's workspace for ``instance``."""
    await copy_repo(ws)
    await put_file(ws, PROBLEM_FILE, instance.problem_statement.encode())


def extract_command() -> ExecRequest:
    script = _EXTRACT.format(
        git_dir=shlex.quote(PRISTINE_REPO + "/.git"), tree=shlex.quote(AGENT_TREE), tar=shlex.quote(AGENT_TAR)
    )
    return ExecRequest(
        argv=["bash", "-c", script], cwd="/workspace", timeout_s=120.0, output_limit_bytes=MAX_DIFF_BYTES
    )


async def diff_of_tree(fresh: Workspace, tar: bytes) -> str:
    """Diff of ``tar`` (a ``get_archive`` of an agent's ``/workspace/repo``) taken in ``fresh``.

    Raises ValueError when the tree cannot be diffed because of what the agent
    did (the repository removed, a diff beyond ``MAX_DIFF_BYTES``) and
    InfraError when the sandbox failed.
    """
    await put_file(fresh, AGENT_TAR, tar)
    result = await fresh.exec(extract_command())
    if result.failure == FailureKind.INFRA_ERROR:
        raise InfraError(_problem("extracting the diff", result))
    if result.truncated or result.failure == FailureKind.OUTPUT_TRUNCATED:
        raise ValueError(f"the diff is larger than {MAX_DIFF_BYTES} bytes")
    if _failed(result):
        raise ValueError(_problem("extracting the diff", result))
    return result.stdout.decode("utf-8", errors="surrogateescape")


class WorkspaceSource(Protocol):
    """Hands out fresh containers of the instance's image (``sandbox.pool.WorkspacePool``)."""

    def acquire(self, owner: str = ...) -> AbstractAsyncContextManager[Workspace]: ...


async def workspace_diff(ws: Workspace, pool: WorkspaceSource) -> str:
    """The agent's change in ``ws`` as a git diff (empty when nothing changed); see the module docstring."""
    try:
        tar = await ws.get_archive(REPO, max_bytes=MAX_TREE_BYTES, budgeted=False)
    except ValueError as err:
        raise ValueError(f"the agent's repository cannot be read: {err}") from err
    async with pool.acquire(owner=f"swe-diff:{ws.owner}") as fresh:
        return await diff_of_tree(fresh, tar)
