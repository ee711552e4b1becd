"""How the gym reaches a policy: the ``RolloutEngine`` interface and its implementations.

``RolloutEngine`` (from ``policies.sampling``, torch-free) is one coroutine::

    async def generate(prompts: list[list[int]], params: SamplingParams) -> list[Completion]

token ids in; sampled ids, their behaviour logprobs, the weights version of each
token and, for MoE policies, routed experts out. Implementations, picked by a policy spec:

| spec | engine |
| --- | --- |
| ``scripted:reference`` | ``gym.scripted.ReferencePolicy``: each task's reference solution (SWE: its gold patch), worked through the tools |
| ``scripted:empty`` | the same, submitting nothing of worth at once (every reward 0) |
| ``scripted:wrong`` | a wrong answer to every math task (its gold plus one), ``scripted:empty`` on code tasks |
| ``http://HOST:PORT`` | ``HttpEngine``: the policy server's ``POST /v1/completions`` with token-id prompts |
| ``vllm:http://HOST:PORT`` | ``policies.vllm_engine.VllmEngine``: a vLLM server's ``/v1/completions`` with token-id prompts (docs/vllm.md) |
| ``checkpoint:DIR`` | ``InProcessEngine`` over ``policies.generation.GenerationEngine`` loading DIR (torch loads lazily, here only) |

The gym runs on trio. ``policies`` engines are synchronous underneath
(``generate_batch``) and their own ``generate`` uses asyncio, so
``InProcessEngine`` runs ``generate_batch`` in a trio worker thread; wrap any
in-process ``ServingEngine`` (the trainer's, say) in it.
"""

from __future__ import annotations

import importlib
import random
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import trio

from policies.sampling import (
    Completion,
    EngineError,
    RolloutEngine,
    SamplingParams,
    per_prompt,
    reply_json,
    token_versions_problem,
)

if TYPE_CHECKING:
    from gym.environment import Environment

__all__ = ["ENGINES", "EngineError", "HttpEngine", "InProcessEngine", "PolicySpecError", "RolloutEngine", "load_engine"]


class PolicySpecError(ValueError):
    """A policy spec that names no engine, or one that cannot serve this environment (a usage error)."""


# spec scheme -> "module:callable" taking (argument, environment); imported only when named.
ENGINES: dict[str, str] = {
    "scripted": "gym.scripted:load_scripted",
    "http": "gym.policy_client:load_http",
    "https": "gym.policy_client:load_http",
    "checkpoint": "gym.policy_client:load_checkpoint",
    "vllm": "gym.policy_client:load_vllm",
}


class BatchEngine(Protocol):
    """A synchronous engine (``policies.sampling.ServingEngine`` has this method)."""

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]: ...


class InProcessEngine:
    """A ``RolloutEngine`` over a synchronous engine, run in a worker thread so trio keeps going."""

    def __init__(self, engine: BatchEngine) -> None:
        self.engine = engine
        self._lock = trio.Lock()  # one batch at a time: the engine's own lock would block worker threads

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        async with self._lock:
            return await trio.to_thread.run_sync(self.engine.generate_batch, prompts, per_prompt(params, len(prompts)))


class HttpEngine:
    """A ``RolloutEngine`` speaking to ``python -m gym serve`` (or any server with the same ``/v1/completions``).

    httpx on trio, so a cancelled episode cancels its request. Connection failures are retried by
    httpx's transport (``connect_retries``, 0.5 s, 1 s, ... apart); a busy server (503, queue full) is
    waited out ``busy_retries`` times, Retry-After apart when it says so, else with exponential backoff
    (``busy_delay``). Anything else (refused, timed out, another HTTP error, a reply that is not JSON)
    is an ``EngineError`` naming the URL: the episode is masked as an infrastructure failure.

    A reply's per-token weights versions (``token_versions``, from a server with partial rollouts) must be one
    integer per sampled token, never going down and none newer than the reply's ``weights_version``; anything
    else is the engine's fault (an ``EngineError``: masked, never a crash nor a score). A reply without them (an
    older server, vLLM) has every token from its ``weights_version``.
    """

    def __init__(self, url: str, timeout_s: float = 600.0, busy_retries: int = 120, connect_retries: int = 2) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s  # each of connect, read, write (as a socket timeout), not the whole call
        self.busy_retries = busy_retries
        self.connect_retries = connect_retries

    def request_body(self, prompts: list[list[int]], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompts,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "stop_token_ids": list(params.stop_token_ids),
            "return_routed_experts": params.return_routed_experts,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``/v1/completions``; a busy server (503) is retried, anything else fails (class docstring)."""
        # One client per call: an engine outlives trio.run calls (the trainer's steps), a client may not.
        transport = httpx.AsyncHTTPTransport(retries=self.connect_retries)
        async with httpx.AsyncClient(transport=transport, timeout=self.timeout_s) as client:
            for attempt in range(self.busy_retries + 1):
                try:
                    response = await client.post(f"{self.url}/v1/completions", json=body)
                except httpx.HTTPError as exc:
                    raise EngineError(f"{self.url}: {type(exc).__name__}: {_root_cause(exc)}") from None
                if response.status_code != 503 or attempt == self.busy_retries:
                    break
                await trio.sleep(busy_delay(attempt, response.headers.get("Retry-After")))
        return reply_json(self.url, response)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        reply = await self._post(self.request_body(prompts, params))
        try:
            choices = sorted(reply["choices"], key=lambda choice: choice["index"])
            version = int(reply["weights_version"])
            return [_completion(choice, version) for choice in choices]
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineError(f"{self.url}: unexpected /v1/completions reply ({exc!r}): {str(reply)[:300]}") from None


def _completion(choice: dict[str, Any], version: int) -> Completion:
    """One choice of a /v1/completions reply whose ``weights_version`` is ``version`` (ValueError, KeyError or
    TypeError when it is not what the server promises)."""
    versions = choice.get("token_versions")
    if versions is not None:
        problem = token_versions_problem(versions, len(choice["token_ids"]), newest=version)
        if problem is not None:
            raise ValueError(f"token_versions {problem}")
    return Completion(
        token_ids=choice["token_ids"],
        logprobs=choice["logprobs"]["token_logprobs"],
        raw_logprobs=choice["raw_logprobs"],
        routed_experts=choice.get("routed_experts"),
        finish_reason=choice["finish_reason"],
        weights_version=version if not versions else versions[0],
        token_versions=versions,
    )


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error under ``exc``: trio's connect error wraps each address's refusal in a group
    ("all attempts to connect ... failed"), and the refusal is what names the problem."""
    for _ in range(20):  # a bound, not a walk of a cycle
        inner = exc.__cause__ or exc.__context__
        if isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            inner = inner.exceptions[0]
        if inner is None:
            break
        exc = inner
    return exc


def busy_delay(attempt: int, retry_after: str | None, base_s: float = 0.25, cap_s: float = 8.0) -> float:
    """Seconds before retry ``attempt + 1`` of a 503: the server's Retry-After (0.05 to 30 s) when it
    gives a number, else ``base_s * 2**attempt`` up to ``cap_s``; either with up to 25% jitter on top,
    so the many episodes a full queue turned away do not all come back in the same instant."""
    try:
        delay = min(max(float(retry_after), 0.05), 30.0) if retry_after is not None else min(base_s * 2**attempt, cap_s)
    except ValueError:  # an HTTP date or garbage: back off as if none was given
        delay = min(base_s * 2**attempt, cap_s)
    return delay * (1.0 + 0.25 * random.random())


def load_http(argument: str, env: Environment) -> HttpEngine:
    del env
    try:  # a malformed URL is the spec's fault, found now rather than at the first request
        url = httpx.URL(argument)
    except httpx.InvalidURL as exc:
        raise PolicySpecError(f"policy spec {argument!r} is not a valid URL: {exc}") from None
    if not url.host:
        raise PolicySpecError(f"policy spec {argument!r} names no host: use http://HOST:PORT")
    return HttpEngine(argument)


def load_vllm(argument: str, env: Environment) -> RolloutEngine:
    """A vLLM server at the URL after ``vllm:``, or several, comma-separated (requests spread over them); sampled
    ids are bounded by the environment's tokenizer (the ids its chat format can render). Nobody pushes weights
    through it: every completion is version 0."""
    urls = argument.split(",")
    try:
        for url in urls:
            load_http(url, env)  # the same URL checks
        if len(set(urls)) != len(urls):
            raise PolicySpecError(f"policy spec {argument!r} names a server twice")
    except PolicySpecError as exc:
        raise PolicySpecError(f"{exc} (vLLM servers: vllm:http://HOST:PORT[,http://HOST2:PORT2...])") from None
    from policies.vllm_engine import VllmEngine

    return VllmEngine(urls, env.tokenizer.vocab_size)


def load_checkpoint(argument: str, env: Environment) -> InProcessEngine:
    """The in-process generation engine over a saved policy directory (imports torch)."""
    del env
    if not argument:
        raise PolicySpecError("checkpoint spec needs a directory: checkpoint:DIR")
    hf_adapter = importlib.import_module("policies.hf_adapter")
    generation = importlib.import_module("policies.generation")
    return InProcessEngine(generation.GenerationEngine(hf_adapter.load_policy(argument)))


def load_engine(spec: str, env: Environment) -> RolloutEngine:
    """The engine a policy spec names (see the module docstring); `PolicySpecError` for a bad spec."""
    scheme, sep, argument = spec.partition(":")
    if not sep or scheme not in ENGINES:
        raise PolicySpecError(f"unknown policy spec {spec!r}")  # the fix (gym.fault) lists the known ones
    if scheme in ("http", "https"):
        argument = spec
    module_path, _, attr = ENGINES[scheme].partition(":")
    load = getattr(importlib.import_module(module_path), attr)
    if scheme != "scripted":
        return load(argument, env)
    try:  # the scripted policies check their argument and the tasks' references with ValueError
        return load(argument, env)
    except ValueError as exc:
        raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None
