"""Wire types of the OpenAI-compatible server, with the RL extensions vLLM/SGLang users expect.

Requests forbid unknown fields (a typo must not silently fall back to a default). Extensions:
`top_k`, `stop_token_ids`, `return_routed_experts` in; `token_ids`, `raw_logprobs`,
`routed_experts` per choice and `weights_version` per response out. Token-id prompts
(`prompt: [1, 2, 3]` or a list of such lists) need no tokenizer.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from policies.sampling import MAX_SEED, Routes, SamplingParams

# Strict: a token id `true` or `2.0`, or `"max_tokens": "16"`, is the client's bug, answered 400, not coerced.
_REQUEST = ConfigDict(extra="forbid", use_attribute_docstrings=True, strict=True)

MAX_TOP_K = 1 << 31
"""Past the largest vocabulary any model has, top-k keeps everything; larger values overflowed the sampler."""


def _unicode(text: str) -> str:
    """A JSON "\\ud800" escape decodes to a lone surrogate, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"holds a lone surrogate {text[err.start]!r} at character {err.start}: not Unicode text"
        ) from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]
TokenId = Annotated[int, Field(ge=0)]


class _Sampling(BaseModel):
    model_config = _REQUEST

    model: str | None = None
    """Accepted for client compatibility; the server has one model."""
    temperature: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """0 (greedy) or at least `policies.sampling.MIN_TEMPERATURE`; a number too large for JSON's float (1e999)
    is refused like Infinity."""
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int = Field(0, ge=-1, le=MAX_TOP_K)
    """0 or -1 (vLLM's spelling) disable top-k."""
    n: int = Field(1, ge=1, le=64)
    """Completions per prompt (seeded ones use seed, seed + 1, ...)."""
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    """At most 2**62: a larger seed is this request's 400, never a failure of the batch it would join."""
    stop_token_ids: list[TokenId] = []
    stream: Literal[False] = False
    """Streaming is not supported."""
    user: Text | None = None
    return_routed_experts: bool = False

    def sampling_params(self, max_tokens: int, extra_stops: tuple[int, ...] | list[int] = ()) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            stop_token_ids=tuple(self.stop_token_ids) + tuple(extra_stops),
            seed=self.seed,
            return_routed_experts=self.return_routed_experts,
        )


class CompletionRequest(_Sampling):
    prompt: list[int] | list[list[int]] | Text | list[Text] = Field(min_length=1)
    """Token ids (one prompt or a batch) or text (needs the server's tokenizer)."""
    max_tokens: int = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    """Accepted; the sampled tokens' logprobs are always returned, top_logprobs is null."""
    echo: Literal[False] = False
    """Echoing the prompt is not supported."""


class ChatMessage(BaseModel):
    model_config = _REQUEST

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text
    name: Text | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class UpdateWeightsRequest(BaseModel):
    model_config = _REQUEST

    path: str
    """Checkpoint to load: a safetensors file or a directory of them (e.g. a save_pretrained output)."""
    version: int | None = Field(None, ge=0)
    """Weights version to report from now on; default: current + 1."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs
    finish_reason: Literal["stop", "length"]
    token_ids: list[int]
    raw_logprobs: list[float]
    routed_experts: Routes | None = None
    prompt_token_ids: list[int]


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    weights_version: int


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list = []


class ChatChoiceLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatChoiceLogprobs | None
    finish_reason: Literal["stop", "length"]
    token_ids: list[int]
    raw_logprobs: list[float]
    routed_experts: Routes | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    weights_version: int
