"""A memory plan of a training config: per-rank bytes of parameters, gradients, optimizer state and activations.

`plan(config, gpus, gpu_memory_gib)` answers "does this run fit on these GPUs?" before anything is loaded.
It reads only the policy's config: the model is built on the ``meta`` device (no memory, no weights), so
the parameter counts are exact for any Hugging Face causal LM and for our RDEP policy, and the split into
routed experts (RDEP-sharded over every rank) and everything else (FSDP-sharded when
``distributed.fsdp.enabled``, else replicated) is the trainer's own (`trainer.distributed.sharded_parameters`
marks the same expert shards).

Per rank (W = gpus):

- parameters: master weights in ``config.dtype`` (fp32 by default), dense / W under FSDP, experts / W
  under expert parallelism; plus, under FSDP, the unsharded copies of the two largest blocks in compute
  dtype (the block running and the one prefetched).
- gradients: the trainable parameters, sharded as the parameters, in the master dtype.
- optimizer: AdamW's two moments in fp32 for every trainable parameter, sharded as the parameters.
- activations: what autograd keeps for backward over one micro batch (``loop.micro_batch_size`` sequences of
  ``environment.episode.max_total_tokens``), from the per-layer count below in compute dtype (bf16 under
  mixed precision, else the master dtype); with activation checkpointing each block keeps only its input and
  one block at a time holds its full set during recomputation.
- reference: the frozen KL reference (``algorithm.kl.coef > 0``), sharded as the parameters.
- engine (rank 0, in-process engine only): the engine's copy of the weights and its KV cache for
  ``engine.max_batch_size`` sequences of ``max_total_tokens``.

The per-layer activation count is written out here (why by hand: autograd's saved tensors depend on the
attention kernel, and the meta device runs only the math kernel, which keeps the (T x T) probabilities a
fused kernel never stores). Per token of one decoder layer, in elements: each of the two RMSNorms keeps its
input, the normalised row, its weighted output and 1/rms (3h + 1); attention keeps q after RoPE, k, v, its
output and the kernel's logsumexp per head (2q + 2kv + heads); a SwiGLU MLP keeps gate, up, silu(gate) and
their product (4i); a routed MoE layer keeps, per chosen expert, the row sent and returned (2h) and the
expert's SwiGLU (4 i_moe), plus the router's logits (E) and any shared experts' SwiGLU (the router's
probabilities and the chosen gates, a few more per token, are left out). Our RDEP policy repeats k and v to every
head before attention (2q instead of 2kv); a trainer batch is right-padded, so it takes the causal kernel and
hands attention no mask (`policies.attention.causal_suffices`). The final norm keeps 2h + 1 per token; the LM
head runs on sampled tokens only through the fused logprob kernel (`kernels.token_logprob_entropy`) and keeps no
(T x V) logits. A CPU test checks this count against the
bytes autograd actually saves for two small Qwen2 models and the RDEP policy (tests/unit/test_memory_plan.py).

CPU offload moves parameters, gradients and optimizer state to host memory: they are reported as host bytes
and leave the GPU with the gathered blocks only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

GIB = 1 << 30

HEADROOM = 0.10
"""Share of each GPU the plan leaves free: the CUDA context, NCCL buffers and the caching allocator's
fragmentation (typically 0.5-2 GiB on an 80 GiB GPU, more under fragmentation)."""

ADAM_MOMENTS = 2


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of an architecture: exact parameter counts (meta init) and the layer widths."""

    params_total: int
    expert_params: int  # routed experts RDEP shards over ranks (ours only)
    largest_block_params: int  # the biggest decoder layer (FSDP unshards one at a time, plus one prefetched)
    layers: int
    hidden: int
    heads: int
    q_dim: int
    kv_dim: int
    intermediate: int
    moe_layers: int
    moe_intermediate: int
    experts: int
    top_k: int
    shared_intermediate: int  # the shared experts' total width in a MoE layer
    kv_saved: int  # width of the k and v attention keeps: kv_dim, or q_dim when heads are repeated first (ours)


@dataclass(frozen=True)
class Setting:
    """The run settings that decide memory, read from a TrainConfig."""

    gpus: int
    gpu_memory_bytes: int
    master_bytes: int  # bytes per master weight (config.dtype)
    compute_bytes: int  # bytes per activation / gathered weight
    fsdp: bool
    expert_parallel: bool
    activation_checkpointing: bool
    cpu_offload: bool
    micro_batch: int
    sequence: int
    engine_in_process: bool
    engine_batch: int
    reference: bool  # a frozen KL reference copy (algorithm.kl.coef > 0)
    trainable_params: int | None  # None: every parameter trains


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank bytes; ``rank0_engine`` is on rank 0 only (an in-process engine)."""

    params_total: int
    expert_params: int
    trainable_params: int
    gpus: int
    gpu_memory_bytes: int
    parameters: int
    gathered_blocks: int
    gradients: int
    optimizer: int
    activations: int
    reference: int
    rank0_engine: int
    host_offload: int
    total_rank0: int
    usable_bytes: int
    fits: bool

    def as_dict(self) -> dict:
        return asdict(self)


def model_shape(model: nn.Module) -> ModelShape:
    """Counts and widths of a model built on any device (the plan builds it on ``meta``)."""
    from policies.experts import ExpertShard
    from policies.modeling import RdepMoeForCausalLM

    config = model.config
    ours = isinstance(model, RdepMoeForCausalLM)
    experts = {id(p) for m in model.modules() if isinstance(m, ExpertShard) for p in m.parameters()}
    params = {id(p): p.numel() for p in model.parameters()}  # tied weights count once
    layers = _decoder_layers(model)
    largest = max((sum(p.numel() for p in layer.parameters()) for layer in layers), default=0)
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    num_experts = int(getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None) or 0)
    moe_layers = _moe_layers(config, len(layers)) if num_experts else 0
    shared = int(getattr(config, "num_shared_experts", 0) or 0) * int(getattr(config, "moe_intermediate_size", 0) or 0)
    shared = shared or int(getattr(config, "shared_expert_intermediate_size", 0) or 0)
    return ModelShape(
        params_total=sum(params.values()),
        expert_params=sum(n for i, n in params.items() if i in experts),
        largest_block_params=largest,
        layers=len(layers),
        hidden=hidden,
        heads=heads,
        q_dim=heads * head_dim,
        kv_dim=kv_heads * head_dim,
        intermediate=int(config.intermediate_size),
        moe_layers=moe_layers,
        moe_intermediate=int(getattr(config, "moe_intermediate_size", 0) or 0),
        experts=num_experts,
        top_k=int(getattr(config, "num_experts_per_tok", 0) or 0),
        shared_intermediate=shared,
        kv_saved=heads * head_dim if ours else kv_heads * head_dim,
    )


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers at model.layers; the plan reads only such models")
    return list(layers)


def _moe_layers(config, layers: int) -> int:
    if hasattr(config, "num_dense_layers"):  # ours: the first num_dense_layers are dense
        return layers - int(config.num_dense_layers)
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)  # Qwen2-MoE: every step-th layer
    skip = set(getattr(config, "mlp_only_layers", []) or [])
    return sum(1 for i in range(layers) if (i + 1) % step == 0 and i not in skip)


def activation_elements_per_token(shape: ModelShape) -> tuple[int, int]:
    """(all layers, the largest one layer): elements autograd keeps per token (the same at any row length: no
    kernel here keeps a (T x T) tensor)."""
    h = shape.hidden
    norms = 2 * (3 * h + 1)  # each RMSNorm: input, normalised, weighted output, 1/rms
    attention = norms + 2 * shape.q_dim + 2 * shape.kv_saved + shape.heads  # q, output, k, v, logsumexp
    dense = attention + 4 * shape.intermediate
    moe = attention + shape.top_k * (2 * h + 4 * shape.moe_intermediate) + shape.experts + 4 * shape.shared_intermediate
    dense_layers = shape.layers - shape.moe_layers
    total = dense_layers * dense + shape.moe_layers * moe + 2 * h + 1  # + the final norm (input is counted)
    largest = max(dense if dense_layers else 0, moe if shape.moe_layers else 0)
    return total, largest


def memory_plan(shape: ModelShape, setting: Setting) -> MemoryPlan:
    """The plan of ``shape`` under ``setting`` (pure: no model, no device)."""
    w = setting.gpus
    dense = shape.params_total - shape.expert_params
    experts_local = math.ceil(shape.expert_params / w) if setting.expert_parallel else shape.expert_params
    dense_local = math.ceil(dense / w) if setting.fsdp else dense
    if setting.trainable_params is None:  # every parameter trains
        trainable, trainable_local = shape.params_total, dense_local + experts_local
    else:  # adapters: sharded with their layers under FSDP, else replicated
        trainable = setting.trainable_params
        trainable_local = math.ceil(trainable / w) if setting.fsdp else trainable

    adapters = 0 if setting.trainable_params is None else trainable_local
    parameters = (dense_local + experts_local + adapters) * setting.master_bytes
    gradients = trainable_local * setting.master_bytes
    optimizer = trainable_local * ADAM_MOMENTS * 4
    unshards = setting.fsdp and (w > 1 or setting.compute_bytes != setting.master_bytes)
    gathered = 2 * shape.largest_block_params * setting.compute_bytes if unshards else 0
    reference = parameters if setting.reference else 0  # the frozen KL reference, sharded as the policy

    tokens = setting.micro_batch * setting.sequence
    per_token, largest_layer = activation_elements_per_token(shape)
    if setting.activation_checkpointing:
        kept = tokens * (shape.layers * shape.hidden + largest_layer + 2 * shape.hidden)
    else:
        kept = tokens * per_token
    activations = kept * setting.compute_bytes

    engine = 0
    if setting.engine_in_process:
        kv = setting.engine_batch * setting.sequence * shape.layers * 2 * shape.kv_dim
        engine = (shape.params_total + kv) * setting.master_bytes

    host = 0
    if setting.cpu_offload:
        host = parameters + gradients + optimizer + reference
        parameters = gradients = optimizer = reference = 0
    total = parameters + gathered + gradients + optimizer + activations + reference + engine
    usable = int(setting.gpu_memory_bytes * (1 - HEADROOM))
    return MemoryPlan(
        params_total=shape.params_total,
        expert_params=shape.expert_params,
        trainable_params=trainable,
        gpus=w,
        gpu_memory_bytes=setting.gpu_memory_bytes,
        parameters=parameters,
        gathered_blocks=gathered,
        gradients=gradients,
        optimizer=optimizer,
        activations=activations,
        reference=reference,
        rank0_engine=engine,
        host_offload=host,
        total_rank0=total,
        usable_bytes=usable,
        fits=total <= usable,
    )


def meta_model(config) -> nn.Module:
    """The trainable model of a TrainConfig's policy on the ``meta`` device: no memory, no weights read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM
    from policies.serve_config import MoEPolicySource
    from trainer.checkpoint import model_directory

    source = config.policy
    with torch.device("meta"):
        if isinstance(source, MoEPolicySource) and source.model is not None:
            return RdepMoeForCausalLM(RdepMoeConfig.from_architecture(source.model))
        path = model_directory(source.checkpoint if isinstance(source, MoEPolicySource) else source.path)
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(Path(path), local_files_only=True))


def setting_of(config, gpus: int, gpu_memory_gib: float, trainable_params: int | None = None) -> Setting:
    """The memory-relevant settings of a TrainConfig, planned for ``gpus`` GPUs of ``gpu_memory_gib`` each."""
    fsdp = getattr(config.distributed, "fsdp", None)
    enabled = bool(getattr(fsdp, "enabled", False))
    master = 2 if config.dtype == "bfloat16" else 4
    mixed = enabled and getattr(fsdp, "mixed_precision", "auto") in ("auto", "bfloat16")  # auto: bf16 on a GPU
    return Setting(
        gpus=gpus,
        gpu_memory_bytes=int(gpu_memory_gib * GIB),
        master_bytes=master,
        compute_bytes=2 if mixed else master,
        fsdp=enabled,
        expert_parallel=config.distributed.expert_parallel,
        activation_checkpointing=enabled and bool(getattr(fsdp, "activation_checkpointing", False)),
        cpu_offload=enabled and bool(getattr(fsdp, "cpu_offload", False)),
        micro_batch=config.loop.micro_batch_size,
        sequence=config.env.episode.max_total_tokens,
        engine_in_process=config.engine.type == "in_process",
        engine_batch=config.engine.max_batch_size,
        reference=config.algorithm.kl.coef > 0,
        trainable_params=trainable_params,
    )


def lora_params(model: nn.Module, config) -> int | None:
    """Adapter parameters of the config's ``lora`` section (r * (in + out) per targeted Linear), None without one."""
    lora = getattr(config, "lora", None)
    if lora is None:
        return None
    targets = tuple(lora.target_modules)
    return sum(
        lora.r * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets)
    )


def plan(config, gpus: int, gpu_memory_gib: float) -> MemoryPlan:
    """The memory plan of a resolved TrainConfig on ``gpus`` GPUs of ``gpu_memory_gib`` GiB each."""
    model = meta_model(config)
    return memory_plan(model_shape(model), setting_of(config, gpus, gpu_memory_gib, lora_params(model, config)))


def describe(result: MemoryPlan, setting: Setting) -> str:
    """The plan as the lines `gym plan` prints."""
    gib = lambda n: f"{n / GIB:9.2f} GiB"  # noqa: E731
    notes = []
    if setting.fsdp:
        notes.append("FSDP2")
    if setting.expert_parallel and result.expert_params and result.gpus > 1:
        notes.append("RDEP experts")
    if setting.activation_checkpointing:
        notes.append("activation checkpointing")
    if setting.compute_bytes != setting.master_bytes:
        notes.append("bf16 compute")
    if setting.cpu_offload:
        notes.append("CPU offload")
    lines = [
        f"parameters      {result.params_total:,} ({result.trainable_params:,} trainable)",
        f"ranks           {result.gpus} x {result.gpu_memory_bytes / GIB:.0f} GiB ({', '.join(notes) or 'replicated'})",
        f"micro batch     {setting.micro_batch} x {setting.sequence} tokens",
        "per rank:",
        f"  parameters    {gib(result.parameters)}",
        f"  gathered      {gib(result.gathered_blocks)}  (two unsharded blocks)",
        f"  gradients     {gib(result.gradients)}",
        f"  optimizer     {gib(result.optimizer)}",
        f"  activations   {gib(result.activations)}",
    ]
    if result.reference:
        lines.append(f"  reference     {gib(result.reference)}  (frozen KL reference)")
    if result.rank0_engine:
        lines.append(f"  engine        {gib(result.rank0_engine)}  (rank 0: in-process engine weights + KV cache)")
    if result.host_offload:
        lines.append(f"  host (offload){gib(result.host_offload)}")
    lines.append(f"  total         {gib(result.total_rank0)}  of {gib(result.usable_bytes)} usable")
    verdict = "fits" if result.fits else "does NOT fit"
    lines.append(
        f"{verdict}: {result.total_rank0 / GIB:.2f} GiB per rank of {result.usable_bytes / GIB:.2f} GiB usable"
    )
    return "\n".join(lines)
