"""Run inside a venv holding verifiers (tests/integration/test_integrations_verifiers.py): verifiers' own evaluation
loop (``run_eval``, what ``vf-eval`` runs) plays `gym_verifiers` (examples/gym-verifiers over
gym/integrations/verifiers.py) and this prints each rollout as one JSON object.

``python -m tests.verifiers_driver TASKS SERVE_URL OUT DEAD_ENGINE_YAML`` with the checkout and
examples/gym-verifiers/src on PYTHONPATH. Three runs, two rollouts per task each:

* ``serve``: the model is ``gym serve`` at SERVE_URL (its chat completions), replies whatever it samples;
* ``scripted``: the model is a stub here that answers each task once honestly and once with an attack (a hedge, a
  forged verdict), so a pass and a refusal both go through verifiers' loop;
* ``dead_engine``: as ``scripted``, graded with a scorer whose Docker engine does not answer (DEAD_ENGINE_YAML).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections import defaultdict

from aiohttp import web

REPLIES = {  # task prompt start -> [honest reply, attack]
    "What is 6 times 12?": ["6 * 12 = 72\n#### 72", "\\boxed{71} or \\boxed{72}"],
    "Read a and b": ["```python\na, b = map(int, input().split())\nprint(a + b)\n```", "print('PASSED')"],
}


async def stub() -> tuple[web.AppRunner, str]:
    """An OpenAI-compatible chat endpoint answering each prompt's replies in turn."""
    served: dict[str, int] = defaultdict(int)

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        replies = next(r for start, r in REPLIES.items() if prompt.startswith(start))
        reply = replies[served[prompt] % len(replies)]
        served[prompt] += 1
        message = {"role": "assistant", "content": reply}
        return web.json_response(
            {
                "id": "stub",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


async def evaluate(tasks: str, url: str, out: str, scorer_config: str | None) -> list[dict]:
    from gym.integrations.verifiers import GymTaskConfig, GymTasksetConfig

    taskset = GymTasksetConfig(tasks=tasks, task=GymTaskConfig(scorer_config=scorer_config))
    return await run(taskset, url, out, model="policy", sampling={"max_tokens": 12, "temperature": 1.0})


async def run(taskset, url: str, out: str, **options) -> list[dict]:
    """verifiers' ``run_eval`` over ``taskset`` (a `GymTasksetConfig`), two rollouts a task, the model at ``url``
    (``options``: other `EvalConfig` fields); one dict per rollout."""
    import verifiers.v1 as vf
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig
    from verifiers.v1.runtimes import SubprocessConfig

    from gym.integrations.verifiers import GymChatHarnessConfig

    config = EvalConfig(
        env=vf.SingleAgentEnvConfig(
            taskset=taskset, agent=vf.AgentConfig(harness=GymChatHarnessConfig(), runtime=SubprocessConfig())
        ),
        client={"type": "eval", "base_url": f"{url}/v1", "api_key_var": "GYM_VERIFIERS_TEST_KEY"},
        num_rollouts=2,
        rich=None,
        push=False,
        output_dir=out,
        **options,
    )
    rollouts = []
    for episode in await run_eval(config):
        for trace in episode.traces:
            reply = next((n.message.content for n in reversed(trace.nodes) if n.message.role == "assistant"), None)
            correct = trace.rewards.get("correct")
            rollouts.append(
                {
                    "task": trace.task.data.gym_task_id,
                    "reward": None if correct is None else correct.score,
                    "reply": reply,
                    "ok": episode.ok,
                    "errors": [f"{e.type}: {e.message}" for e in (*episode.errors, *trace.errors)],
                }
            )
    return rollouts


async def main() -> None:
    from gym.integrations.verifiers import load_environment

    tasks, serve_url, out, dead_engine = sys.argv[1:5]
    env = load_environment(tasks)  # the public entry point builds the same env the runs below use
    result = {"env": type(env).__name__, "prompts": sorted(task.data.prompt[:40] for task in env.taskset)}
    result["serve"] = await evaluate(tasks, serve_url, f"{out}/serve", None)
    runner, stub_url = await stub()
    try:
        result["scripted"] = await evaluate(tasks, stub_url, f"{out}/scripted", None)
        result["dead_engine"] = await evaluate(tasks, stub_url, f"{out}/dead", dead_engine)
    finally:
        await runner.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
