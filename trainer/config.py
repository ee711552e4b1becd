"""Configuration of a GRPO run: one pydantic model per component, YAML in, resolved JSON out.

`TrainConfig.load(path)` validates everything before anything starts; an error names the field
path (e.g. ``algorithm.clip_high``) and the reason. Relative paths are relative to the working
directory (the repository root).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from gym.overrides import Override, apply_overrides
from gym.registry import RegistryError, environment_config, environment_data
from policies.serve_config import HFPolicySource, MoEPolicySource
from sandbox.config_file import read_config, validate_config
from trainer.errors import ConfigError

_CONFIG = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class AdvantageConfig(BaseModel):
    """Group-relative advantages."""

    model_config = _CONFIG

    baseline: Literal["mean", "leave_one_out"] = "mean"
    """Group mean baseline (GRPO) or leave-one-out mean of the other samples (RLOO)."""
    std_normalize: bool = True
    """Divide by the group's reward std (GRPO); false gives Dr. GRPO's unnormalised advantages."""
    eps: float = Field(1e-6, gt=0)
    """Added to the std before dividing."""
    negative_weight: float = Field(1.0, gt=0, le=1)
    """Scale of negative advantages (samples below their group's baseline); 1 = the symmetric estimator.
    Below 1 the update leans on the group's successes (trainer/advantage.py)."""


class KLConfig(BaseModel):
    """KL regularisation towards the initial (reference) policy."""

    model_config = _CONFIG

    coef: float = Field(0.0, ge=0)
    """Weight of the KL term; 0 disables it and the reference policy is never loaded."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Estimator of KL(pi || ref) per token: k1 = log r, k2 = (log r)^2 / 2, k3 = r' - 1 - log r' (r' = ref/pi)."""
    placement: Literal["loss", "reward"] = "loss"
    """Add coef * KL to the loss (aggregated like the policy loss), or subtract coef * sum_t KL_t from each sample's reward."""


class DynamicSamplingConfig(BaseModel):
    """DAPO's dynamic sampling: groups whose rewards are all equal carry no gradient."""

    model_config = _CONFIG

    enabled: bool = True
    """Drop zero-variance groups and draw more groups until the batch is full."""
    max_draw_factor: float = Field(4.0, ge=1.0)
    """Give up refilling after drawing this many times the batch's groups in one step (then train on what is kept)."""


class OverlongConfig(BaseModel):
    """What happens to samples that hit the token budget (no stop token at their end)."""

    model_config = _CONFIG

    mode: Literal["none", "filter", "penalty"] = "filter"
    """filter: truncated samples are excluded from the loss; penalty: DAPO's soft length penalty on the reward."""
    max_tokens: int = Field(1024, ge=1)
    """Length (sampled tokens of a trajectory) where the penalty reaches -1."""
    buffer_tokens: int = Field(256, ge=0)
    """The penalty ramps linearly over the last buffer_tokens before max_tokens."""


class ImportanceSamplingConfig(BaseModel):
    """Behaviour-policy correction between the rollout engine's logprobs and the trainer's."""

    model_config = _CONFIG

    enabled: bool = True
    """Weight each token's loss by the (capped) ratio pi_trainer / pi_behaviour."""
    level: Literal["token", "sequence"] = "token"
    """Ratio per token, or the product over each sequence's sampled tokens."""
    mode: Literal["truncate", "mask"] = "truncate"
    """truncate: min(ratio, threshold) (TIS); mask: drop tokens (or sequences) whose ratio exceeds it."""
    threshold: float = Field(2.0, gt=0)
    """Cap C of the ratio."""


class AlgorithmConfig(BaseModel):
    """The GRPO objective (defaults: see the `trainer` package docstring)."""

    model_config = _CONFIG

    advantage: AdvantageConfig = AdvantageConfig()
    """How advantages are computed within a group."""
    clip_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip range: the ratio is clipped at 1 - clip_low."""
    clip_high: float = Field(0.28, ge=0)
    """Upper clip range (clip-higher): the ratio is clipped at 1 + clip_high."""
    dual_clip: float | None = Field(3.0, gt=1)
    """Dual clip c for negative advantages (loss capped at c * |A|); null disables."""
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses become the scalar loss; denominators count the whole batch."""
    norm_length: int | None = Field(None, ge=1)
    """Constant length of seq-mean-token-sum-norm; default: the environment's episode.max_total_tokens."""
    kl: KLConfig = KLConfig()
    """KL regularisation."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus: coef * aggregated entropy is subtracted from the loss."""
    dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig()
    """Zero-variance group filtering with refill."""
    overlong: OverlongConfig = OverlongConfig()
    """Truncated-sample handling."""
    importance_sampling: ImportanceSamplingConfig = ImportanceSamplingConfig()
    """Truncated importance sampling against the rollout engine's logprobs."""
    routing_replay: bool = True
    """R3: the trainer's forward uses the experts the rollout engine routed each token to (MoE policies)."""
    router_bias: Literal["frozen", "continued"] = "frozen"
    """Aux-loss-free router bias: frozen during RL, or keep applying its sign-rule update after each step."""
    aux_loss_coef: float = Field(0.0, ge=0)
    """MoE balance loss weight during RL (overrides the policy's own value)."""


class OptimizerConfig(BaseModel):
    """AdamW with warm-up and a constant or cosine schedule."""

    model_config = _CONFIG

    lr: float = Field(1e-6, ge=0)
    """Peak learning rate; 0 leaves the weights as they are (a control run)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas."""
    eps: float = Field(1e-8, gt=0)
    """Adam epsilon."""
    weight_decay: float = Field(0.0, ge=0)
    """Decoupled weight decay."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this; null disables."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up from 0 to lr over this many steps."""
    schedule: Literal["constant", "cosine"] = "constant"
    """After warm-up: constant, or cosine decay to min_lr_ratio * lr at the last step."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Floor of the cosine schedule as a fraction of lr."""


class RolloutConfig(BaseModel):
    """How GRPO groups are drawn (sampling settings, tools and budgets live in the environment)."""

    model_config = _CONFIG

    group_size: int = Field(8, ge=2)
    """G: samples (episodes) per prompt, a GRPO group."""
    groups_per_step: int = Field(8, ge=1)
    """Groups (prompts) in one training batch."""
    seed: int = Field(0, ge=0)
    """Seed of episode sampling (each episode's seed hashes it with the task position and member)."""


class VllmLaunchConfig(BaseModel):
    """A vLLM server the trainer starts itself (``engine.type: vllm`` without ``url``): on the trainer's initial
    weights, written with the policy directory's config and tokenizer files to ``WEIGHTS_DIR/model``, with
    ``VLLM_SERVER_DEV_MODE=1`` (the weight-push routes); stopped when the run ends (policies/vllm_server.py)."""

    model_config = _CONFIG

    python: Path
    """The Python interpreter of an environment where vLLM is installed (its own venv: vLLM pins its own torch);
    the server runs as ``PYTHON -m vllm.entrypoints.openai.api_server``."""
    args: tuple[str, ...] = ()
    """More ``vllm serve`` arguments, e.g. ``[--dtype, float32, --max-model-len, "4096"]`` (on the CPU also
    ``--kv-cache-memory-bytes``: vLLM otherwise takes most of the host's memory for its cache). The launcher sets
    --model, --served-model-name, --host, --port and --logprobs-mode (processed_logprobs: behaviour logprobs)."""
    host: str = "127.0.0.1"
    """Address the servers listen on."""
    port: int | None = Field(None, ge=1, le=65535)
    """The first server's port (replica i listens on port + i); null picks free ones."""
    startup_timeout_s: float = Field(600.0, gt=0)
    """Give up (and stop them all) when a server's ``/health`` does not answer 200 within this many seconds."""
    replicas: int = Field(1, ge=1)
    """Servers to start (one per GPU or replica, each on its own port and log, started together); requests are
    spread over them and every push reloads all of them (docs/vllm.md)."""
    gpus_per_replica: int | None = Field(None, ge=1)
    """GPUs each server is pinned to through its ``CUDA_VISIBLE_DEVICES`` (replica i takes devices i*G..i*G+G-1 of
    ``devices``); null leaves the environment's as it is. Above 1, give vLLM ``--tensor-parallel-size`` in args."""
    devices: tuple[str, ...] | None = None
    """The CUDA devices the replicas are pinned to, in order (with gpus_per_replica); default: this process's
    ``CUDA_VISIBLE_DEVICES`` entries when set, else 0, 1, ... (leave out the trainer's own GPU here)."""

    @model_validator(mode="after")
    def _check(self) -> VllmLaunchConfig:
        from policies.vllm_server import FORCED_FLAGS, forced_flag

        if not self.python.is_file():
            raise ValueError(f"python: {self.python} is not a file (the interpreter of a venv with vLLM installed)")
        flag = forced_flag(self.args)
        if flag is not None:
            raise ValueError(f"args: {flag} is set by the launcher ({', '.join(FORCED_FLAGS)}): remove it")
        if self.port is not None and self.port + self.replicas - 1 > 65535:
            raise ValueError(f"port: {self.replicas} replicas from port {self.port} run past 65535")
        if self.devices is not None:
            if self.gpus_per_replica is None:
                raise ValueError("devices: only with gpus_per_replica (how many each replica takes)")
            if len(self.devices) < self.replicas * self.gpus_per_replica:
                raise ValueError(
                    f"devices: {self.replicas} replicas x {self.gpus_per_replica} GPU(s) need "
                    f"{self.replicas * self.gpus_per_replica} devices, got {len(self.devices)}"
                )
        return self


class RolloutEngineConfig(BaseModel):
    """The rollout engine the trainer feeds."""

    model_config = _CONFIG

    type: Literal["in_process", "http", "vllm"] = "in_process"
    """in_process: a generation engine over a copy of the trainer's weights; http: a `python -m gym serve` server;
    vllm: a vLLM server (``url`` to attach to a running one, ``vllm`` to start one), weights pushed by reload
    after each sync (docs/vllm.md)."""
    url: str | None = None
    """Base URL of the policy server (http), or of a running vLLM server (vllm: started with
    ``VLLM_SERVER_DEV_MODE=1`` and ``--logprobs-mode processed_logprobs``), e.g. http://policy:8000."""
    urls: tuple[str, ...] | None = None
    """vllm: several running vLLM servers (one per GPU or replica, each as for url), instead of url: requests are
    spread over them, a server that fails leaves the rotation, every push reloads all of them (docs/vllm.md)."""
    vllm: VllmLaunchConfig | None = None
    """vllm without url or urls: the server(s) the trainer starts and stops."""
    weights_dir: Path | None = None
    """vllm: the directory pushed weights are written to, which the server must be able to read (a shared path
    when it runs elsewhere); default RUN/vllm."""
    request_timeout_s: float = Field(600.0, gt=0)
    """vllm: seconds a completion request may take (connect, read, write each), and a draining push may wait."""
    max_batch_size: int = Field(32, ge=1)
    """Most episodes' turns decoded together (in_process; continuous: the KV cache's slots)."""
    mode: Literal["continuous", "kv_cache"] | None = None
    """in_process: continuous batching (the default for the RDEP policy) or one batch per merged call
    (kv_cache, the default for other models); see policies/generation.py."""
    prefill_chunk: int | None = Field(None, ge=1)
    """in_process, continuous: prompt columns prefilled per decode step (None: an admitted group in one step)."""

    @model_validator(mode="after")
    def _url(self) -> RolloutEngineConfig:
        if self.type == "http" and self.url is None:
            raise ValueError("url is required with type: http")
        given = [name for name in ("url", "urls", "vllm") if getattr(self, name) is not None]
        if self.type == "vllm" and len(given) != 1:
            raise ValueError(
                "type: vllm takes url (attach to a running server), urls (to several) or vllm (start them), exactly "
                f"one (given: {', '.join(given) or 'none'})"
            )
        if self.urls is not None:
            _check_urls(self.urls)
        if self.type == "in_process" and self.url is not None:
            raise ValueError("url is for type: http or vllm")
        if self.type != "vllm":
            chosen = [name for name in ("urls", "vllm", "weights_dir") if getattr(self, name) is not None]
            if chosen:
                raise ValueError(f"{', '.join(chosen)}: only with type: vllm")
        return self


def _check_urls(urls: tuple[str, ...]) -> None:
    """ValueError naming ``urls`` when it is empty, repeats a server or holds a URL without a host."""
    import httpx

    if not urls:
        raise ValueError("urls: give at least one server URL")
    stripped = [u.rstrip("/") for u in urls]
    repeated = next((u for i, u in enumerate(stripped) if u in stripped[:i]), None)
    if repeated is not None:
        raise ValueError(f"urls: {repeated} is given twice")
    for i, url in enumerate(urls):
        try:
            host = httpx.URL(url).host
        except httpx.InvalidURL as exc:
            raise ValueError(f"urls[{i}]: {url!r} is not a valid URL: {exc}") from None
        if not host:
            raise ValueError(f"urls[{i}]: {url!r} names no host: use http://HOST:PORT")


class WarmStartConfig(BaseModel):
    """Optional supervised warm start before RL, on token-exact reference demos of the environment's tasks.

    A randomly initialised policy almost never writes a valid Harmony turn, so every group's
    rewards would be equal and GRPO would have nothing to learn from; a few supervised steps on
    token-exact trajectories of `scripted:reference` (real tool calls in real workspaces) give it
    the format. Skipped when resuming; the KL reference (if any) is the policy after it.
    """

    model_config = _CONFIG

    steps: int = Field(0, ge=0)
    """Supervised steps; 0 disables the warm start."""
    demos: Literal["reference_episodes", "final_answers"] = "reference_episodes"
    """reference_episodes: scripted:reference run through the environment's tools (Docker); final_answers:
    each task's reference program as one final-channel answer (no tools, no Docker)."""
    lr: float = Field(3e-3, gt=0)
    """Learning rate (AdamW, constant) of the warm start."""
    batch_size: int = Field(8, ge=1)
    """Trajectories per supervised step."""
    tasks: int | None = Field(None, ge=1)
    """Demos to build: the first N distinct tasks of the environment's task stream (spread over its sources as
    training draws them), and RL then draws on from the stream position after them (its first steps are not
    the demos' tasks); default: every task of the environment, in id order (RL starts at the stream's start).
    With ``steps: 0`` (a policy.checkpoint warm-started by an earlier run) RL still starts after these tasks."""


class LoopConfig(BaseModel):
    """The asynchronous training loop."""

    model_config = _CONFIG

    steps: int = Field(100, ge=1)
    """Optimizer steps to run."""
    max_staleness: int = Field(1, ge=0)
    """Samples from weights older than (current version - max_staleness) are dropped or down-weighted; 0 = fully on-policy."""
    stale_policy: Literal["drop", "downweight"] = "drop"
    """What happens to a too-stale sample: dropped, or its loss multiplied by stale_weight ** (excess versions)."""
    stale_weight: float = Field(0.5, gt=0, le=1)
    """Down-weighting factor per version beyond max_staleness."""
    partial_rollouts: bool = False
    """An episode in flight when new weights are pushed goes on under them: the in-process engine swaps weights
    between two decode steps instead of waiting for the running completions (their cached keys and values are
    kept), every sampled token records the version that sampled it, and staleness (max_staleness, stale_policy)
    applies to each token by its own version. For long episodes (SWE), where waiting for every turn in flight
    would stall each push. An engine of type http swaps per its own `engine.partial_rollouts` (serve config)."""
    sync_every: int = Field(1, ge=1)
    """Push weights to the rollout engine every this many steps (a new weights version each time)."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward (gradient accumulation over the batch)."""
    updates_per_batch: int = Field(1, ge=0)
    """Optimizer steps per batch (PPO mini-batches); above 1 the ratio's proximal policy is recomputed first.
    0: a baseline run: the loop samples, grades and logs the same stream, evaluates and checkpoints as ever, but
    takes no optimizer step (no forward or backward pass of the learner, no weights push: the version stays put),
    so its weights are the starting ones throughout: the paired control of a learning run at a fraction of its cost."""
    max_masked_share: float = Field(0.05, ge=0, le=1)
    """Stop the run (MaskedShareError, after writing summary.json) when more than this share of the samples
    consumed so far were masked (infrastructure failures); judged after each step; 1 never stops."""
    masked_share_min_samples: int = Field(64, ge=1)
    """The masked share is judged only once at least this many samples were consumed (1 masked of 3 is no trend)."""


class CheckpointConfig(BaseModel):
    """Atomic checkpoints for exact resume."""

    model_config = _CONFIG

    every: int = Field(10, ge=1)
    """Write a checkpoint every this many steps (and at the end)."""
    keep: int = Field(2, ge=1)
    """Most recent checkpoints kept on disk."""


class EvalConfig(BaseModel):
    """Held-out evaluation: pass@1 and pass@k with the unbiased estimator."""

    model_config = _CONFIG

    every: int = Field(0, ge=0)
    """Evaluate every this many steps (and at the end); 0 disables."""
    environment: Path | None = None
    """Environment YAML (or registered name) of the held-out tasks (required when every > 0); every task is
    evaluated once per pass."""
    samples: int = Field(4, ge=1)
    """n: samples per held-out task."""
    k: list[int] = [1]
    """The k of each pass@k reported (each <= samples)."""
    before: bool = False
    """Also evaluate before the first step (after any warm start), with the same seeds as later passes."""

    @model_validator(mode="after")
    def _k_fits(self) -> EvalConfig:
        if self.every and self.environment is None:
            raise ValueError("environment (held-out tasks) is required when every > 0")
        bad = [k for k in self.k if not 1 <= k <= self.samples]
        if bad:
            raise ValueError(f"every k must be in [1, samples={self.samples}], got {bad}")
        return self


class MetricsConfig(BaseModel):
    """Where metrics go."""

    model_config = _CONFIG

    tensorboard: bool = True
    """Also write TensorBoard event files when `tensorboard` (or tensorboardX) is installed."""
    wandb_project: str | None = None
    """Log to Weights & Biases under this project when set (needs `wandb` and credentials)."""
    progress: bool = True
    """Show a progress bar (step, reward, tokens/s, staleness) on stderr."""


class FSDPConfig(BaseModel):
    """torch's FSDP2 over every weight but the routed experts (trainer/fsdp.py); off: dense weights replicated."""

    model_config = _CONFIG

    enabled: bool = False
    """Shard attention, dense MLP, embedding and head weights, their gradients and AdamW state over the ranks
    (each holds 1/W); routed experts stay RDEP-sharded. Off, every rank holds them whole (data parallel)."""
    mixed_precision: Literal["auto", "bfloat16", "float32"] = "auto"
    """Compute dtype of the gathered weights (FSDP's MixedPrecisionPolicy); parameters and the gradient reduction
    stay in the trainer's dtype (float32: fp32 master weights). auto = bfloat16 on CUDA, float32 on the CPU."""
    activation_checkpointing: bool = False
    """Keep only each decoder block's input in forward and recompute the block in backward (less memory, one
    more forward of every block per step)."""
    cpu_offload: bool = False
    """Keep the sharded parameters, gradients and optimizer state in host memory, the optimizer step on the CPU
    (FSDP's CPUOffloadPolicy); needs a CUDA device."""

    @model_validator(mode="after")
    def _only_when_enabled(self) -> FSDPConfig:
        chosen = [
            name
            for name, default in (
                ("mixed_precision", "auto"),
                ("activation_checkpointing", False),
                ("cpu_offload", False),
            )
            if getattr(self, name) != default
        ]
        if chosen and not self.enabled:
            one = len(chosen) == 1
            raise ValueError(
                f"{', '.join(chosen)} {'has' if one else 'have'} no effect unless enabled (sharded training): "
                f"set enabled: true or remove {'it' if one else 'them'}"
            )
        return self


class DistributedConfig(BaseModel):
    """torchrun: data parallel (or FSDP) for dense weights, RDEP expert parallel for experts."""

    model_config = _CONFIG

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Process-group backend; auto = nccl on CUDA, gloo on CPU."""
    expert_parallel: bool = True
    """Shard routed experts over ranks (RDEP); false replicates them and all-reduces their gradients."""
    dispatcher: Literal["collective", "shared_memory"] = "collective"
    """RDEP transport: torch.distributed all-to-all (any backend, multi-node) or shared memory (one host)."""
    dispatch_capacity: int = Field(65536, ge=1)
    """RDEP receive-buffer rows per rank pair."""
    fsdp: FSDPConfig = FSDPConfig()
    """Sharded training of the dense weights (off by default: one process trains as before)."""


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Attention and MLP projections of Qwen2, Qwen2.5, Llama and Mistral (their module names)."""


class LoraConfig(BaseModel):
    """LoRA adapters (PEFT) on a Hugging Face policy: only the adapters train, the base weights stay frozen.

    The trainer scores with the adapters, the rollout engine samples with the merged weights
    W + (alpha / r) * B @ A under the base model's names, and checkpoints hold the adapters only
    (trainer/lora.py). The RDEP MoE policy takes no adapters (`TrainConfig.resolved` says why).
    """

    model_config = _CONFIG

    r: int = Field(16, ge=1)
    """Rank of each adapter: A is (r, in_features), B is (out_features, r); B starts at zero, so step 0 is the base."""
    alpha: float = Field(32.0, gt=0)
    """Scale numerator: the update added to each target weight is (alpha / r) * B @ A."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on each adapter's input while the trainer scores; the merged weights the engine samples with have
    none, so above 0 the trainer's logprobs differ from the engine's by more than the weights."""
    target_modules: tuple[Annotated[str, Field(min_length=1)], ...] = Field(LORA_TARGETS, min_length=1)
    """Linear layers that get an adapter, each matched as the end of a module's dotted path (peft's rule:
    ``q_proj`` is every ``model.layers.N.self_attn.q_proj``). Every name must match at least one `nn.Linear` and
    not the output head (the trainer applies the head as a plain matrix); otherwise building the learner raises
    ConfigError naming ``lora.target_modules`` and the linear layers the model has."""


class TrainConfig(BaseModel):
    """Top level of a `python -m gym train` YAML."""

    model_config = _CONFIG

    run_dir: Path = Path("runs/grpo")
    """Checkpoints, metrics.jsonl, trajectories, replay bundles, config.json and summary.json go here."""
    seed: int = Field(0, ge=0)
    """Seed of the trainer's RNGs (init, dropout-free but kept for exact resume)."""
    environment: Path | EnvironmentConfig
    """The gym environment (tasks, tools, prompt, sampling, episode budgets, rubric, sandbox): a YAML path, a
    registered name (`python -m gym envs list`, gym/registry.py) or inline."""
    policy: Annotated[MoEPolicySource | HFPolicySource, Field(discriminator="type")]
    """The policy to train (our RDEP MoE from scratch or a checkpoint, or a local HF directory)."""
    engine: RolloutEngineConfig = RolloutEngineConfig()
    """The rollout engine."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """Supervised warm start on reference episodes (off by default)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Trainer weights dtype (master weights; the optimizer state follows)."""
    device: str = "cpu"
    """torch device of the trainer and the in-process engine; under torchrun a bare ``cuda`` is each rank's own
    GPU (``cuda:LOCAL_RANK``)."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op CPU threads during the run (restored after it); null keeps torch's default, one per
    core. Small policies gain nothing from more than one, and on a busy CPU the threads of one op wait on
    each other: 10 warm-start steps of configs/grpo_format_check.yaml took 8.9 s CPU / 24.9 s wall with 1
    thread and 29.9 s / 74.1 s with 2 on the 2-core VM under load (load average about 18)."""
    algorithm: AlgorithmConfig = AlgorithmConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    rollout: RolloutConfig = RolloutConfig()
    loop: LoopConfig = LoopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    eval: EvalConfig = EvalConfig()
    metrics: MetricsConfig = MetricsConfig()
    distributed: DistributedConfig = DistributedConfig()
    write_trajectories: bool = True
    """Append every consumed trajectory to RUN/trajectories.jsonl (replay bundles go to RUN/bundles/)."""
    lora: LoraConfig | None = None
    """LoRA adapters on a Hugging Face policy (`policy.type: hf`); null trains every weight."""

    @classmethod
    def load(cls, path: str | Path, overrides: Sequence[Override] = ()) -> TrainConfig:
        """Read a YAML (or ``*.toml``) file (sandbox.config_file), apply ``overrides`` (gym.overrides) and
        validate; raises ConfigError naming the field at fault, OverrideError for an override that does not fit the file. An ``environment`` given as
        a file is read into the mapping first when an override reaches into it (``environment.episode.max_turns``)."""
        data = read_config(path, ConfigError)
        if not overrides:
            return cls.parse(data, source=str(path))
        env = data.get("environment") if isinstance(data, dict) else None
        if isinstance(env, str) and any(keys[0] == "environment" and len(keys) > 1 for keys, _ in overrides):
            data = {**data, "environment": environment_data(env, _environment_read_error(path))}
        return cls.parse(apply_overrides(data, overrides), source=f"{path} (with overrides)")

    @classmethod
    def parse(cls, data: dict, source: str = "config") -> TrainConfig:
        return validate_config(cls, data, source, ConfigError).resolved(source)

    def resolved(self, source: str = "config") -> TrainConfig:
        """Load the environment files it names, so their errors surface now, naming the field."""
        update = {}
        if isinstance(self.environment, Path):
            update["environment"] = _environment(self.environment, f"{source}: environment")
        if self.eval.every and self.eval.environment is not None:
            _environment(self.eval.environment, f"{source}: eval.environment")
        config = self.model_copy(update=update)
        if config.env.sampling.temperature <= 0:
            raise ConfigError(
                f"{source}: environment.sampling.temperature: must be > 0 to train (greedy samples have no logprob)"
            )
        if config.engine.type == "vllm" and not isinstance(config.policy, HFPolicySource):
            raise ConfigError(
                f"{source}: engine.type: vllm serves a Hugging Face policy (policy.type: hf); the RDEP MoE policy "
                f"(policy.type: {config.policy.type}) samples on our own engine (in_process or http)"
            )
        if config.lora is not None:
            _check_lora(config, source)
        if config.distributed.fsdp.enabled:
            _check_fsdp(config, source)
        return config

    @property
    def env(self) -> EnvironmentConfig:
        assert isinstance(self.environment, EnvironmentConfig), "call resolved() first"
        return self.environment

    @property
    def norm_length(self) -> int:
        """The constant length of seq-mean-token-sum-norm."""
        return self.algorithm.norm_length or self.env.episode.max_total_tokens


def _check_lora(config: TrainConfig, source: str) -> None:
    """LoRA takes a Hugging Face policy, and a KL reference it can be cheap for (trainer/lora.py)."""
    if not isinstance(config.policy, HFPolicySource):
        # Ours trains from scratch or from our own checkpoints, at sizes whose full training fits; most of its
        # weights are grouped expert tensors that RDEP shards over ranks, not the nn.Linear layers peft wraps.
        raise ConfigError(
            f"{source}: lora: adapters train a Hugging Face policy (policy.type: hf); the RDEP MoE policy "
            f"(policy.type: {config.policy.type}) trains every weight: remove the lora section"
        )
    if config.distributed.fsdp.enabled:
        # the merged push and the adapter checkpoint read whole tensors; under FSDP the weights are DTensor shards
        raise ConfigError(
            f"{source}: lora: adapters train replicated (data parallel), not with distributed.fsdp.enabled: "
            "remove one of them"
        )
    if config.warm_start.steps and config.algorithm.kl.coef > 0:
        # the reference is the base with its adapters off: after a warm start trained them, that is not the
        # policy RL starts from, which the KL's reference is everywhere else
        raise ConfigError(
            f"{source}: lora: with warm_start.steps > 0 the adapters leave the base before RL starts, so the KL "
            "reference (the base without adapters) is not the policy RL starts from; set algorithm.kl.coef: 0 or "
            "warm_start.steps: 0"
        )


def _check_fsdp(config: TrainConfig, source: str) -> None:
    """What sharded training cannot do (trainer/fsdp.py)."""
    if config.distributed.fsdp.cpu_offload and not config.device.startswith("cuda"):
        raise ConfigError(
            f"{source}: distributed.fsdp.cpu_offload: moves the sharded state off a CUDA device to host memory; "
            f"device is {config.device}, where it already lives: remove cpu_offload"
        )
    kl = config.algorithm.kl
    if kl.coef > 0 and kl.placement == "reward":
        # rank 0 alone scores each group against the reference while the others wait for its next command;
        # sharded weights are gathered by every rank together
        raise ConfigError(
            f"{source}: algorithm.kl.placement: reward scores the reference on rank 0 alone, which sharded weights "
            "(distributed.fsdp.enabled) cannot do: use placement: loss"
        )


def _environment(path: Path, where: str) -> EnvironmentConfig:
    try:
        return environment_config(path)  # a file or a registered name
    except RegistryError as err:  # its message ends with its own fix
        raise RegistryError(f"{where}: {err}") from None
    except EnvironmentConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def _environment_read_error(path: Path):
    """ConfigError for an environment file the train config names: ``TRAIN: environment: ENV: problem``."""
    return lambda message: ConfigError(f"{path}: environment: {message}")
