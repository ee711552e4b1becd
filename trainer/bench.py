"""`python -m gym bench trainer`: GRPO step throughput of this trainer vs TRL's GRPOTrainer, side by side.

Same tiny RDEP policy (same seed), same prompts (the Harmony prompts of the main job's shipped
tasks, with the project's BPE tokenizer), same reward, same group size, completion budget,
learning rate and clip ranges, one optimizer step per batch, no reference model, on this machine's
CPU. A step is everything: sampling the completions, rewards, advantages, the loss, backward and
the optimizer step (ours also pushes the new weights into its generation engine). Tokens/s counts
prompt + completion tokens of every sample of a step; the first step of each is a warm-up and not
timed. No Docker: the reward is computed from token ids.

Reward: 0 for a valid Harmony turn, -0.2 otherwise, minus 0.1 x the share of repeated token ids in
the completion (so a group's rewards differ even when every turn is cut at the budget, and both
trainers do the full work).

``--fsdp`` measures something else, the training state each rank holds with FSDP (`trainer.bench_fsdp`, whose
docstring lists its figures).

Figures (``--json``): tokens_per_s_ours, tokens_per_s_trl (null when TRL cannot run here, with
``trl_error`` saying why), ratio, step_s_ours, sample_s_ours (the sampling part of our step, median),
sample_s_ours_steps (each timed step's), sample_gc_full and sample_gc_full_s (full garbage collections during the
timed steps' sampling, how many and their seconds: the slow steps of a GPU run held one before
`policies.memory_tuning.freeze_startup_objects`), step_s_trl, tokens_per_step, trl_version.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import tempfile
import time
import traceback
from pathlib import Path

log = logging.getLogger(__name__)

CONFIG = Path("configs/cp_grpo_tiny.yaml")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=3, help="timed steps per trainer (after one warm-up step)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=64, help="completion budget")
    parser.add_argument("--skip-trl", action="store_true", help="measure this trainer only")
    parser.add_argument("--device", default="cpu", help="torch device of the policy (e.g. cuda:0)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="policy weights dtype")
    from trainer import bench_fsdp

    bench_fsdp.configure_fsdp(parser)


def run(args: argparse.Namespace) -> dict:
    if args.fsdp:  # a different measurement: memory per rank of sharded training (trainer/bench_fsdp.py)
        from trainer import bench_fsdp

        return bench_fsdp.run(args)
    import torch

    from trainer.config import TrainConfig

    torch.manual_seed(0)
    config = TrainConfig.load(CONFIG)
    setup = _Setup(config, args)
    ours, sampling = setup.bench_ours()
    figures = {
        "tokens_per_step": setup.tokens_per_step,
        "step_s_ours": ours,
        "sample_s_ours": sampling,
        "sample_s_ours_steps": setup.sampling_steps,
        "sample_gc_full": setup.full_collections.count,
        "sample_gc_full_s": setup.full_collections.seconds,
        "tokens_per_s_ours": setup.tokens_per_step / ours,
    }
    trl_error, trl_s, version = None, None, None
    if args.skip_trl:
        trl_error = "skipped (--skip-trl)"
    else:
        try:
            import trl

            version = trl.__version__
            trl_s, trl_tokens = setup.bench_trl()
            figures["tokens_per_step_trl"] = trl_tokens
        except Exception as exc:  # report why TRL could not run instead of failing the whole bench
            trl_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            log.warning("TRL could not run:\n%s", traceback.format_exc())
    figures["step_s_trl"] = trl_s
    figures["tokens_per_s_trl"] = figures["tokens_per_step_trl"] / trl_s if trl_s else None
    figures["ratio"] = (
        figures["tokens_per_s_ours"] / figures["tokens_per_s_trl"] if figures["tokens_per_s_trl"] else None
    )
    figures["trl_version"] = version
    figures["trl_error"] = trl_error
    figures["torch_threads"] = torch.get_num_threads()
    figures["device"] = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    return figures


class _Setup:
    """Shared model init, prompts and reward of both measurements."""

    def __init__(self, config, args: argparse.Namespace) -> None:
        from gym.environment import Environment

        self.config, self.args = config, args
        self.env = Environment(config.env)
        tasks = [self.env.tasks[k] for k in sorted(self.env.tasks)][: args.prompts]
        self.prompts = [self.env.format_for(t).render_prompt(self.env.prompt(t)) for t in tasks]
        self.stops = self.env.chat_format.stop_ids()
        self.tokens_per_step = 0
        self.sampling_steps: list[float] = []  # each timed step's sampling seconds
        self.full_collections = FullCollections()  # during the timed steps' sampling

    def reward(self, completion: list[int]) -> float:
        from gym.format.harmony import ParseError

        valid = not isinstance(self.env.chat_format.parse_completion(completion), ParseError)
        repeated = 1.0 - len(set(completion)) / max(1, len(completion))
        return (0.0 if valid else -0.2) - 0.1 * repeated

    def model(self):
        from trainer.policy import build_model

        return build_model(self.config.policy, self.args.dtype, self.args.device)

    def bench_ours(self) -> tuple[float, float]:
        """Median seconds of one GRPO step of this trainer, and of the step's sampling (the engine's
        `generate_batch` of every completion)."""
        import torch

        from gym.trajectory import Trajectory
        from policies.memory_tuning import freeze_startup_objects
        from policies.sampling import SamplingParams
        from trainer.advantage import group_advantages
        from trainer.config import AlgorithmConfig, OptimizerConfig
        from trainer.learner import make_optimizer
        from trainer.policy import InProcessSync, build_engine
        from trainer.sample import Sample
        from trainer.selection import Scored
        from trainer.update import PolicyUpdate

        args = self.args
        model = self.model()
        engine = build_engine(model, max_batch_size=args.prompts * args.group_size)
        sync = InProcessSync(engine)
        optimizer, scheduler = make_optimizer(model, OptimizerConfig(lr=1e-5, grad_clip=1.0), args.steps + 1)
        algorithm = AlgorithmConfig(routing_replay=True)
        update = PolicyUpdate(
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            algorithm=algorithm,
            micro_batch_size=args.prompts * args.group_size,
            norm_length=args.max_tokens,
        )
        freeze_startup_objects()  # everything is built, as in the trainer's loop (policies/memory_tuning.py)
        times, sampling = [], []
        for step in range(args.steps + 1):
            started = time.perf_counter()
            prompts = [p for p in self.prompts for _ in range(args.group_size)]
            params = [
                SamplingParams(
                    max_tokens=args.max_tokens,
                    stop_token_ids=tuple(self.stops),
                    seed=1000 * step + i,
                    return_routed_experts=True,
                )
                for i in range(len(prompts))
            ]
            collections = FullCollections()
            sampling_started = time.perf_counter()
            with collections:
                completions = engine.generate_batch(prompts, params)
            sampled = time.perf_counter() - sampling_started
            scored, tokens = [], 0
            for g in range(args.prompts):
                members = completions[g * args.group_size : (g + 1) * args.group_size]
                rewards = torch.tensor([self.reward(c.token_ids) for c in members])
                advantages = group_advantages(rewards)
                for c, a, r in zip(members, advantages.tolist(), rewards.tolist()):
                    prompt = self.prompts[g]
                    ids = tuple(prompt) + tuple(c.token_ids)
                    t = Trajectory(
                        task_id=str(g),
                        tokenizer="bench",
                        policy_version=c.weights_version,
                        prompt_ids=tuple(prompt),
                        ids=ids,
                        sampled=(False,) * len(prompt) + (True,) * len(c.token_ids),
                        logprobs=(None,) * len(prompt) + tuple(min(0.0, lp) for lp in c.logprobs),
                        reward=r,
                    )
                    import numpy as np

                    routes = np.asarray(c.routed_experts, dtype=np.int16) if c.routed_experts else None
                    scored.append(Scored(sample=Sample(t, routes=routes), advantage=a))
                    tokens += len(ids)
            update.run(scored)
            sync.push({k: v.detach() for k, v in model.state_dict().items()}, step + 1)
            if step:
                times.append(time.perf_counter() - started)
                sampling.append(sampled)
                self.tokens_per_step = tokens
                self.full_collections.add(collections)
            log.info(
                "ours: step %d %.2f s, sampling %.2f s (%d tokens; %d full garbage collections, %.0f ms)",
                step,
                time.perf_counter() - started,
                sampled,
                tokens,
                collections.count,
                1000 * collections.seconds,
            )
        self.sampling_steps = sampling
        return statistics.median(times), statistics.median(sampling)

    def bench_trl(self) -> tuple[float, float]:
        """Median seconds of one GRPOTrainer step on the same model, prompts and reward, and its tokens/step."""
        import datasets
        from transformers import PreTrainedTokenizerFast, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        args = self.args
        tokenizer_file = Path("build/tokenizer/tokenizer.json")
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
        tokenizer.pad_token = "<|endoftext|>"
        tokenizer.eos_token = "<|return|>"
        texts = [self.env.tokenizer.decode(p) for p in self.prompts]
        mismatched = sum(tokenizer(t, add_special_tokens=False)["input_ids"] != p for t, p in zip(texts, self.prompts))
        if mismatched:
            log.warning("%d prompt(s) tokenize differently through the HF tokenizer", mismatched)
        model = self.model()
        model.generation_config.eos_token_id = self.stops
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        data = datasets.Dataset.from_dict({"prompt": texts * (args.steps + 2)})
        stats: dict[str, list[float]] = {"times": [], "tokens": []}
        reward = self.reward

        def harmony_reward(prompts, completions, completion_ids, **_):
            return [reward(list(ids)) for ids in completion_ids]

        class Timer(TrainerCallback):
            def on_step_begin(self, *_a, **_k):
                self.started = time.perf_counter()

            def on_step_end(self, *_a, **_k):
                stats["times"].append(time.perf_counter() - self.started)

        with tempfile.TemporaryDirectory() as out:
            grpo = GRPOConfig(
                output_dir=out,
                per_device_train_batch_size=args.prompts * args.group_size,
                num_generations=args.group_size,
                max_completion_length=args.max_tokens,
                learning_rate=1e-5,
                max_steps=args.steps + 1,
                logging_steps=1,
                report_to="none",
                save_strategy="no",
                use_cpu=True,
                bf16=False,
                beta=0.0,
                temperature=1.0,
                loss_type="dapo",
                epsilon=0.2,
                epsilon_high=0.28,
                gradient_accumulation_steps=1,
                shuffle_dataset=False,
                seed=0,
                dataloader_num_workers=0,
                max_grad_norm=1.0,
                lr_scheduler_type="constant",
            )
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=harmony_reward,
                args=grpo,
                train_dataset=data,
                processing_class=tokenizer,
                callbacks=[Timer()],
            )
            trainer.train()
            history = [h for h in trainer.state.log_history if "completions/mean_length" in h]
        times = stats["times"][1:]
        completion_mean = (
            statistics.fmean(h["completions/mean_length"] for h in history[1:]) if len(history) > 1 else args.max_tokens
        )
        tokens = sum(len(p) for p in self.prompts) * args.group_size + completion_mean * args.prompts * args.group_size
        return statistics.median(times), tokens


class FullCollections:
    """Full (generation 2) garbage collections in any thread while entered: how many, and their seconds
    (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.count, self.seconds = 0, 0.0
        self._started: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.count += 1
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def add(self, other: FullCollections) -> None:
        self.count += other.count
        self.seconds += other.seconds

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_exc) -> None:
        gc.callbacks.remove(self)
