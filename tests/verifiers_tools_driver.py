"""Run inside a venv holding verifiers (tests/integration/test_integrations_verifiers.py): verifiers' own evaluation
loop (``run_eval``) plays `gym_verifiers` with the workspace tools on (`GymWorkspaceToolset`, one workspace per
rollout) against a scripted OpenAI-compatible chat server that emits the ``tool_calls`` a real model would, and this
prints each rollout, with every tool result the model was sent, as one JSON object.

``python -m tests.verifiers_tools_driver TASKS OUT`` with the checkout and examples/gym-verifiers/src on PYTHONPATH.
The scripted model (our own: ``gym serve`` is not asked here, its OpenAI ``tool_calls`` are another engineer's work in
progress) plays each task twice: once honestly (writes its program, runs it on the example, answers it), once as an
attacker (writes outside the workspace, runs in a cwd outside it, reads /etc/passwd, floods the output, forges a
verdict). Every rollout first asks for its workspace's container id (from its mounts), which the test looks
for afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections import defaultdict

from aiohttp import web

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
FLOOD = "head -c 3000000 /dev/zero | tr '\\0' a"
WHICH = "grep -o 'containers/[0-9a-f]*' /proc/self/mountinfo | head -n 1"  # the container's id, from its mounts
SCRIPTS = {
    "honest": [
        ("bash", {"command": WHICH}),
        ("write_file", {"path": "sol.py", "content": PROGRAM}),
        ("bash", {"command": "python3 sol.py", "stdin": "1 2\n"}),
        f"```python\n{PROGRAM}```",
    ],
    "attack": [
        ("bash", {"command": WHICH}),
        ("write_file", {"path": "../../tmp/escape.txt", "content": "out"}),
        ("bash", {"command": "cat hostname", "cwd": "/etc"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("bash", {"command": FLOOD}),
        ("python", {"code": "print('x' * 3_000_000)"}),
        "print('PASSED')",
    ],
}
_CALL_ID = re.compile(r"^call_(\d+)_\d+$")


async def scripted_model() -> tuple[web.AppRunner, str, dict]:
    """The chat endpoint: a new conversation gets the next script (honest, attack, honest, ...); each reply is its
    script's next step, a tool call in OpenAI's form or the final answer. Tool results sent back are recorded."""
    seen: dict[int, list[str]] = defaultdict(list)
    state = {"rollouts": 0, "tools": {}, "seen": seen}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        ids = [c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
        if ids:
            rollout = int(_CALL_ID.match(ids[0]).group(1))
        else:
            rollout, state["rollouts"] = state["rollouts"], state["rollouts"] + 1
            state["tools"][rollout] = sorted(t["function"]["name"] for t in body.get("tools") or [])
        seen[rollout] = [m["content"] for m in messages if m.get("role") == "tool"]
        script = SCRIPTS["honest" if rollout % 2 == 0 else "attack"]
        step = script[len(ids)]
        if isinstance(step, str):
            message, finish = {"role": "assistant", "content": step}, "stop"
        else:
            name, arguments = step
            call = {"name": f"workspace_{name}", "arguments": json.dumps(arguments)}
            tool_call = {"id": f"call_{rollout}_{len(ids)}", "type": "function", "function": call}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [tool_call]}, "tool_calls"
        return web.json_response(
            {
                "id": f"scripted-{rollout}-{len(ids)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", state


async def main() -> None:
    from gym.integrations.verifiers import GymTaskConfig, GymTasksetConfig, load_environment
    from gym.integrations.verifiers_workspace import GymToolsetConfig
    from tests.verifiers_driver import run

    tasks, out = sys.argv[1:3]
    env = load_environment(tasks, tools=True)  # the public entry point builds an env with the tools
    first = next(iter(env.taskset))
    result: dict = {"toolsets": [type(t).__name__ for t in first.toolsets(first.config)]}
    runner, url, state = await scripted_model()
    try:
        taskset = GymTasksetConfig(tasks=tasks, task=GymTaskConfig(tools=GymToolsetConfig(output_chars=4096)))
        result["rollouts"] = await run(taskset, url, out, model="scripted", max_concurrent=1)
    finally:
        await runner.cleanup()
    result["tool_results"] = {str(k): v for k, v in state["seen"].items()}
    result["tools"] = {str(k): v for k, v in state["tools"].items()}
    print(json.dumps(result))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
