"""`python -m gym bench generate --requests N --against vllm`: our engine against a vLLM server, same model and stream.

One Hugging Face model directory (``--model DIR``, else the tiny random-init Qwen2 of configs/models/qwen2-tiny
written to a temporary directory by `trainer.tiny_hf`: head size 32, the least vLLM's CPU attention takes) is
loaded in float32 here and served by vLLM from the same files. The request stream is `bench generate`'s (prompts,
budgets, seeds and groups as ``--requests``/``--prompt-tokens``/``--new-tokens``/``--group``/``--fixed`` draw
them; no stop tokens and vLLM's ``ignore_eos``, so every request samples exactly its budget), issued by
``--concurrency`` closed-loop clients to each engine in turn, after the same warm-up:

- ours: the in-process `GenerationEngine` the trainer builds for a Hugging Face policy (``kv_cache`` mode: the
  continuous engine's slot cache is the RDEP policy's own attention) behind the trainer's `BatchingEngine`, on
  ``--threads`` torch threads;
- vLLM: ``--against vllm`` launches ``PYTHON -m vllm.entrypoints.openai.api_server`` from ``--vllm-python`` (the
  Python of vLLM's own venv; `policies.vllm_server.VllmServer`, float32, ``--max-num-seqs`` = the concurrency,
  ``--vllm-kv-bytes`` of KV cache, a step's token budget that prefills every prompt whole) on the model directory
  and stops it at the end; ``--against vllm:URL`` attaches to a running server that serves the ``--model``
  directory (required then; a server whose ``/v1/models`` root names another directory is logged as a warning:
  it may be the same files under another path). Requests go through
  our `VllmEngine` (token ids in, ``/v1/completions``), as the trainer sends them.

A run fails (SystemExit) when either engine returns a completion short of its budget. Greedy agreement: the first
``--greedy`` prompts sampled at temperature 0 for up to 32 tokens by both engines; in float32 the tokens should be
identical, and the share that is (position by position, up to each pair's shorter length) is reported rather
than required: vLLM's CPU kernels and torch's round differently, and a near-tie can flip an argmax.

Figures (``--json FILE``): ``tokens_per_s`` (ours), ``tokens_per_s_vllm``, ``speedup_vs_vllm`` (ours / vLLM),
``seconds``, ``seconds_vllm``, ``new_tokens`` (requested), ``tokens_ours`` / ``tokens_vllm`` (sampled: each must
equal ``new_tokens``), ``vllm_version``, ``vllm_url``, ``vllm_start_s`` (a launched server's start, null when
attached), ``vllm_eager`` (the launched server ran without torch.compile, ``--vllm-eager``), ``greedy_agreement``
(share of identical greedy tokens), ``greedy_identical`` (greedy requests whose tokens are all identical),
``greedy_requests``, ``engine_mode`` (ours), ``model`` (the directory, or "qwen2-tiny (random init)"),
``parameters``, ``requests``, ``concurrency``, ``group``, ``prompt_tokens``, ``threads``, ``against`` ("vllm" or the
URL form as given), ``dtype``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
TINY_SPEC = REPO / "configs" / "models" / "qwen2-tiny"
GREEDY_TOKENS = 32


def configure(parser: argparse.ArgumentParser) -> None:
    """The options `bench generate` adds for ``--against vllm``."""
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        metavar="DIR",
        help="--against vllm: the Hugging Face model directory both engines run (default: a tiny random-init Qwen2)",
    )
    parser.add_argument(
        "--vllm-python",
        type=Path,
        default=None,
        metavar="PATH",
        help="--against vllm: the Python of the venv vLLM is installed in (the server is launched from it)",
    )
    parser.add_argument(
        "--vllm-kv-bytes",
        type=int,
        default=256 << 20,
        metavar="B",
        help="--against vllm: the launched server's KV cache (--kv-cache-memory-bytes; default 256 MiB)",
    )
    parser.add_argument(
        "--vllm-eager",
        action="store_true",
        help="--against vllm: launch the server with --enforce-eager (no torch.compile warm-up: a start ~35 s "
        "shorter on 2 CPU cores; the figures are then the eager model's)",
    )
    parser.add_argument(
        "--greedy", type=int, default=4, metavar="K", help="--against vllm: prompts compared at temperature 0"
    )


def is_vllm(against: str | None) -> bool:
    return against is not None and (against == "vllm" or against.startswith("vllm:"))


def run(args: argparse.Namespace, workload: Callable, through_batching_engine: Callable) -> dict:
    """The comparison; ``workload`` and ``through_batching_engine`` are `trainer.bench_generate`'s own request stream
    and closed-loop driver, handed in by it (so this module imports no benchmark and the two form no cycle)."""
    import torch
    from transformers import AutoModelForCausalLM

    from policies.generation import GenerationEngine
    from policies.hf_adapter import CausalLMPolicy

    if not args.requests:
        raise SystemExit("bench generate --against vllm: give the stream's size, --requests N")
    url = args.against.removeprefix("vllm:") if args.against != "vllm" else None
    if url is None and args.vllm_python is None:
        raise SystemExit("bench generate --against vllm: --vllm-python PATH (the Python of vLLM's venv) is required")
    if url is not None and args.model is None:
        raise SystemExit(f"bench generate --against {args.against}: --model DIR, the directory that server serves")
    if url is not None and args.vllm_eager:
        raise SystemExit(
            f"bench generate --against {args.against}: --vllm-eager launches a server; drop it for one attached"
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    with _model_dir(args.model) as model_dir:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
        vocab = model.config.vocab_size
        requests = workload(args, vocab)
        new_tokens = sum(r.max_tokens for r in requests)
        warm = requests[: args.concurrency]
        ours = GenerationEngine(CausalLMPolicy(model, name="policy"), max_batch_size=args.concurrency)
        through_batching_engine(ours, warm, args.concurrency)
        sampled: list[int] = []
        seconds = through_batching_engine(ours, requests, args.concurrency, sampled)
        log.info("ours (%s): %d new tokens in %.2fs", ours.mode, new_tokens, seconds)
        ours_tokens = _sampled_by_ours(ours, requests[: args.greedy])
        with _vllm_server(args, model_dir, url) as (server_url, start_s):
            figures_vllm = _through_vllm(server_url, vocab, requests, warm, args.concurrency)
            greedy_vllm = _greedy_vllm(server_url, vocab, requests[: args.greedy])
            version = _vllm_version(server_url)
        tokens_ours = sum(sampled)
    if tokens_ours != new_tokens or figures_vllm["tokens"] != new_tokens:
        raise SystemExit(
            f"bench generate --against vllm: {new_tokens} tokens requested, ours sampled {tokens_ours}, "
            f"vLLM {figures_vllm['tokens']}: a request ended short of its budget"
        )
    pairs = [(a, b) for x, y in zip(ours_tokens, greedy_vllm) for a, b in zip(x, y)]
    log.info("vLLM %s: %d new tokens in %.2fs", version, new_tokens, figures_vllm["seconds"])
    return {
        "tokens_per_s": new_tokens / seconds,
        "tokens_per_s_vllm": new_tokens / figures_vllm["seconds"],
        "speedup_vs_vllm": figures_vllm["seconds"] / seconds,
        "seconds": seconds,
        "seconds_vllm": figures_vllm["seconds"],
        "new_tokens": new_tokens,
        "tokens_ours": tokens_ours,
        "tokens_vllm": figures_vllm["tokens"],
        "vllm_version": version,
        "vllm_url": server_url,
        "vllm_start_s": start_s,
        "vllm_eager": args.vllm_eager,
        "greedy_agreement": sum(a == b for a, b in pairs) / max(len(pairs), 1),
        "greedy_identical": sum(x == y for x, y in zip(ours_tokens, greedy_vllm)),
        "greedy_requests": len(greedy_vllm),
        "engine_mode": ours.mode,
        "model": str(args.model) if args.model else "qwen2-tiny (random init)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "requests": len(requests),
        "concurrency": args.concurrency,
        "group": args.group,
        "prompt_tokens": args.prompt_tokens,
        "threads": torch.get_num_threads(),
        "against": args.against,
        "dtype": "float32",
    }


@contextlib.contextmanager
def _model_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        if not (given / "config.json").is_file():
            raise SystemExit(f"bench generate --model {given}: no config.json there (a Hugging Face model directory)")
        yield given.resolve()
        return
    from trainer.tiny_hf import write_tiny_qwen

    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        yield write_tiny_qwen(TINY_SPEC, Path(tmp) / "qwen2-tiny")


@contextlib.contextmanager
def _vllm_server(args: argparse.Namespace, model_dir: Path, url: str | None) -> Iterator[tuple[str, float | None]]:
    """The server's URL and its start's seconds (None when attached); a launched one is stopped on the way out."""
    from policies.vllm_server import VllmAdminError, VllmServer

    if url is not None:
        _served_root(url.rstrip("/"), model_dir)
        yield url.rstrip("/"), None
        return
    window = args.prompt_tokens * 3 // 2 + args.new_tokens + GREEDY_TOKENS
    flags = ["--dtype", "float32", "--max-num-seqs", str(args.concurrency), "--max-model-len", str(window)]
    # every running request's whole prompt in one step: vLLM 0.32's CPU build dies on a seeded request whose prefill
    # is chunked ("CPU Generator does not use offset"), and every request here has a seed
    flags += ["--max-num-batched-tokens", str(args.concurrency * window)]
    flags += ["--kv-cache-memory-bytes", str(args.vllm_kv_bytes)]
    flags += ["--enforce-eager"] if args.vllm_eager else []
    with tempfile.TemporaryDirectory(prefix="bench-vllm-log-") as logs:
        server = VllmServer(args.vllm_python, model_dir, flags, log_path=Path(logs) / "server.log")
        try:
            start_s = server.start(timeout_s=600)
        except VllmAdminError as exc:
            raise SystemExit(f"bench generate --against vllm: the server did not start: {exc}") from None
        log.info("vLLM server %s healthy in %.1f s", server.url, start_s)
        try:
            yield server.url, start_s
        finally:
            server.stop()


def _through_vllm(url: str, vocab: int, requests, warm, concurrency: int) -> dict:
    """Seconds for C clients to run every request through `VllmEngine` (after the warm-up), and tokens sampled."""
    import trio

    from policies.sampling import SamplingParams
    from policies.vllm_engine import VllmEngine

    engine = VllmEngine(url, vocab)

    async def stream(chosen) -> tuple[float, int]:
        queue = list(reversed(chosen))
        sampled = [0]

        async def client() -> None:
            while queue:
                request = queue.pop()
                params = SamplingParams(max_tokens=request.max_tokens, seed=request.seed)
                [c] = await engine.generate([request.prompt], params)
                sampled[0] += len(c.token_ids)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(client)
        return time.perf_counter() - started, sampled[0]

    trio.run(stream, warm)
    seconds, tokens = trio.run(stream, requests)
    return {"seconds": seconds, "tokens": tokens}


def _greedy_params(request):
    from policies.sampling import SamplingParams

    return SamplingParams(max_tokens=min(request.max_tokens, GREEDY_TOKENS), temperature=0.0, seed=request.seed)


def _sampled_by_ours(engine, requests) -> list[list[int]]:
    completions = engine.generate_batch([r.prompt for r in requests], [_greedy_params(r) for r in requests])
    return [c.token_ids for c in completions]


def _greedy_vllm(url: str, vocab: int, requests) -> list[list[int]]:
    import trio

    from policies.vllm_engine import VllmEngine

    engine = VllmEngine(url, vocab)

    async def each() -> list[list[int]]:
        return [(await engine.generate([r.prompt], _greedy_params(r)))[0].token_ids for r in requests]

    return trio.run(each)


def _served_root(url: str, model_dir: Path) -> None:
    """Warn when the attached server's ``/v1/models`` root is not ``model_dir`` (SystemExit when it does not answer)."""
    import httpx

    try:
        roots = [str(m.get("root")) for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(f"bench generate --against vllm:{url}: its /v1/models did not answer: {exc}") from None
    if not any(Path(root).name == model_dir.name for root in roots):
        log.warning(
            "vLLM server %s serves %s, not %s: the comparison is only fair on the same weights", url, roots, model_dir
        )


def _vllm_version(url: str) -> str:
    import httpx

    try:
        return str(httpx.get(f"{url}/version", timeout=10).json()["version"])
    except (httpx.HTTPError, ValueError, KeyError):
        return "unknown"
