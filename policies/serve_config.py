"""Configuration of `python -m gym serve CONFIG` and the builders that turn it into an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.config import MoEArchitecture
from sandbox.config_file import load_config

_CONFIG = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ServeConfigError(ValueError):
    """A serve config file that cannot be used; the message names the file and the field."""


class MoEPolicySource(BaseModel):
    """Our RDEP MoE policy, from a checkpoint or freshly initialised."""

    model_config = _CONFIG

    type: Literal["rdep_moe"] = "rdep_moe"
    model: MoEArchitecture | None = None
    """Architecture for a fresh random init; leave out when `checkpoint` is set."""
    checkpoint: Path | None = None
    """A `save_pretrained` directory to load (its config.json fixes the architecture)."""
    seed: int = Field(0, ge=0)
    """Seed of the random init (ignored with a checkpoint)."""

    @model_validator(mode="after")
    def _one_source(self) -> MoEPolicySource:
        if (self.model is None) == (self.checkpoint is None):
            raise ValueError("give exactly one of `model` (fresh init) and `checkpoint` (saved policy)")
        return self


class HFPolicySource(BaseModel):
    """Any local Hugging Face causal-LM directory (Qwen2.5, Llama, ... or our own saved policy)."""

    model_config = _CONFIG

    type: Literal["hf"] = "hf"
    path: Path
    """Local model directory with config.json and safetensors weights (nothing is downloaded)."""


class EngineOptions(BaseModel):
    """How the generation engine runs."""

    model_config = _CONFIG

    max_batch_size: int = Field(32, ge=1)
    """Most sequences decoded together (continuous: the KV cache's slots); the batch modes' server merges
    queued requests up to this."""
    mode: Literal["continuous", "kv_cache", "recompute"] | None = None
    """continuous (the default for the RDEP policy): rows join and leave the running batch per step over a
    static KV cache; kv_cache (the default for other models): one batch per call with a growing cache;
    recompute: the whole sequence every step (reference/benchmark). See policies/generation.py."""
    pad_token_id: int = Field(0, ge=0)
    """Id used to left-pad prompts (masked out, never attended to)."""
    prefill_chunk: int | None = Field(None, ge=1)
    """continuous: prompt columns prefilled per decode step, so a long prompt never stalls the running rows for
    more than one chunk (None: an admitted group's prompts are prefilled in one step)."""
    cuda_graphs: bool | None = None
    """continuous, RDEP policy: replay the decode step from CUDA graphs captured at bucketed (rows, window)
    shapes (policies/cuda_graphs.py; None: on when the device is a GPU)."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op CPU threads of the server process (`gym serve`; None: torch's default, one per core). A
    small model decodes faster on one: the tiny policy about 1.45x over two on the 2-core VM (docs/log.md, "The generation engine")."""
    traced_decode: bool | None = None
    """continuous, RDEP policy, CPU: replay TorchScript traces of the decode step, one per (rows to a multiple of 8,
    columns to a multiple of 64) met (policies/cuda_graphs.py; None: on for the CPU). A step then runs its ops
    without the Python between them: the tiny policy's steps take ~20-40% less."""
    partial_rollouts: bool = False
    """A weight update lands between two decode steps instead of waiting for the completions in flight; they go
    on under the new weights (their cached keys and values kept) and report each token's version
    (`token_versions` of a choice). The trainer's ``loop.partial_rollouts`` is this for its in-process engine."""
    replicas: int = Field(1, ge=1)
    """continuous, RDEP policy, CPU: engines decoding side by side, this process's and ``replicas - 1`` spawned
    processes', each on ``threads`` torch threads (policies/replicas.py): one per core uses cores that a second
    torch thread cannot (docs/engine.md)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights and activations dtype."""
    device: str = "cpu"
    """torch device, e.g. cpu or cuda:0."""

    def traces_decode(self, device_type: str) -> bool:
        """`traced_decode` resolved for a policy on ``device_type`` (None: on for the CPU)."""
        return device_type == "cpu" if self.traced_decode is None else self.traced_decode


class ServerOptions(BaseModel):
    """The HTTP side."""

    model_config = _CONFIG

    host: str = "127.0.0.1"
    """Bind address; loopback by default (the weight-update endpoint reads local paths)."""
    port: int = Field(8000, ge=0, le=65535)
    """TCP port; 0 picks a free one (the chosen address is logged)."""
    max_queued_requests: int = Field(64, ge=1)
    """Requests admitted to the engine or the verifier at once, waiting or running, every route together (503
    beyond)."""
    max_body_bytes: int = Field(1 << 30, ge=1 << 16)
    """Largest weight upload (`/update_weights_from_tensors`, safetensors bytes)."""
    max_json_body_bytes: int = Field(8 << 20, ge=1 << 10)
    """Largest JSON request body (completions, chat, weight paths): a parsed body costs many times its
    size in memory, so it is refused (413) before it is read whole."""
    read_timeout_s: float = Field(30.0, gt=0)
    """Longest wait for a JSON request's body (408 past it) and for a connection's first request line and
    headers, or its next request (closed past it): a client that sends a byte a minute must not hold a
    connection for ever (slowloris)."""
    max_sequences_per_request: int = Field(256, ge=1)
    """Prompts x n of one request at most (400 above): one request must not become an engine batch far
    above max_batch_size that its neighbours wait behind."""
    max_json_values: int = Field(1 << 20, ge=1 << 10)
    """JSON values (numbers, strings, arrays, objects) in one body at most, counted in its bytes before it is
    parsed (413 above): a parsed value costs 14-100 bytes of Python objects against its 2 on the wire. The largest
    request the gym sends, one prompt of `episode.max_total_tokens` (32768 in configs/swe_smoke.yaml), holds
    ~33,000."""
    max_json_depth: int = Field(16, ge=4)
    """Nesting of arrays and objects in one body at most (400 above); requests nest 3 deep."""
    max_json_string_bytes: int = Field(4 << 20, ge=1 << 10)
    """Longest string in one body, in bytes as sent (413 above); text is bounded by the context besides."""
    max_json_number_chars: int = Field(40, ge=24)
    """Longest number in one body, in characters (400 above): a seed has at most 19 digits, a float's shortest
    form at most 24 characters; Python's int of a long digit run costs time quadratic in its length."""
    max_json_object_members: int = Field(256, ge=32)
    """Members of one JSON object at most (400 above); request objects have at most 20 (an unknown member is one
    error record of the request model's)."""
    max_request_memory_bytes: int = Field(1 << 30, ge=16 << 20)
    """Estimated memory of one request at most (413 above: make it smaller): its body, its parse, and its prefill,
    sampled tokens, routes and answer (or the verifier's forward), each reserved before it is allocated
    (policies/admission.py). The main job's requests (the tiny policy, one prompt of 1024 tokens): ~21 MiB; one
    filling the tiny policy's 4096-token context: ~180 MiB; one prompt of 32768 tokens through a model on the CPU
    needs ~8.6 GiB (its attention mask): raise this for it (on a GPU, activations are not counted here)."""
    max_inflight_memory_bytes: int = Field(4 << 30, ge=16 << 20)
    """Estimated memory of every request in flight together, from the first byte of its body to its answer, and a
    weight upload's (503 above: retry later; an upload itself is never refused for load)."""
    served_model_name: str | None = None
    """Name reported in responses and /v1/models, and the only `model` a request may name (404 otherwise);
    default: the policy's name."""
    stream_write_timeout_s: float = Field(30.0, gt=0)
    """Longest a streamed answer waits for its client to read (`stream: true`): past it the stream is abandoned
    and its rows stop, as for a client that went away."""

    @model_validator(mode="after")
    def _budgets(self) -> ServerOptions:
        if self.max_inflight_memory_bytes < self.max_request_memory_bytes:
            raise ValueError(
                f"max_inflight_memory_bytes ({self.max_inflight_memory_bytes}) is below max_request_memory_bytes "
                f"({self.max_request_memory_bytes}): a request within its own bound could never be admitted"
            )
        return self


class ServeConfig(BaseModel):
    """Top level of a serve YAML."""

    model_config = _CONFIG

    policy: Annotated[MoEPolicySource | HFPolicySource, Field(discriminator="type")]
    engine: EngineOptions = EngineOptions()
    server: ServerOptions = ServerOptions()
    tokenizer: Path | None = None
    """A `tokenizers` JSON file for text prompts and chat; token-id requests work without one."""
    chat_format: Literal["auto", "harmony", "qwen", "llama3", "deepseek"] = "auto"
    """The chat format of `/v1/chat/completions`, as the environment's ``chat_format``: auto picks the family
    whose tool-call format the chat template beside the tokenizer (tokenizer_config.json or
    chat_template.jinja in its directory) speaks, else Harmony; a family renders tools and parses tool calls,
    Harmony (the project's policy) renders chats without tools (docs/policy.md)."""
    verifier: Path | None = None
    """A process-verifier checkpoint (`python -m gym verifier` writes OUT/checkpoint) served on
    `POST /v1/score`; without one that route answers 400."""

    @classmethod
    def load(cls, path: str | Path) -> ServeConfig:
        """Read a YAML (or ``*.toml``) file (sandbox.config_file); relative paths inside are relative to the
        working directory (the repo root). ServeConfigError names the file and every invalid field's dotted path."""
        return load_config(path, cls, ServeConfigError)


def build_engine(config: ServeConfig):  # -> GenerationEngine (imports torch lazily)
    """The engine a serve config describes."""
    import torch

    from policies.generation import GenerationEngine
    from policies.hf_adapter import CausalLMPolicy, load_policy
    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM

    dtype = getattr(torch, config.engine.dtype)
    source = config.policy
    if isinstance(source, HFPolicySource):
        policy = load_policy(source.path, dtype=dtype, device=config.engine.device)
    elif source.checkpoint is not None:
        policy = load_policy(source.checkpoint, dtype=dtype, device=config.engine.device)
    else:
        torch.manual_seed(source.seed)
        model = RdepMoeForCausalLM(RdepMoeConfig.from_architecture(source.model)).to(dtype)
        policy = CausalLMPolicy(model.to(config.engine.device), name=f"rdep_moe-seed{source.seed}")
    if config.server.served_model_name:
        policy.name = config.server.served_model_name
    policy.model.requires_grad_(False)  # served, never trained here (and a traced step cannot hold grad weights)
    engine = GenerationEngine(
        policy,
        max_batch_size=config.engine.max_batch_size,
        mode=config.engine.mode,
        pad_token_id=config.engine.pad_token_id,
        prefill_chunk=config.engine.prefill_chunk,
        cuda_graphs=config.engine.cuda_graphs,
        traced_decode=config.engine.traces_decode(policy.device.type),
        partial_rollouts=config.engine.partial_rollouts,
    )
    return replicated(engine, config.engine.replicas, config.engine.threads)


def replicated(engine, replicas: int, threads: int | None):
    """``engine`` itself for one replica, else a `policies.replicas.ReplicatedEngine` of ``replicas`` (ServeConfigError
    where the engine cannot be replicated: not continuous, or not on the CPU)."""
    if replicas == 1:
        return engine
    if not engine.continuous or engine.policy.device.type != "cpu":
        raise ServeConfigError(
            f"engine.replicas: {replicas} needs the continuous engine on the CPU; this one runs {engine.mode} on "
            f"{engine.policy.device}"
        )
    from policies.replicas import ReplicatedEngine

    return ReplicatedEngine(engine, replicas, threads or 1)
