"""GRPO for the gym: asynchronous, token-exact, with routing replay for the RDEP MoE policy.

The variant implemented (every knob is in `trainer.config`; defaults in brackets):

* **Groups and advantages.** G samples per prompt [rollout.group_size = 8]. A_i = r_i - baseline,
  baseline = the group mean [mean] or the mean of the other G - 1 samples [leave_one_out, RLOO];
  divided by the group's reward std (Bessel) + eps [std_normalize = true; false = Dr. GRPO]. The
  advantage is the same for every token of a sample.
* **Objective.** Token-level PPO clipped surrogate with the ratio r = pi_theta / pi_prox against the
  trainer's own weights before the update (no separate old-logprob pass with one update per batch,
  so r = 1 in value and the gradient is the policy gradient; with `updates_per_batch` > 1 the proximal
  logprobs are computed once first), clip range [1 - 0.2, 1 + 0.28] (clip-higher), dual clip c = 3
  for A < 0. Loss aggregation [token-mean] over the global token count of the whole batch across
  gradient accumulation and ranks; also seq-mean-token-mean and seq-mean-token-sum-norm (Dr. GRPO,
  constant length = the episode token budget).
* **Behaviour correction.** Truncated importance sampling between the trainer's proximal logprobs and
  the rollout engine's behaviour logprobs [token level, truncate, threshold C = 2.0; also
  sequence level and mask mode]; mismatch metrics (mean/max |logprob diff|, k1 and k3 KL) are always
  logged.
* **Regularisers.** KL to the initial policy with the k1, k2 or k3 estimator [coef 0: the reference is
  not even built], in the loss or subtracted from the reward; entropy bonus [0].
* **Sample selection.** Masked samples (`infra_error`) never enter the loss (counted); samples older
  than `max_staleness` [1] weights versions are dropped [drop] or down-weighted; dynamic sampling
  drops zero-variance groups and draws replacements [on, up to 4x the batch's groups]; truncated
  samples (token budget hit) are filtered out of the loss [filter] or get DAPO's soft overlong penalty.
* **Partial rollouts** [off; on in the SWE config]. A weight push lands between two decode steps of the
  episodes in flight (their cached keys and values kept); each token records its weights version, and
  staleness is judged per token (`trainer.staleness`): a stale token is dropped from the loss or
  down-weighted, not its whole sample; each token keeps its own behaviour logprob for the correction.
* **MoE.** Routing replay R3 [on]: the trainer's forward routes every token to the experts the engine
  used; router bias updates during RL [frozen] or continued; balance loss coefficient [0].
* **Loop.** Rollout workers run ahead of the trainer within credits (`trainer.producer`), the policy
  update runs in a worker thread while episodes continue, weights go to the engine every `sync_every`
  [1] steps (in process, or to the policy server's update endpoint), a new weights version each time.
* **Optimizer.** AdamW [lr 1e-6, betas (0.9, 0.999), wd 0], global grad-norm clip [1.0], linear warm-up
  then constant or cosine.
* **LoRA** [off]. With a `lora` section a Hugging Face policy trains low-rank adapters only (PEFT,
  `trainer.lora`): the engine samples on the merged weights, the KL reference is the base with the
  adapters off, checkpoints hold the adapters.
* **State.** Atomic checkpoints (safetensors weights, optimizer, scheduler, RNG, step, weights
  version, data cursor) every N steps; `--resume` continues the same data order. An FSDP2 model's
  are torch.distributed.checkpoint shards with digests (`trainer.sharded_checkpoint`), and
  `python -m gym export` writes any checkpoint as a Hugging Face directory.

Entry points: `python -m gym train CONFIG` (`trainer.loop.train`), `python -m gym bench trainer`.
Pure pieces: `trainer.advantage`, `trainer.loss`, `trainer.selection`; the step: `trainer.update`.
"""
