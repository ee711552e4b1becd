"""The gym's hardened workspace as a verifiers toolset (verifiers 0.4, ``verifiers.v1``): the tools of a rollout.

verifiers 0.4 gives a task its tools as a `vf.Toolset`, an MCP server it starts for each rollout (``python -m`` this
module, in the local subprocess runtime) and stops when the rollout ends (SIGTERM). `GymWorkspaceToolset` offers
``bash``, ``python``, ``write_file``, ``read_file`` and ``list_dir`` (advertised as ``workspace_bash``, ...), each
run by the gym's own `gym.tools.Toolbox` in one workspace of the gym's sandbox (`sandbox/`: no network, dropped
capabilities, read-only root, a cwd and path allowlist, budgets, a bounded reader), so they behave as in the gym's
own episodes:

* one workspace per rollout, started at the first tool call (a rollout that calls none starts none) and destroyed
  when the server stops: verifiers' SIGTERM ends uvicorn, whose shutdown raises the signal again, which here is a
  `SystemExit` that unwinds the server's exit stack (where the release is), not a kill that would skip it; the
  pool's ``atexit`` cleanup and ``gym gc`` are the backstops of a SIGKILL;
* what a call does is data for the model, never an exception: a path or cwd outside the allowlist comes back as
  ``[sandbox_denied] ...``, output past ``output_chars`` is cut in the middle (``[output_truncated]``), a timeout, an
  OOM kill as theirs; a sandbox the engine failed under is ``[infra_error]``.

The workspace is a trio object and the MCP server an asyncio one: `WorkspaceSession` holds it in a trio loop of
its own thread (`gym.integrations.loop_thread`), and each call crosses with ``trio.from_thread`` from a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import verifiers.v1 as vf

from gym.format.message import ToolCall
from gym.integrations.loop_thread import LoopThread, LoopThreadError
from gym.tools import NAMESPACE, Toolbox, ToolOutcome, ToolsConfig
from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind
from sandbox.fleet import open_pool

OPEN_TIMEOUT_S = 300.0  # the first call waits this long for its workspace (an image check, a container start)
ENDED = ToolOutcome(output="the rollout has ended: its workspace was released", failure=FailureKind.TOOL_ERROR)


class GymToolsetConfig(vf.ToolsetConfig):
    sandbox_config: str | None = None
    """A `SandboxConfig` YAML for the workspaces (image, budgets, engines); None: the gym's defaults."""
    output_chars: int = 8192
    """A tool's observation text at most; the middle of longer text is cut."""
    timeout_s: float = 10.0
    """Deadline of a bash or python call that names none (at most 60 s however long one asks for)."""


class WorkspaceSession:
    """One workspace held open in a trio loop of its own thread, for calls from any other thread."""

    def __init__(self, sandbox: SandboxConfig, tools: ToolsConfig, owner: str) -> None:
        self.sandbox = sandbox.model_copy(update={"pool": sandbox.pool.model_copy(update={"size": 0})})
        self.toolbox = Toolbox(tools)
        self.owner = owner
        self._ws: Any = None
        self._loop = LoopThread("gym-workspace", self._hold, OPEN_TIMEOUT_S)
        self._released = False

    @asynccontextmanager
    async def _hold(self, _closing: trio.Event) -> AsyncIterator[None]:
        async with open_pool(self.sandbox, gc_at_start=False) as pool, pool.acquire(owner=self.owner) as ws:
            self._ws = ws
            yield

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """One tool call in the workspace (blocking: call it from a worker thread)."""
        if self._released:  # a call after the rollout ended: data for whoever made it, and no new workspace
            return ENDED
        call = ToolCall(namespace=NAMESPACE, name=name, arguments=arguments, raw=json.dumps(arguments))
        try:
            self._loop.start()  # the first call opens the workspace
            return self._loop.run(self.toolbox.call, self._ws, call)
        except LoopThreadError:
            if self._released:  # released while this call opened it
                return ENDED
            raise RuntimeError(f"the workspace could not start: {self._loop.failed!r}") from None
        except trio.RunFinishedError:  # the workspace's loop ended under the call: its engine failed
            return ToolOutcome(output="the workspace's loop ended", failure=FailureKind.INFRA_ERROR)

    def close(self) -> None:
        """Destroy the workspace; idempotent."""
        self._released = True
        self._loop.close()


def observation(outcome: ToolOutcome) -> str:
    """What the model reads of an outcome: its text, headed by the failure kind when it is not ``ok`` (once: the
    toolbox's own outputs already open with it)."""
    head = f"[{outcome.failure.value}]"
    if outcome.failure == FailureKind.OK or outcome.output.startswith(head):
        return outcome.output
    return f"{head} {outcome.output}"


def _exit_on_term(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


class GymWorkspaceToolset(vf.Toolset[GymToolsetConfig, vf.State]):
    """The rollout's tools, in one workspace of the gym's sandbox (see the module docstring)."""

    TOOL_PREFIX = "workspace"

    async def setup(self) -> None:
        sandbox = SandboxConfig.from_yaml(self.config.sandbox_config) if self.config.sandbox_config else SandboxConfig()
        tools = ToolsConfig(timeout_s=self.config.timeout_s, output_chars=self.config.output_chars)
        self.session = WorkspaceSession(sandbox, tools, owner="verifiers-rollout")
        self._exit_stack.callback(self.session.close)
        signal.signal(signal.SIGTERM, _exit_on_term)  # see the module docstring: the release must run

    async def _call(self, name: str, **arguments: Any) -> str:
        given = {key: value for key, value in arguments.items() if value is not None}
        return observation(await asyncio.to_thread(self.session.call, name, given))

    @vf.tool
    async def bash(self, command: str, stdin: str = "", cwd: str = ".", timeout: float | None = None) -> str:
        """Run a shell command as `bash -c COMMAND` in the task's workspace (/workspace, no network); its exit
        code, stdout and stderr. cwd is relative to the workspace."""
        return await self._call("bash", command=command, stdin=stdin, cwd=cwd, timeout=timeout)

    @vf.tool
    async def python(self, code: str, stdin: str = "", cwd: str = ".", timeout: float | None = None) -> str:
        """Run Python 3 source as `python3 -c CODE` in the workspace; its exit code, stdout and stderr."""
        return await self._call("python", code=code, stdin=stdin, cwd=cwd, timeout=timeout)

    @vf.tool
    async def write_file(self, path: str, content: str) -> str:
        """Write a file (its parents are created), relative to the workspace."""
        return await self._call("write_file", path=path, content=content)

    @vf.tool
    async def read_file(self, path: str) -> str:
        """Read a file, relative to the workspace."""
        return await self._call("read_file", path=path)

    @vf.tool
    async def list_dir(self, path: str = ".") -> str:
        """List a directory, relative to the workspace."""
        return await self._call("list_dir", path=path)


if __name__ == "__main__":
    GymWorkspaceToolset.run()
