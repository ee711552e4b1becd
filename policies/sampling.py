"""The rollout engine's request and response types, and the interface engines implement (torch-free).

The gym imports these: `gym.policy_client.RolloutEngine` is
`async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]`.
`ServingEngine` adds what the HTTP server needs (batched sync generation, weight updates).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

MAX_SEED = 1 << 62
MIN_TEMPERATURE = 1e-5  # below it (but 0, greedy) float32 logits / temperature overflow to inf, samples to NaN


class SamplingParams(BaseModel):
    """How to sample one completion (per prompt)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_tokens: int = Field(256, ge=1)
    """Most new tokens to sample (the completion ends with finish_reason "length" there)."""
    temperature: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """Softmax temperature; 0 means greedy (argmax), whose sampling logprob is then 0; else at least
    `MIN_TEMPERATURE`."""
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches top_p."""
    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens; 0 disables."""
    stop_token_ids: tuple[int, ...] = ()
    """Sampling one of these ends the completion (finish_reason "stop"); the stop token is kept."""
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    """The seed of the row's generator; None draws a fresh seed. Where one params object samples several prompts
    (`RolloutEngine.generate`, a request's ``n``), prompt i's seed is seed + i (`per_prompt`). At most 2**62, so
    seed + i stays a valid generator seed (torch takes 64 bits)."""
    return_routed_experts: bool = False
    """Return the MoE routes (for routing replay, R3) in `Completion.routed_experts`."""

    @model_validator(mode="after")
    def _check_values(self) -> SamplingParams:
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(
                f"temperature {self.temperature:g} is below {MIN_TEMPERATURE:g}: give 0 for greedy, or at least "
                f"{MIN_TEMPERATURE:g} (logits / temperature would overflow float32)"
            )
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be non-negative, got {list(self.stop_token_ids)}")
        return self


def per_prompt(params: SamplingParams, prompts: int) -> list[SamplingParams]:
    """The params of each of ``prompts`` rows sampled with ``params``: seeds seed, seed + 1, ... (None stays None:
    each row draws a fresh one). An engine's `generate_batch` and `submit` take one params object per row and
    seed each row with its own ``seed``, so a row's samples do not depend on the call or batch it came in."""
    if params.seed is None:
        return [params] * prompts
    return [params.model_copy(update={"seed": params.seed + i}) for i in range(prompts)]


_NESTED_INTS = TypeAdapter(list[list[list[StrictInt]]])


class Routes:
    """A completion's routed experts, ``routes[layer][position][k]``, as one read-only int16 array (L, T, K).

    An engine hands the array it assembled; the JSON wire (and `model_dump`) carries nested lists, read back
    into an array. Nested lists cost a GRPO step of the tiny policy ~100,000 Python lists (64 completions x 2
    MoE layers x ~780 positions): building them, walking them in garbage collections, and turning them back
    into the array the trainer replays. Values are -1 (route freely) or an expert index."""

    __slots__ = ("array",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, routes: Any) -> None:
        if isinstance(routes, (list, tuple)):  # from the wire: integers only (numpy would read True as 1, 2.0 as 2)
            try:
                _NESTED_INTS.validate_python(routes)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = "".join(f"[{i}]" for i in error["loc"])
                raise ValueError(f"routed_experts must be a [layer][position][k] array of integers: {where} "
                                 f"{error['msg'].lower()}") from None  # fmt: skip
        try:
            array = np.asarray(routes)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise ValueError(f"routed_experts must be a [layer][position][k] array of integers: {exc}") from None
        if array.ndim != 3 or array.dtype.kind not in "iu" or not array.size:
            raise ValueError(
                f"routed_experts must be a non-empty [layer][position][k] array of integers, got shape {array.shape} "
                f"of {array.dtype}"
            )
        if array.min() < -1 or array.max() > np.iinfo(np.int16).max:
            raise ValueError(f"routed_experts must be -1 or an expert index, got {array.min()}..{array.max()}")
        self.array = array.astype(np.int16)  # a copy: nobody else holds it
        self.array.flags.writeable = False

    def __reduce__(self):  # a pickled or deep-copied Routes is read-only too (spawned replicas pickle completions)
        return (Routes, (self.array,))

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.array.shape

    def tolist(self) -> list[list[list[int]]]:
        return self.array.tolist()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.array if dtype is None else self.array.astype(dtype)
        return array.copy() if copy and array is self.array else array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index):
        return self.array[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Routes):
            return NotImplemented
        return bool(np.array_equal(self.array, other.array))

    def __repr__(self) -> str:
        return f"Routes(shape={self.shape})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, Routes) else cls(value),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda routes: routes.tolist()),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        nested = core_schema.list_schema(core_schema.list_schema(core_schema.list_schema(core_schema.int_schema())))
        return handler(nested)


class Completion(BaseModel):
    """One sampled completion, token-exact."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    token_ids: list[int]
    """Sampled token ids (a stop token, if one ended the completion, is the last)."""
    logprobs: list[float]
    """Behaviour logprob of each sampled token under the distribution actually sampled from
    (after temperature, top-k, top-p; 0.0 for greedy)."""
    raw_logprobs: list[float]
    """Logprob of each sampled token under the raw model (temperature 1, nothing truncated)."""
    routed_experts: Routes | None = None
    """routed_experts[layer][i][k] over i = prompt + completion positions (MoE policies, when asked).
    The last completion token is never fed forward, so its row is all -1 (it affects no logprob;
    the model routes -1 rows itself when replaying)."""
    finish_reason: Literal["stop", "length"]
    """"stop": a stop token was sampled; "length": max_tokens (or the context) was reached."""
    weights_version: int = Field(ge=0)
    """Version of the policy weights that sampled the first token (every token when `token_versions` is None)."""
    token_versions: list[StrictInt] | None = None
    """Weights version that sampled each token, aligned with `token_ids`, non-decreasing: an engine with partial
    rollouts swaps weights between decode steps, so a completion in flight goes on under newer weights (the
    ``partial_rollouts`` option of `policies.generation.GenerationEngine`). None: all from `weights_version`."""

    @model_validator(mode="after")
    def _versions(self) -> Completion:
        if self.token_versions is not None:
            problem = token_versions_problem(self.token_versions, len(self.token_ids))
            if problem is None and self.token_versions and self.token_versions[0] != self.weights_version:
                problem = f"starts at version {self.token_versions[0]}, not at weights_version {self.weights_version}"
            if problem is not None:
                raise ValueError(f"token_versions {problem}")
        return self

    @property
    def versions(self) -> list[int]:
        """The weights version of each token (`token_versions`, or `weights_version` for every one)."""
        if self.token_versions is not None:
            return self.token_versions
        return [self.weights_version] * len(self.token_ids)


def token_versions_problem(versions: object, tokens: int, newest: int | None = None) -> str | None:
    """What is wrong with ``versions`` as the per-token weights versions of a completion of ``tokens`` tokens
    (a list of as many integers >= 0, each at most ``newest`` when given, never going down), or None. One pass,
    stopping at the first bad item: a reply's list is bounded by its token count before any item is read."""
    if not isinstance(versions, list):
        return f"must be a list of weights versions, got {type(versions).__name__}"
    if len(versions) != tokens:
        return f"holds {len(versions)} versions for {tokens} tokens"
    previous = 0
    for i, version in enumerate(versions):
        if type(version) is not int or version < 0:
            return f"item {i}: {str(version)[:40]} is not a weights version (an integer >= 0)"
        if version < previous:
            return f"item {i}: version {version} after {previous} (versions never go down within a completion)"
        if newest is not None and version > newest:
            return f"item {i}: version {version} is newer than the engine's {newest}"
        previous = version
    return None


@runtime_checkable
class RolloutEngine(Protocol):
    """What the gym calls: a batch of prompts in, one completion per prompt out."""

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...


class EngineError(Exception):
    """The policy engine did not serve a request: it could not be reached (the message names the URL
    and the root cause), refused the request (prompt too long, a token id outside the vocabulary,
    ...) or was closed. One type, because every caller treats them alike: an episode masks itself
    as infra_error (`gym.episode`), the batching engine hands the error to each caller of the batch,
    the CLI exits 3 (`gym.fault`). The server turns a refused request into HTTP 400 (`check_request`
    is the only call under its handler), which the HTTP client raises again as this type."""


class ContextExceeded(EngineError):
    """The prompt plus ``max_tokens`` does not fit the model's context: the request's size, not the engine's
    health. An episode whose own turns grew its context past the model's window ends there, scored, as when
    it spends ``episode.max_total_tokens`` (`gym.episode`); ``context_length`` lets a caller ask for less."""

    def __init__(self, prompt_tokens: int, max_tokens: int, context_length: int) -> None:
        super().__init__(
            f"prompt of {prompt_tokens} tokens + max_tokens={max_tokens} exceeds the context of {context_length} tokens"
        )
        self.prompt_tokens, self.max_tokens, self.context_length = prompt_tokens, max_tokens, context_length


# How servers say it in a 400: ours (the message above) and vLLM's ("This model's maximum context length is
# 2048 tokens. However, you requested 3716 tokens (3524 in the messages, 192 in the completion)").
_CONTEXT_MESSAGES = (
    re.compile(r"prompt of (\d+) tokens \+ max_tokens=(\d+) exceeds the context of (\d+) tokens"),
    re.compile(r"maximum context length is (\d+) tokens.{0,80}?requested (\d+) tokens \((\d+) in the messages, (\d+)"),
)


def context_exceeded(message: str) -> ContextExceeded | None:
    """The ContextExceeded a server's refusal ``message`` states, or None (another refusal)."""
    ours = _CONTEXT_MESSAGES[0].search(message[:2000])
    if ours:
        return ContextExceeded(int(ours[1]), int(ours[2]), int(ours[3]))
    vllm = _CONTEXT_MESSAGES[1].search(message[:2000])
    if vllm:
        return ContextExceeded(int(vllm[3]), int(vllm[4]), int(vllm[1]))
    return None


def reply_json(url: str, response: Any) -> Any:
    """The JSON body of a policy server's reply to a completion request (an httpx response), or: ContextExceeded
    for a 400 that says the request is too long (its size, not the server's health: `gym.episode` ends the episode
    there, scored), EngineError naming ``url`` for any other HTTP error or a body that is not JSON."""
    if response.is_error:
        too_long = context_exceeded(response.text) if response.status_code == 400 else None
        if too_long is not None:
            raise too_long
        raise EngineError(f"{url}: HTTP {response.status_code}: {response.text[:500]}")
    try:
        return response.json()
    except ValueError as exc:
        raise EngineError(f"{url}: reply is not JSON ({exc}): {response.text[:300]}") from None


def check_request(prompt: list[int], params: SamplingParams, vocab_size: int, context_length: int) -> None:
    """Raise EngineError naming the problem when a model with these sizes cannot serve the request
    (ContextExceeded when it is too long for the model's context)."""
    if not prompt:
        raise EngineError("prompt is empty: give at least one token id")
    if len(prompt) + params.max_tokens > context_length:
        raise ContextExceeded(len(prompt), params.max_tokens, context_length)
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise EngineError(f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    if any(t >= vocab_size for t in params.stop_token_ids):
        raise EngineError(f"stop_token_ids must be < vocab_size={vocab_size}")


class ServingEngine(Protocol):
    """What `policies.server` drives: sync batched generation and weight updates.

    Implementations: `policies.generation.GenerationEngine` (a real model), `policies.replicas.ReplicatedEngine`
    (continuous engines in several processes, CPU) and `policies.fake_engine.ScriptedEngine` (deterministic, for
    tests).
    """

    model_name: str
    context_length: int
    vocab_size: int
    weights_version: int

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        """Raise EngineError naming the problem when this prompt/params pair cannot be served."""

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        """Blocking: one completion per (prompt, params) pair; may run in a worker thread."""

    def load_checkpoint(self, path: Path, version: int | None = None) -> int:
        """Load weights from a checkpoint directory or safetensors file; returns the new version."""

    def load_safetensors(self, data: bytes, version: int | None = None) -> int:
        """Load (possibly a subset of) the weights from safetensors bytes; returns the new version."""
