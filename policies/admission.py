"""The policy server's one way in: what each request will cost in memory, and whether it may have it now.

Every route that reads a body takes a `Hold` before its first byte arrives and keeps it until its answer is
built. The hold grows, each step before the allocation it pays for: the body's bytes as they arrive, then the
parse (`parse_bytes`, from the shape `policies.request_bounds.measure` read in the bytes), then the work itself
(`completion_bytes`, `score_bytes`). A step that would take one request past ``request_bytes`` is a 413 (this
request can never be served: make it smaller); one that would take the server's holds together past
``total_bytes`` is a 503 (retry later). Engine and verifier requests are then admitted, at most ``max_requests``
at once (503 beyond). Weight updates are their own lane (one at a time, `max_body_bytes`): their bytes count in
the total, so requests see less room while one loads, but an update is never refused for load (the trainer's
push would fail).

The estimates are upper bounds built from measured costs (each constant says what was measured), so a request
within its hold never allocates much beyond it; they err on the high side by about 2x.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from policies.request_bounds import BodyShape

MIB = 1 << 20

BODY_COPIES = 2
"""A body read in pieces is held in a growing bytearray, then as bytes: twice its size, briefly."""
DECODED_BYTES_PER_BYTE = 4
"""The body decoded to str: up to 4 bytes a character (one character past U+FFFF makes the whole string UCS-4)."""
VALUE_BYTES = 200
"""Python objects per JSON value after `json.loads` and the request model (tracemalloc: 14 B for a list of a million
small ints, 31 B for 65,536 one-token prompts, 100 B for 65,536 chat messages; x2)."""
OUTPUT_TOKEN_BYTES = 1200
"""Per sampled token of a sequence: the engine's token and logprob lists, then the response's pieces, offsets,
logprobs and JSON (tracemalloc: 540-750 B a token for 1-64 sequences; x1.6)."""
PROMPT_TOKEN_BYTES = 400
"""Per prompt token of a sequence: the engine's copies of it and `prompt_token_ids` in the response (~200 B)."""
ROUTE_BYTES = 500
"""Per (MoE layer, position) of a sequence that returns its routes: the engine's arrays and views, then nested
lists and JSON in the response (~240 B with 2 experts a token)."""
ACTIVATION_FACTOR = 1.5
"""Prefill activations per prompt token, on `ModelShape.token_floats` (tiny policy: 6.5 KB measured a token against
8 KB counted; x1.5)."""
MASK_BYTES = 8
"""Per (query, key) cell of a prefill or scoring forward: the (B, 1, T, S) attention mask and what SDPA makes of
it (VmHWM: 4 B a cell for 1-32 prompts of 512-4000 tokens, the tiny policy; x2). SDPA's CPU kernel does not
materialise per-head scores."""
SLOT_BYTES = 200
"""Per scored position: its index and score as Python objects, then in the answer's JSON (~100 B)."""
TOKENIZE_BYTES_PER_CHAR = 64
"""Tokenizing text: the `tokenizers` encoding and its id list per character (at most one token a character)."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a causal LM that set its activations' memory."""

    layers: int
    hidden: int
    intermediate: int
    kv_width: int  # kv heads x head dim
    moe_layers: int
    experts_per_token: int
    expert_intermediate: int
    experts: int
    dtype_bytes: int

    @classmethod
    def of(cls, model) -> ModelShape:
        """The shape of a `transformers` model (ours or any causal LM)."""
        config = model.config
        heads = int(getattr(config, "num_attention_heads", 1))
        hidden = int(config.hidden_size)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        layers = int(config.num_hidden_layers)
        experts = int(getattr(config, "num_experts", 0) or 0)
        dtype = next(model.parameters()).dtype
        return cls(
            layers=layers,
            hidden=hidden,
            intermediate=int(getattr(config, "intermediate_size", 4 * hidden)),
            kv_width=int(getattr(config, "num_key_value_heads", heads)) * head_dim,
            moe_layers=layers - int(getattr(config, "num_dense_layers", layers)) if experts else 0,
            experts_per_token=int(getattr(config, "num_experts_per_tok", 0) or 0),
            expert_intermediate=int(getattr(config, "moe_intermediate_size", 0) or 0),
            experts=experts,
            dtype_bytes=dtype.itemsize,
        )

    @property
    def token_floats(self) -> int:
        """Activations live at once per token of a forward (one layer's, the residual stream and the prefill's
        keys and values of every layer)."""
        mlp = 4 * self.intermediate + 4 * self.experts_per_token * self.expert_intermediate + self.experts
        return 16 * self.hidden + mlp + 2 * self.layers * self.kv_width


def host_shape(model) -> ModelShape | None:
    """The shape of ``model`` when its activations live in this process's memory (on the CPU); None on a GPU,
    whose memory bounds them itself (engine.max_batch_size, prefill_chunk): requests then cost their Python
    objects here."""
    if model is None or next(model.parameters()).device.type != "cpu":
        return None
    return ModelShape.of(model)


def engine_shape(engine) -> ModelShape | None:
    """`host_shape` of the model behind a serving engine (a `GenerationEngine`, or the local engine of replicas);
    None for an engine without a model (`ScriptedEngine`)."""
    policy = getattr(engine, "policy", None) or getattr(getattr(engine, "local", None), "policy", None)
    return host_shape(getattr(policy, "model", None))


def parse_bytes(shape: BodyShape) -> int:
    """Parsing a body of ``shape`` (after its scan, `policies.request_bounds.scan_bytes`): its decoded text and the
    objects of its values."""
    return DECODED_BYTES_PER_BYTE * shape.size + VALUE_BYTES * shape.values


def forward_bytes(model: ModelShape, length: int) -> int:
    """One sequence of ``length`` tokens through a forward at once (a prefill, or the verifier's)."""
    return int(ACTIVATION_FACTOR * length * model.token_floats * model.dtype_bytes) + MASK_BYTES * length * length


def completion_bytes(
    model: ModelShape | None,
    prompts: list[int],
    n: int,
    max_tokens: int,
    routes: bool,
    continuous: bool,
) -> int:
    """A completion request of ``prompts`` (their lengths), each sampled ``n`` times up to ``max_tokens`` tokens.

    The continuous engine prefills each prompt once for its ``n`` rows (a static KV cache, allocated at start);
    the batch engine left-pads every row to the longest prompt and grows a KV cache per row."""
    sequences, prompt_tokens = len(prompts) * n, sum(prompts) * n
    cost = PROMPT_TOKEN_BYTES * prompt_tokens + OUTPUT_TOKEN_BYTES * sequences * max_tokens
    if model is None:
        return cost
    if continuous:
        cost += sum(forward_bytes(model, length) for length in prompts)
    else:
        width = max(prompts)
        kv_cache = 2 * model.layers * model.kv_width * (width + max_tokens) * model.dtype_bytes
        cost += sequences * (forward_bytes(model, width) + kv_cache)
    if routes and model.moe_layers:
        cost += ROUTE_BYTES * model.moe_layers * (prompt_tokens + sequences * max_tokens)
    return cost


def score_bytes(model: ModelShape | None, sequences: int, width: int, slots: int) -> int:
    """A verifier forward over ``sequences`` right-padded to ``width`` tokens, read at ``slots`` positions in all
    (the head runs on the two label rows only: no (slots, vocabulary) logits)."""
    inputs = 3 * 8 * sequences * width  # ids and attention mask (int64), and the Python lists they came from
    answer = SLOT_BYTES * slots
    if model is None:
        return inputs + answer
    return sequences * forward_bytes(model, width) + inputs + answer + slots * model.hidden * model.dtype_bytes


class Refused(Exception):
    """A request the server will not take: 413 (it can never fit: ``kind`` invalid_request_error) or 503 (not now:
    ``kind`` overloaded)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = "overloaded" if status == 503 else "invalid_request_error"


class Admission:
    """The server's budget of requests and memory (module docstring); thread-safe (requests parse off the loop)."""

    def __init__(self, max_requests: int, request_bytes: int, total_bytes: int) -> None:
        self.max_requests = max_requests
        self.request_bytes = request_bytes
        self.total_bytes = total_bytes
        self.admitted = 0  # requests handed to the engine or the verifier, not answered yet
        self.reserved = 0  # bytes held by every hold together
        self.refused = {413: 0, 503: 0}
        self._lock = threading.Lock()

    def hold(self) -> Hold:
        return Hold(self)

    def counts(self) -> dict[str, int]:
        """For /health: requests admitted, MiB held, refusals so far."""
        with self._lock:
            return {
                "admitted": self.admitted,
                "reserved_mib": -(-self.reserved // MIB),
                "refused_too_large": self.refused[413],
                "refused_busy": self.refused[503],
            }

    def _refuse(self, status: int, message: str) -> Refused:
        self.refused[status] += 1
        return Refused(status, message)


class Hold:
    """One request's share of the `Admission`: bytes reserved so far, and whether it was admitted. A context
    manager: everything is given back when the request is answered (or fails)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.bytes = 0
        self.admitted = False

    def add(self, nbytes: int, what: str, limit: tuple[int, str] | None = None, always: bool = False) -> None:
        """Reserve ``nbytes`` more for ``what``, before allocating them: `Refused` 413 past this request's bound
        (``limit``: (bytes, its option's name); default max_request_memory_bytes), 503 past the server's total
        (unless ``always``: a weight update is counted, never refused for load)."""
        bound, option = limit or (self.admission.request_bytes, "max_request_memory_bytes")
        admission = self.admission
        with admission._lock:
            if self.bytes + nbytes > bound:
                raise admission._refuse(
                    413,
                    f"request too large: {what} needs about {_mib(nbytes)} MiB, {_mib(self.bytes + nbytes)} MiB for "
                    f"the request in all; at most {_mib(bound)} MiB ({option})",
                )
            if not always and admission.reserved + nbytes > admission.total_bytes:
                raise admission._refuse(
                    503,
                    f"server overloaded: {what} needs about {_mib(nbytes)} MiB and requests in flight hold "
                    f"{_mib(admission.reserved)} of {_mib(admission.total_bytes)} MiB (max_inflight_memory_bytes); "
                    "retry later",
                )
            admission.reserved += nbytes
            self.bytes += nbytes

    def admit(self) -> None:
        """Count this request against max_queued_requests (`Refused` 503 when that many are admitted already)."""
        admission = self.admission
        with admission._lock:
            if admission.admitted >= admission.max_requests:
                raise admission._refuse(
                    503, f"server overloaded: {admission.admitted} requests already queued; retry later"
                )
            admission.admitted += 1
            self.admitted = True

    def release(self) -> None:
        admission = self.admission
        with admission._lock:
            admission.reserved -= self.bytes
            admission.admitted -= self.admitted
            self.bytes, self.admitted = 0, False

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _mib(nbytes: int) -> str:
    return f"{nbytes / MIB:.1f}"
