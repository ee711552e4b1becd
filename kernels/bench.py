"""`python -m gym bench kernels`: torch reference vs Triton, per kernel, forward and forward+backward.

With a CUDA GPU: both backends on the same inputs in one run, median wall times (CUDA events), the
speedup reference/Triton, the peak extra GPU memory of the logprob kernel, and the largest relative
difference between the two outputs as a sanity check. Without one: it says so on stdout and times the
reference on the CPU only, at smaller default sizes; ``gpu`` is false and no Triton figure is given.

Figures (keys): ``gpu``, ``device``, ``dtype``, the sizes, then for each kernel K in ``logprob``,
``permute``, ``unpermute``, ``swiglu`` and each pass P in ``fwd``, ``fwdbwd``: ``K_P_reference_ms`` and,
on a GPU, ``K_P_triton_ms``, ``K_P_speedup`` and ``K_max_rel_diff``; on a GPU also
``logprob_fwdbwd_{reference,triton}_peak_mib``, and the same logprob figures for ``full_logits``:
plain torch that holds all (N, V) logits in fp32, the code the fused kernel replaces.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

import torch

from kernels import grouped_swiglu, moe_permute, moe_unpermute, token_logprob_entropy

log = logging.getLogger(__name__)

FULL_LOGITS = "full_logits"
"""Extra baseline for the logprob kernel on a GPU: plain torch materialising the (N, V) logits."""

# (GPU default, CPU default) per size option: GPU sizes are a Qwen3-MoE-like layer and vocabulary.
SIZES: dict[str, tuple[int, int, str]] = {
    "tokens": (8192, 512, "rows (tokens) for every kernel"),
    "vocab": (151936, 16384, "vocabulary size of the LM head"),
    "hidden": (2048, 256, "hidden size H"),
    "ffn": (768, 512, "expert FFN size F"),
    "experts": (128, 16, "routed experts E"),
    "topk": (8, 4, "experts per token K"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    for name, (gpu, cpu, help_text) in SIZES.items():
        parser.add_argument(
            f"--{name}", type=int, default=None, help=f"{help_text} (default {gpu} on GPU, {cpu} on CPU)"
        )
    parser.add_argument("--chunk-size", type=int, default=4096, help="vocabulary chunk of the logprob kernel")
    parser.add_argument("--repeats", type=int, default=10, help="timed repetitions per figure (median reported)")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="input dtype (default bfloat16 on GPU, float32 on CPU)",
    )


def _timer(device: torch.device, repeats: int) -> Callable[[Callable[[], object]], float]:
    def measure(fn: Callable[[], object]) -> float:
        fn()  # warm-up: compiles the Triton kernels, fills allocator caches
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return measure


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def _cases(sizes: dict[str, int], dtype: torch.dtype, device: torch.device, chunk_size: int) -> dict:
    """kernel -> (forward fn(backend), forward+backward fn(backend)), all on the same inputs."""
    gen = torch.Generator(device=device).manual_seed(0)
    t, v, h, f, e, k = (sizes[n] for n in ("tokens", "vocab", "hidden", "ffn", "experts", "topk"))

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype).requires_grad_()

    hidden, head = randn(t, h), randn(v, h, scale=h**-0.5)
    targets = torch.randint(0, v, (t,), generator=gen, device=device)
    x = randn(t, h)
    expert_idx = torch.rand(t, e, generator=gen, device=device).topk(k, dim=1).indices
    gate = torch.rand(t, k, generator=gen, device=device).requires_grad_()
    permuted, row_map, counts = moe_permute(x.detach(), expert_idx, e, backend="reference")
    y = randn(t * k, h)
    weights = (randn(e, f, h, scale=h**-0.5), randn(e, f, h, scale=h**-0.5), randn(e, h, f, scale=f**-0.5))
    rows = permuted.detach().requires_grad_()

    def logprob(backend):
        if backend == FULL_LOGITS:  # the usual torch code: every logit held at once, fp32 softmax
            logp = torch.log_softmax((hidden @ head.T).float(), dim=-1)
            return logp.gather(1, targets[:, None]).squeeze(1) - (logp.exp() * logp).sum(-1)
        lp, ent = token_logprob_entropy(hidden, head, targets, chunk_size=chunk_size, backend=backend)
        return lp + ent

    cases = {
        "logprob": logprob,
        "permute": lambda backend: moe_permute(x, expert_idx, e, backend=backend)[0],
        "unpermute": lambda backend: moe_unpermute(y, row_map, gate, t, backend=backend),
        "swiglu": lambda backend: grouped_swiglu(rows, counts, *weights, backend=backend),
    }
    return {name: (fn, _with_backward(fn)) for name, fn in cases.items()}


def _with_backward(forward: Callable[[str], torch.Tensor]) -> Callable[[str], torch.Tensor]:
    def run(backend: str) -> torch.Tensor:
        out = forward(backend)
        out.backward(torch.ones_like(out))
        return out

    return run


def _peak_mib(fn: Callable[[], object], device: torch.device) -> float:
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def run(args: argparse.Namespace) -> dict:
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    sizes = {name: getattr(args, name) or (defaults[0] if gpu else defaults[1]) for name, defaults in SIZES.items()}
    dtype = getattr(torch, args.dtype or ("bfloat16" if gpu else "float32"))
    figures: dict = {
        "gpu": gpu,
        "device": torch.cuda.get_device_name(device) if gpu else "cpu",
        "dtype": str(dtype)[6:],
    }
    figures.update(sizes)
    if not gpu:
        print("no CUDA GPU present: timing the torch reference on the CPU only (no Triton figures)")
    measure = _timer(device, args.repeats)
    backends = ("reference", "triton") if gpu else ("reference",)
    for name, (forward, both) in _cases(sizes, dtype, device, args.chunk_size).items():
        extra = (FULL_LOGITS,) if gpu and name == "logprob" else ()
        for label, fn in (("fwd", forward), ("fwdbwd", both)):
            for backend in backends + extra:
                log.info("timing %s %s on %s", name, label, backend)
                figures[f"{name}_{label}_{backend}_ms"] = measure(lambda fn=fn, backend=backend: fn(backend))
            if gpu:
                figures[f"{name}_{label}_speedup"] = (
                    figures[f"{name}_{label}_reference_ms"] / figures[f"{name}_{label}_triton_ms"]
                )
        if gpu:
            with torch.no_grad():
                figures[f"{name}_max_rel_diff"] = _rel_diff(forward("triton"), forward("reference"))
            if name == "logprob":
                for backend in backends + extra:
                    figures[f"logprob_fwdbwd_{backend}_peak_mib"] = _peak_mib(
                        lambda both=both, backend=backend: both(backend), device
                    )
    return figures
