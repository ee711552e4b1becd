"""`python -m gym bench generate`: tokens/s of the tiny policy's generation engine.

Two workloads. With ``--requests N``: a GRPO-like stream (below). Without: one batch, KV cache vs
full recompute (the rest of this paragraph).

Both modes run in one process on the same model, prompts and seeds, and sample exactly
`new_tokens` per row (no stop tokens), so the ratio compares equal work. In float32 the sampled
tokens must also be identical (checked); in bf16/fp16 the two paths round differently and samples
may diverge, so the share of identical tokens is reported (`token_agreement`) instead. Figures (`--json FILE`):
`tokens_per_s_kv`, `tokens_per_s_recompute`, `speedup`, `new_tokens` (per mode), `batch`,
`prompt_tokens`, `threads`.

The stream (``--requests N --concurrency C --group G``): N requests in groups of G sharing a prompt
(GRPO), prompt lengths drawn from [P/2, 3P/2] and token budgets from [O/4, O] (P = --prompt-tokens,
O = --new-tokens; no stop tokens, so every request samples exactly its budget), issued by C clients
that each send their next request when the last one returned (closed loop, like C concurrent
episodes). The same requests, model and weights run through three engines in one process: the
continuous engine (`policies.continuous`) and the per-call batch engine (`kv_cache`, what the
trainer ran before), both behind the trainer's `BatchingEngine`, and Hugging Face `generate()`
in static batches of C (it pads every batch to its longest budget; only requested tokens count).
Figures: `tokens_per_s` (continuous), `tokens_per_s_batch`, `tokens_per_s_hf`, `speedup_vs_batch`,
`speedup_vs_hf`, `ttft_p50_ms` / `tpot_p50_ms` (continuous: submit to first token, then per later
token), `prefills` (distinct prompts the continuous engine prefilled), `new_tokens`, `requests`,
`concurrency`, `group`, `prefill_chunk` (`--prefill-chunk`: prompt columns the continuous engine
prefills a step), `threads`, `device`, `dtype`; on a GPU `cuda_graphs` (decode graphs captured),
`graph_replays` and `graph_failure` (why capture was given up, or null); in bf16 the engine's logprobs
against the trainer's (`logprob_gap`: `trainer_logprob_gap_mean` / `_max`). ``--skip-batch`` leaves the batch
engine out; ``--fixed`` makes every prompt P and every budget O tokens; ``--warmup-tokens T`` caps the warm-up requests' budgets.

``--against REV`` also runs the stream through the engine of git revision REV of this repository, as it
was: its tree (`git archive`, ~4 MB) in a temporary directory, its `build_engine` on its own copy of the config
and its trainer's `BatchingEngine`, in a subprocess (`trainer.bench_against`), on the same threads, model,
requests and seeds, and the same allocator thresholds as this process (`policies.memory_tuning`, through
glibc's environment variables). It must build the same model (a weights fingerprint is compared). Figures:
`tokens_per_s_against`, `speedup_vs_against`, `against` (the revision as given). Issue 16's "today's
engine" is the revision before continuous batching: ``--against 5cdbac1^``.

``--against vllm`` (or ``vllm:URL``) compares our engine with a vLLM server on one Hugging Face model and the same
stream instead (``--model DIR``, ``--vllm-python PATH``; figures `tokens_per_s`, `tokens_per_s_vllm`,
`speedup_vs_vllm`, `vllm_version`, `greedy_agreement`, ...): trainer/bench_vllm.py's docstring.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=Path("configs/policy_tiny.yaml"), help="serve YAML of the policy"
    )
    parser.add_argument("--batch", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="tokens per prompt")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens sampled per prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads of every engine (default: the config's engine.threads, else torch's choice)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        metavar="N",
        help="run the GRPO-like request stream of N requests (continuous vs batch engine vs HF generate)",
    )
    parser.add_argument("--concurrency", type=int, default=16, metavar="C", help="stream: clients in flight")
    parser.add_argument("--group", type=int, default=4, metavar="G", help="stream: requests sharing one prompt")
    parser.add_argument(
        "--prefill-chunk",
        type=int,
        default=None,
        metavar="T",
        help="stream: the continuous engine prefills T prompt columns a step (default: the config's engine.prefill_chunk)",
    )
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="stream: every prompt exactly --prompt-tokens and every budget exactly --new-tokens (default: mixed)",
    )
    parser.add_argument(
        "--skip-batch", action="store_true", help="stream: leave out the per-call batch engine (slow on a GPU)"
    )
    parser.add_argument(
        "--warmup-tokens",
        type=int,
        default=0,
        metavar="T",
        help="stream: cap the warm-up requests' budgets at T tokens (default: their own budgets)",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        default=None,
        help="stream: also run it through the engine of git revision REV of this repository (e.g. 5cdbac1^); "
        "vllm or vllm:URL: through a vLLM server on the same Hugging Face model (trainer/bench_vllm.py)",
    )
    parser.add_argument(
        "--against-threads",
        type=int,
        default=None,
        metavar="T",
        help="stream: torch threads of the --against engine (default: --threads)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=None,
        metavar="R",
        help="stream: the continuous engine as R replicas, one process each (default: the config's engine.replicas)",
    )
    from trainer import bench_vllm

    bench_vllm.configure(parser)


def run(args: argparse.Namespace) -> dict:
    from trainer import bench_vllm

    if bench_vllm.is_vllm(args.against):
        return bench_vllm.run(args, _workload, _through_batching_engine)
    if args.requests:
        return run_stream(args)
    import torch

    from policies.generation import GenerationEngine
    from policies.sampling import SamplingParams, per_prompt
    from policies.serve_config import ServeConfig, build_engine

    config = ServeConfig.load(args.config)
    threads = args.threads or config.engine.threads
    if threads:
        torch.set_num_threads(threads)
    engine = build_engine(config)
    gen = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, engine.vocab_size, (args.batch, args.prompt_tokens), generator=gen).tolist()
    # No stop tokens: every row samples exactly new_tokens, in both modes.
    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=args.seed)
    figures: dict = {}
    outputs = {}
    for mode in ("kv_cache", "recompute"):
        runner = GenerationEngine(engine.policy, max_batch_size=args.batch, mode=mode)
        runner.generate_batch(prompts[:1], [params.model_copy(update={"max_tokens": 4})])  # warm-up
        started = time.perf_counter()
        outputs[mode] = runner.generate_batch(prompts, per_prompt(params, len(prompts)))
        elapsed = time.perf_counter() - started
        new_tokens = sum(len(c.token_ids) for c in outputs[mode])
        key = "kv" if mode == "kv_cache" else "recompute"
        figures[f"tokens_per_s_{key}"] = new_tokens / elapsed
        figures["new_tokens"] = new_tokens
        log.info("%s: %d new tokens in %.2fs", mode, new_tokens, elapsed)
    pairs = [
        (a, b) for x, y in zip(outputs["kv_cache"], outputs["recompute"]) for a, b in zip(x.token_ids, y.token_ids)
    ]
    agreement = sum(a == b for a, b in pairs) / max(len(pairs), 1)
    exact_dtype = next(engine.policy.model.parameters()).dtype == torch.float32
    if exact_dtype and agreement < 1.0:
        raise RuntimeError("KV-cache and recompute decoding sampled different tokens in float32; the cache is wrong")
    figures["token_agreement"] = agreement
    figures["speedup"] = figures["tokens_per_s_kv"] / figures["tokens_per_s_recompute"]
    figures.update(batch=args.batch, prompt_tokens=args.prompt_tokens, threads=torch.get_num_threads())
    return figures


@dataclass(frozen=True)
class _Request:
    prompt: list[int]
    max_tokens: int
    seed: int


def _workload(args: argparse.Namespace, vocab_size: int) -> list[_Request]:
    rng = random.Random(args.seed)
    requests: list[_Request] = []
    while len(requests) < args.requests:
        length = rng.randint(max(1, args.prompt_tokens // 2), args.prompt_tokens * 3 // 2)
        length = args.prompt_tokens if args.fixed else length
        prompt = [rng.randrange(10, vocab_size) for _ in range(length)]
        for _ in range(min(args.group, args.requests - len(requests))):
            budget = rng.randint(max(1, args.new_tokens // 4), args.new_tokens)
            budget = args.new_tokens if args.fixed else budget
            requests.append(_Request(prompt, budget, rng.randrange(1 << 31)))
    return requests


def _through_batching_engine(
    engine, requests: list[_Request], concurrency: int, sampled: list[int] | None = None
) -> float:
    """Seconds for C trio clients to run every request through the trainer's `BatchingEngine` (``sampled``: each
    completion's token count is appended to it)."""
    import trio

    from policies.sampling import SamplingParams
    from trainer.generation_engine import BatchingEngine

    batching = BatchingEngine(engine, engine.max_batch_size)
    queue = list(reversed(requests))

    async def client() -> None:
        while queue:
            request = queue.pop()
            params = SamplingParams(max_tokens=request.max_tokens, seed=request.seed)
            [completion] = await batching.generate([request.prompt], params)
            if sampled is not None:
                sampled.append(len(completion.token_ids))

    async def main() -> float:
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(client)
        return time.perf_counter() - started

    return trio.run(main)


def _hf_generate(model, requests: list[_Request], batch: int, pad_token_id: int = 0) -> float:
    """Seconds for `transformers` `generate()` over the requests in static batches (left-padded, sampled)."""
    import torch

    from policies.continuous import left_padded

    device = next(model.parameters()).device
    started = time.perf_counter()
    for start in range(0, len(requests), batch):
        chunk = requests[start : start + batch]
        ids, mask, _ = left_padded([r.prompt for r in chunk], pad_token_id, device)
        torch.manual_seed(chunk[0].seed)
        with torch.no_grad():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max(r.max_tokens for r in chunk),
                min_new_tokens=max(r.max_tokens for r in chunk),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=pad_token_id,
                use_cache=True,
            )
    return time.perf_counter() - started


def _against(args: argparse.Namespace, requests: list[_Request], threads: int, ours: float, repo: Path = REPO) -> float:
    """Seconds for the stream through revision ``args.against``'s engine (see the module docstring)."""
    import io
    import json
    import os
    import subprocess
    import sys
    import tarfile
    import tempfile

    from policies import memory_tuning

    if args.against.startswith("-"):
        raise SystemExit(f"bench generate --against {args.against}: a revision, not an option")
    resolved = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{args.against}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if resolved.returncode != 0:
        raise SystemExit(f"bench generate --against {args.against}: no such commit in {repo}")
    commit = resolved.stdout.decode().strip()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        message = archive.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"bench generate --against {args.against}: git archive failed: {' '.join(message[-1:])}")
    config = args.config.resolve()
    try:
        config = config.relative_to(repo)
    except ValueError:
        raise SystemExit(f"bench generate --against: --config must lie in the repository ({repo})") from None
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(tmp, filter="data")
        if not (Path(tmp) / config).is_file():
            raise SystemExit(f"bench generate --against {args.against}: that revision has no {config}")
        listed = Path(tmp) / "requests.json"
        listed.write_text(json.dumps([[r.prompt, r.max_tokens, r.seed] for r in requests]))
        command = [sys.executable, str(Path(__file__).with_name("bench_against.py")), tmp, str(config), str(listed)]
        command += ["--concurrency", str(args.concurrency), "--threads", str(threads)]
        log.info("revision %s: running the stream through its engine", args.against)
        # the same allocator thresholds as this process's engines (`policies.memory_tuning`), which REV may predate
        env = {
            **os.environ,
            "MALLOC_MMAP_THRESHOLD_": str(memory_tuning.MMAP_THRESHOLD_MAX),
            "MALLOC_TRIM_THRESHOLD_": str(memory_tuning.TRIM_BYTES),
        }
        done = subprocess.run(command, cwd=tmp, env=env, stdout=subprocess.PIPE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench generate --against {args.against}: its engine failed (exit {done.returncode})")
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    same_model(float(result["fingerprint"]), ours, f"bench generate --against {args.against}: its {config}")
    return float(result["seconds"])


def fingerprint(model) -> float:
    """The weights fingerprint `same_model` compares: the float64 sum of every parameter (the `--against` script
    computes it the same way in its own process, which imports the other revision's modules, not this one)."""
    return sum(float(p.detach().double().sum()) for p in model.parameters())


def same_model(theirs: float, ours: float, what: str) -> None:
    """SystemExit unless two weights fingerprints (sums of every parameter, float64) agree to 1e-6 relative."""
    if abs(theirs - ours) > 1e-6 * max(1.0, abs(ours)):
        raise SystemExit(f"{what} builds another model (weights fingerprint {theirs:.6f}, here {ours:.6f})")


def run_stream(args: argparse.Namespace) -> dict:
    import statistics

    import torch

    from policies import memory_tuning
    from policies.generation import GenerationEngine
    from policies.serve_config import ServeConfig, build_engine, replicated

    config = ServeConfig.load(args.config)
    threads = args.threads or config.engine.threads
    if threads:
        torch.set_num_threads(threads)
    memory_tuning.keep_freed_memory()  # as `gym serve`; the --against process gets the same thresholds
    served = build_engine(config.model_copy(update={"engine": config.engine.model_copy(update={"replicas": 1})}))
    policy = served.policy
    requests = _workload(args, served.vocab_size)
    new_tokens = sum(r.max_tokens for r in requests)
    warm = requests[: args.concurrency]
    if args.warmup_tokens:
        warm = [dataclasses.replace(r, max_tokens=min(r.max_tokens, args.warmup_tokens)) for r in warm]
    figures: dict = {}
    chunk = args.prefill_chunk or config.engine.prefill_chunk
    continuous = GenerationEngine(
        policy,
        max_batch_size=args.concurrency,
        mode="continuous",
        prefill_chunk=chunk,
        cuda_graphs=config.engine.cuda_graphs,
        traced_decode=config.engine.traces_decode(policy.device.type),
    )
    replicas = args.replicas or config.engine.replicas
    ours = replicated(continuous, replicas, threads)
    engines = [("continuous", ours)]
    if not args.skip_batch:
        engines.insert(0, ("batch", GenerationEngine(policy, max_batch_size=args.concurrency, mode="kv_cache")))
    memory_tuning.freeze_startup_objects()  # everything is built, as in `gym serve` and the trainer
    for name, engine in engines:
        _through_batching_engine(engine, warm, args.concurrency)  # warm-up
        before = ours.stats() if engine is ours else None
        elapsed = _through_batching_engine(engine, requests, args.concurrency)
        figures[f"tokens_per_s_{name}"] = new_tokens / elapsed
        log.info("%s engine: %d new tokens in %.2fs", name, new_tokens, elapsed)
    stats = ours.stats()
    # the measured rows: those that finished after the last warm-up row (replicas keep one list each)
    last_warm = max((done for _, _, done, _ in before["timings"]), default=float("-inf"))
    timings = [t for t in stats["timings"] if t[2] > last_warm]
    if replicas > 1:
        figures["replica_rows"] = [now - then for now, then in zip(stats["rows"], before["rows"])]
    figures["tokens_per_s"] = figures.pop("tokens_per_s_continuous")
    _hf_generate(policy.model, warm, args.concurrency)
    elapsed = _hf_generate(policy.model, requests, args.concurrency)
    figures["tokens_per_s_hf"] = new_tokens / elapsed
    log.info("HF generate: %d requested tokens in %.2fs", new_tokens, elapsed)
    if not args.skip_batch:
        figures["speedup_vs_batch"] = figures["tokens_per_s"] / figures["tokens_per_s_batch"]
    figures["speedup_vs_hf"] = figures["tokens_per_s"] / figures["tokens_per_s_hf"]
    if args.against:
        against_threads = args.against_threads or torch.get_num_threads()
        elapsed = _against(args, requests, against_threads, fingerprint(policy.model))
        figures["tokens_per_s_against"] = new_tokens / elapsed
        figures["speedup_vs_against"] = figures["tokens_per_s"] / figures["tokens_per_s_against"]
        figures.update(against=args.against, against_threads=against_threads)
        log.info("revision %s: %d new tokens in %.2fs", args.against, new_tokens, elapsed)
    figures["ttft_p50_ms"] = 1000 * statistics.median(first - sent for sent, first, _, _ in timings)
    figures["tpot_p50_ms"] = 1000 * statistics.median(
        (done - first) / (n - 1) for _, first, done, n in timings if n > 1
    )
    figures["prefills"] = stats["prefills"] - before["prefills"]
    graphs = continuous._batcher.graphs
    if graphs is not None and graphs.trace:  # this process's replica
        figures.update(
            traces=len(graphs.traces),
            traces_dropped=graphs.traces_dropped,
            trace_replays=graphs.replays,
            trace_failure=graphs.failed,
        )
    elif graphs is not None and graphs.capture:
        figures.update(cuda_graphs=len(graphs.graphs), graph_replays=graphs.replays, graph_failure=graphs.failed)
    dtype = next(policy.model.parameters()).dtype
    if dtype != torch.float32:
        figures.update(logprob_gap(continuous, requests[: args.group * 4]))
    if ours is not continuous:
        ours.close()
    figures.update(
        new_tokens=new_tokens,
        requests=len(requests),
        concurrency=args.concurrency,
        group=args.group,
        prompt_tokens=args.prompt_tokens,
        prefill_chunk=chunk,
        threads=torch.get_num_threads(),
        replicas=replicas,
        device=str(policy.device),
        dtype=str(dtype).removeprefix("torch."),
    )
    return figures


def logprob_gap(engine, requests: list[_Request]) -> dict:
    """The engine's logprobs against the trainer's: ``requests`` sampled with their routes, then scored by a
    float32 copy of the model replaying those routes (R3, what the trainer computes). Figures: mean and max
    |logprob difference| over the sampled tokens, and the tokens compared."""
    import copy

    import torch

    from policies.sampling import SamplingParams

    params = [SamplingParams(max_tokens=r.max_tokens, seed=r.seed, return_routed_experts=True) for r in requests]
    completions = engine.generate_batch([r.prompt for r in requests], params)
    trainer = copy.deepcopy(engine.policy.model).float()
    device = engine.policy.device
    gaps = []
    with torch.no_grad():
        for request, c in zip(requests, completions):
            ids = torch.tensor([request.prompt + c.token_ids], device=device)
            routes = torch.tensor(c.routed_experts.array, dtype=torch.int64, device=device)[:, None]  # (L, 1, T, K)
            logits = trainer(ids, routed_experts=routes).logits[0, len(request.prompt) - 1 : -1].float()
            exact = torch.log_softmax(logits, dim=-1).gather(1, ids[0, len(request.prompt) :, None])[:, 0]
            gaps.append((exact - torch.tensor(c.raw_logprobs, device=device)).abs())
    gap = torch.cat(gaps)
    del trainer
    return {
        "trainer_logprob_gap_mean": float(gap.mean()),
        "trainer_logprob_gap_max": float(gap.max()),
        "trainer_tokens_compared": gap.numel(),
    }
