"""A verifiers environment over the gym's tasks and graders (verifiers 0.4, ``verifiers.v1``).

verifiers 0.4 names an environment by an installed package that exports its ``Taskset`` (and, here, its
``Harness``); examples/gym-verifiers is that package (module ``gym_verifiers``, id ``gym-verifiers``), re-exporting
what this module defines. Importing this module needs verifiers; nothing else in the gym does.

* `GymTaskset` loads a tasks file with the gym's loaders (any format they read: TACO, CodeContests, HumanEval,
  GSM8K, MATH, verl parquet, ...). Each task's data carries its prompt (the gym's task text), its id and the file,
  never its tests or gold: traces record task data.
* `GymTask`'s reward ``correct`` grades the last reply with the gym's `Scorer` (programs in a fresh Docker
  sandbox, math answers by the math check: `gym.integrations.ground_truth.final_answer`). A sample the sandbox or
  host failed raises `SandboxUnavailable`: verifiers records an errored rollout (kept apart, re-run by
  ``--resume``), never a reward of 0.
* Tools (``GymTaskConfig.tools``, ``load_environment(tools=True)``): each rollout gets
  `gym.integrations.verifiers_workspace.GymWorkspaceToolset`, verifiers' per-rollout MCP tool server, whose
  ``workspace_bash``, ``workspace_python``, ``workspace_write_file``, ... run in one hardened workspace of the gym's
  sandbox, released when the rollout ends; what a call does (a path outside the allowlist, output past the bound)
  comes back to the model as data.
* `GymChatHarness` is the agent loop, in process, without streaming: it asks the model through the rollout's
  interception endpoint with the rollout's MCP tools in OpenAI's ``tools`` form, runs each ``tool_calls`` entry on
  its server (verifiers' own MCP client) and answers it with a ``tool`` message, up to ``max_turns`` replies; the
  last reply is graded. verifiers' own chat harnesses (``null``, ``bash``) always stream and install their program
  with uv, which ``gym serve`` (no ``stream``) and an offline runtime cannot follow.

``load_environment(tasks)`` returns the ``vf.Env``; from the shell: ``vf-eval gym-verifiers
--env.taskset.tasks FILE --env.agent.runtime.type subprocess``.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from functools import cache
from pathlib import Path

import httpx
import verifiers.v1 as vf
from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

from gym.environment import task_text
from gym.integrations.ground_truth import final_answer
from gym.integrations.scorer import SandboxUnavailable, shared_scorer
from gym.integrations.verifiers_workspace import GymToolsetConfig, GymWorkspaceToolset
from tasks.families import kind_of
from tasks.loader import load_tasks
from tasks.math.family import MATH
from tasks.math.problem import MathTask
from tasks.task import Task

TASKSET_ID = "gym-verifiers"
REPLY_TIMEOUT_S = 600.0


@cache
def tasks_of(path: str, format: str = "auto") -> dict[str, Task | MathTask]:
    """The tasks of a file by id, loaded once per process (rows it cannot use are logged and skipped)."""
    return {task.task_id: task for task in load_tasks(Path(path), format).tasks}


class GymTaskData(vf.TaskData):
    gym_task_id: str
    """The task's id in its file."""
    tasks_file: str
    """The file it was loaded from (absolute): the reward reads its tests there, not from the trace."""
    tasks_format: str = "auto"


class GymTaskConfig(vf.TaskConfig):
    scorer_config: str | None = None
    """A `ScorerConfig` YAML (sandbox, grader and math bounds, concurrency); None: the defaults."""
    tools: GymToolsetConfig | None = None
    """The rollout's tools in a workspace of the gym's sandbox (`GymWorkspaceToolset`); None: no tools."""


class GymTask(vf.Task[GymTaskData, vf.State, GymTaskConfig]):
    @classmethod
    def toolsets(cls, config: GymTaskConfig) -> list[vf.Toolset]:
        return [] if config.tools is None else [GymWorkspaceToolset(config.tools)]

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        """1.0 when the gym's grader passes the last reply (or the fraction of tests, per the scorer config)."""
        task = tasks_of(self.data.tasks_file, self.data.tasks_format)[self.data.gym_task_id]
        reply = trace.last_reply or ""
        answer = final_answer(reply) if kind_of(task) is MATH else reply
        score = await asyncio.to_thread(shared_scorer(self.config.scorer_config).score, task, answer)
        if score.masked:
            raise SandboxUnavailable(f"{task.task_id}: the sandbox or host failed to grade this reply: {score.reason}")
        return score.reward


class GymTasksetConfig(vf.TasksetConfig):
    id: str = TASKSET_ID
    tasks: str = ""
    """The tasks file (``--env.taskset.tasks``)."""
    format: str = "auto"
    """Its format, as ``gym grade --format`` names them; auto: recognised."""
    task: GymTaskConfig = GymTaskConfig()


class GymTaskset(vf.Taskset[GymTask, GymTasksetConfig]):
    def load(self) -> list[GymTask]:
        if not self.config.tasks:
            raise ValueError("gym-verifiers needs a tasks file: --env.taskset.tasks FILE")
        path = str(Path(self.config.tasks).resolve())
        return [
            GymTask(
                GymTaskData(
                    id=task.task_id,
                    prompt=task_text(task),
                    gym_task_id=task.task_id,
                    tasks_file=path,
                    tasks_format=self.config.format,
                ),
                self.config.task,
            )
            for task in tasks_of(path, self.config.format).values()
        ]


class GymChatHarnessConfig(vf.HarnessConfig):
    id: str = TASKSET_ID
    max_turns: int = 16
    """Model replies per rollout at most (each may call tools); the last one is graded."""


class GymChatHarness(vf.Harness[GymChatHarnessConfig]):
    """The agent loop over the rollout's MCP tools, in process (see the module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the tools run in the gym's Docker workspace, never in the harness's runtime
    NEEDS_CONTAINER = False
    SUPPORTS_MCP = True

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message.model_dump(mode="json", exclude_none=True) for message in prompt or []]
        async with AsyncExitStack() as stack:
            servers = {"mcpServers": {name: {"url": url} for name, url in (mcp_urls or {}).items()}}
            schemas, dispatch, connections = await connect_mcp(servers, stack) if mcp_urls else ([], {}, {})
            client = await stack.enter_async_context(httpx.AsyncClient(timeout=REPLY_TIMEOUT_S))
            for _turn in range(self.config.max_turns):
                body = {"model": ctx.model, "messages": messages} | ({"tools": schemas} if schemas else {})
                headers = {"Authorization": f"Bearer {secret}"}
                response = await client.post(f"{endpoint}/chat/completions", json=body, headers=headers)
                if response.status_code >= 400:
                    failed = f"HTTP {response.status_code}: {response.text[-2000:]}"
                    return ProgramResult(exit_code=1, stdout="", stderr=failed)
                message = response.json()["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls") and v})
                if not calls:
                    break
                for call in calls:
                    result = await _tool_result(connections, dispatch, call)
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
        return ProgramResult(exit_code=0, stdout=response.text[-2000:], stderr="")


async def _tool_result(connections: dict, dispatch: dict, call: dict) -> str | list:
    """A tool call's result for the model; a call it cannot make (an unknown tool, arguments that are not a JSON
    object) is said as an error in its place, as the gym's episodes say a tool_error."""
    function = call.get("function") or {}
    name = function.get("name", "")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError as exc:
        return f"[tool_error] the arguments of {name!r} are not JSON: {exc}"
    if name not in dispatch or not isinstance(arguments, dict):
        return f"[tool_error] no tool {name!r} takes these arguments; tools: {', '.join(dispatch) or 'none'}"
    return await call_mcp(connections, dispatch, name, arguments)


def load_environment(
    tasks: str | Path,
    *,
    format: str = "auto",
    scorer_config: str | Path | None = None,
    tools: bool | GymToolsetConfig = False,
    **agent,
) -> vf.Env:
    """The verifiers environment over ``tasks``, its agent on `GymChatHarness` in the local subprocess runtime
    (``agent``: other `vf.AgentConfig` fields); ``tools``: each rollout gets the workspace tools (True: their
    defaults). Needs examples/gym-verifiers installed (or on the path): verifiers finds tasksets by package."""
    toolset = GymToolsetConfig() if tools is True else tools or None
    taskset = GymTasksetConfig(
        tasks=str(tasks),
        format=format,
        task=GymTaskConfig(scorer_config=None if scorer_config is None else str(scorer_config), tools=toolset),
    )
    seat = vf.AgentConfig(harness=GymChatHarnessConfig(), runtime=SubprocessConfig(), **agent)
    return vf.load_environment(vf.SingleAgentEnvConfig(taskset=taskset, agent=seat))
