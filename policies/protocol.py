"""Wire types of the OpenAI-compatible server, with the RL extensions vLLM/SGLang users expect.

Requests forbid unknown fields (a typo must not silently fall back to a default). Extensions:
`top_k`, `stop_token_ids`, `return_routed_experts` in; `token_ids`, `raw_logprobs`,
`routed_experts`, `token_versions`, `stop_reason` per choice and `weights_version` per response out. Token-id
prompts (`prompt: [1, 2, 3]` or a list of such lists) need no tokenizer. OpenAI's `stream` (Server-Sent Events of
the `*Chunk` types below), `stop` strings, and on chat `tools`, `tool_choice` and tool-call messages are read too.

Every list and string of a request has a bound here (the server's parser bounds the body as a whole before these
models see it, policies/request_bounds.py). A list is validated to its first bad item, never item by item into
one error each (a million bad items were a million error records), and the prompt's union is picked by the shape
of its first item, not by trying each member in turn.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    WithJsonSchema,
    model_validator,
)

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


MAX_TOKEN_IDS = 1 << 20
"""Longest token-id list of a request (a prompt, a scored sequence); the engine's context is the tighter bound."""
MAX_LISTS = 1 << 16
"""Most prompts, messages or scored sequences in one request (the server's max_sequences_per_request is tighter)."""
MAX_STOP_TOKEN_IDS = 1024
"""Most stop token ids (the gym sends Harmony's 3)."""
MAX_NAME_CHARS = 1024
"""Longest `model`, `user` or message `name`."""
MAX_WEIGHTS_VERSION = (1 << 63) - 1
"""Largest weights version (an int64, as the trainer counts them)."""
MAX_PATH_CHARS = 4096
"""Longest weights path (Linux's PATH_MAX)."""
MAX_STOP_STRINGS = 4
"""Most `stop` strings (OpenAI's limit)."""
MAX_STOP_CHARS = 256
"""Longest `stop` string: the server looks for each in the tail of the decoded text after every token."""
MAX_TOOLS = 128
"""Most `tools` of a chat request (OpenAI's limit)."""
MAX_TOOL_CALLS = 16
"""Most `tool_calls` of one assistant message in a chat's history."""
MAX_DESCRIPTION_CHARS = 8192
"""Longest tool description (the rendered tools must fit the context besides)."""


def token_id_list(max_length: int, min_length: int = 0):
    """A list of token ids (integers >= 0, not booleans), at most ``max_length`` of them, checked in one pass that
    stops at the first bad item and names it: one error, whatever the list's length."""

    def check(value: Any) -> list[int]:
        if not isinstance(value, list):
            raise ValueError(f"must be a list of token ids, got {type(value).__name__}")
        if not min_length <= len(value) <= max_length:
            raise ValueError(f"holds {len(value)} token ids; give {min_length} to {max_length}")
        if not all(type(t) is int and t >= 0 for t in value):
            index, bad = next((i, t) for i, t in enumerate(value) if not (type(t) is int and t >= 0))
            raise ValueError(f"item {index}: {str(bad)[:40]} is not a token id (an integer greater than or equal to 0)")
        return value

    schema = {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": max_length}
    return Annotated[list[int], PlainValidator(check), WithJsonSchema(schema)]


def bounded(item, max_length: int, min_length: int = 0):
    """A list of ``item`` of at most ``max_length`` items, validated up to its first bad one (fail_fast)."""
    return Annotated[list[item], Field(min_length=min_length, max_length=max_length, fail_fast=True)]


Text = Annotated[str, AfterValidator(_unicode)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_unicode)]
TokenIds = token_id_list(MAX_TOKEN_IDS)


def _prompt_kind(value: Any) -> str:
    """Which member of `CompletionRequest.prompt` a value is read as, by its shape (one member validated)."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "batch"
    if isinstance(value, list) and value and isinstance(value[0], str):
        return "texts"
    return "ids"


PromptField = Annotated[
    Annotated[token_id_list(MAX_TOKEN_IDS, min_length=1), Tag("ids")]
    | Annotated[bounded(TokenIds, MAX_LISTS, min_length=1), Tag("batch")]
    | Annotated[Text, Field(min_length=1), Tag("text")]
    | Annotated[bounded(Text, MAX_LISTS, min_length=1), Tag("texts")],
    Discriminator(_prompt_kind),
]


StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS), AfterValidator(_unicode)]


class StreamOptions(BaseModel):
    model_config = _REQUEST

    include_usage: bool = False
    """Send one more chunk before ``data: [DONE]``: no choices, the request's `usage`."""


class _Sampling(BaseModel):
    model_config = _REQUEST

    model: Name | None = None
    """The served model's name (`/v1/models`); another is a 404 ``model_not_found``; omitted: the one model."""
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
    stop_token_ids: token_id_list(MAX_STOP_TOKEN_IDS) = []  # type: ignore[valid-type]
    """Sampling one ends the completion; the engine checks each sampled token against a set of them."""
    stream: bool = False
    """Answer as Server-Sent Events, one chunk per decoded piece, then ``data: [DONE]`` (one sequence: n 1)."""
    stream_options: StreamOptions | None = None
    """Only with ``stream``."""
    stop: StopString | bounded(StopString, MAX_STOP_STRINGS) | None = None  # type: ignore[valid-type]
    """Strings that end the completion once its decoded text holds one; the text returned stops before it (the
    token ids and logprobs keep every sampled token, the one that completed the string included)."""
    user: Name | None = None
    return_routed_experts: bool = False

    @property
    def stop_strings(self) -> list[str]:
        """`stop` as a list (duplicates dropped)."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return list(dict.fromkeys(stops))

    @model_validator(mode="after")
    def _stream_fields(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        if self.stream and self.n > 1:
            raise ValueError("stream: true streams one sequence: n must be 1")
        return self

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
    prompt: PromptField
    """Token ids (one prompt or a batch) or text (needs the server's tokenizer)."""
    max_tokens: int = Field(16, ge=1, le=MAX_TOKEN_IDS)
    logprobs: int | None = Field(None, ge=0, le=20)
    """Accepted; the sampled tokens' logprobs are always returned, top_logprobs is null."""
    echo: Literal[False] = False
    """Echoing the prompt is not supported."""


ToolName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
"""A function's name as every chat format writes it in a call (letters, digits and _, at most 64)."""


class TextPart(BaseModel):
    model_config = _REQUEST

    type: Literal["text"]
    text: Text


class FunctionCall(BaseModel):
    model_config = _REQUEST

    name: ToolName
    arguments: Text
    """A JSON object, as text (OpenAI's form)."""


class ToolCallMessage(BaseModel):
    """A call an assistant message of the history made."""

    model_config = _REQUEST

    id: Name
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = _REQUEST

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | bounded(TextPart, MAX_LISTS) | None = None  # type: ignore[valid-type]
    """Text, or text parts (joined); null only for an assistant message with `tool_calls` (the chat's text is
    bounded by the context before it is tokenized)."""
    name: Name | None = None
    tool_calls: bounded(ToolCallMessage, MAX_TOOL_CALLS, min_length=1) | None = None  # type: ignore[valid-type]
    """Assistant messages only: the calls it made, answered by the `tool` messages after it."""
    tool_call_id: Name | None = None
    """Tool messages only: the call this result answers."""

    @model_validator(mode="after")
    def _fields_of_role(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"a {self.role} message has no tool_calls")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError(f"a {self.role} message has no tool_call_id")
        if self.content is None and self.tool_calls is None:
            raise ValueError(f"a {self.role} message needs content")
        return self

    @property
    def text(self) -> str:
        """The content as one text ('' for none)."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class FunctionSpec(BaseModel):
    model_config = _REQUEST

    name: ToolName
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS), AfterValidator(_unicode)] = ""
    parameters: dict[str, Any] | None = None
    """The arguments' JSON schema (the body's depth and size bounds hold it)."""
    strict: bool | None = None
    """Accepted; decoding is not constrained to the schema."""


class ToolSpec(BaseModel):
    model_config = _REQUEST

    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(BaseModel):
    model_config = _REQUEST

    name: ToolName


class NamedToolChoice(BaseModel):
    model_config = _REQUEST

    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(_Sampling):
    messages: bounded(ChatMessage, MAX_LISTS, min_length=1)  # type: ignore[valid-type]
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_IDS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_IDS)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: bounded(ToolSpec, MAX_TOOLS) | None = None  # type: ignore[valid-type]
    """Functions the model may call, rendered into the prompt by the chat format (docs/policy.md)."""
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """auto (the default with tools), none (tools not rendered, nothing parsed as a call), required or one
    named function (only that tool rendered; a turn that is no such call comes back as content)."""
    parallel_tool_calls: bool | None = None
    """Accepted; every chat format parses one call per turn."""

    @model_validator(mode="after")
    def _tool_fields(self) -> ChatCompletionRequest:
        names = [tool.function.name for tool in self.tools or []]
        if len(set(names)) != len(names):
            twice = next(name for name in names if names.count(name) > 1)
            raise ValueError(f"tools: function {twice!r} is given twice")
        choice = self.tool_choice
        if choice is not None and choice != "none" and not names:
            raise ValueError("tool_choice other than none needs tools")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ValueError(f"tool_choice names function {choice.function.name!r}, which is not in tools")
        return self

    @property
    def offered_tools(self) -> list[ToolSpec]:
        """The tools rendered into the prompt (`tool_choice` decides)."""
        choice = self.tool_choice
        if choice == "none" or not self.tools:
            return []
        if isinstance(choice, NamedToolChoice):
            return [tool for tool in self.tools if tool.function.name == choice.function.name]
        return list(self.tools)


class UpdateWeightsRequest(BaseModel):
    model_config = _REQUEST

    path: Annotated[str, Field(max_length=MAX_PATH_CHARS)]
    """Checkpoint to load: a safetensors file or a directory of them (e.g. a save_pretrained output)."""
    version: int | None = Field(None, ge=0, le=MAX_WEIGHTS_VERSION)
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
    stop_reason: str | None = None
    """The `stop` string that ended the completion (vLLM's field); None for a stop token or the length."""
    token_ids: list[int]
    raw_logprobs: list[float]
    routed_experts: Routes | None = None
    token_versions: Annotated[list[int], Field(max_length=MAX_TOKEN_IDS)] | None = None
    """The weights version that sampled each token (as many as `token_ids`, non-decreasing, none above the
    response's `weights_version`): with partial rollouts a completion in flight goes on under newer weights."""
    prompt_token_ids: list[int]


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    weights_version: int
    """The newest weights version that sampled any token of this response (each token's: `token_versions`)."""


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list = []


class ChatChoiceLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class CalledFunction(BaseModel):
    name: str
    arguments: str
    """The JSON arguments object as text."""


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]
    stop_reason: str | None = None
    """As `CompletionChoice.stop_reason`."""
    token_ids: list[int]
    raw_logprobs: list[float]
    routed_experts: Routes | None = None
    token_versions: Annotated[list[int], Field(max_length=MAX_TOKEN_IDS)] | None = None
    """As `CompletionChoice.token_versions`."""


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    weights_version: int


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"] | None = None
    stop_reason: str | None = None
    token_ids: list[int]
    """The tokens this chunk adds (the chunks' lists, joined, are the whole completion's `token_ids`)."""


class CompletionChunk(BaseModel):
    """One Server-Sent Event of a streamed completion."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None
    """On the last chunk only (no choices), with ``stream_options.include_usage``."""
    weights_version: int | None = None
    """On the chunk that carries the finish reason."""


class ToolCallDelta(BaseModel):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    stop_reason: str | None = None
    token_ids: list[int] = []
    """As `CompletionChunkChoice.token_ids`."""


class ChatCompletionChunk(BaseModel):
    """One Server-Sent Event of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    """As `CompletionChunk.usage`."""
    weights_version: int | None = None
