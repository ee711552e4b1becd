"""Run a request stream through the engine of another revision of this repository (`bench generate --against`).

Executed as a script by `trainer.bench_generate` in a subprocess, with that revision's files (`git archive`) as the
import root, so every module it imports (`policies.serve_config`, the trainer's `BatchingEngine`) is that
revision's: the engine as it was, on the same model config, requests and seeds. It reads the requests from a
JSON file and prints one JSON line: seconds for the timed stream and a fingerprint of the model's weights, so
the caller can check both sides ran the same model. Only APIs every revision since the trainer's
`BatchingEngine` has are used: `ServeConfig.load`, `build_engine`, `BatchingEngine(engine, max_batch_size)`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the revision's files (its policies/, trainer/, kernels/, configs/)")
    parser.add_argument("config", help="serve YAML, relative to root")
    parser.add_argument("requests", help="JSON file: [[prompt ids, max_tokens, seed], ...]")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the revision's own choice)")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    import torch
    import trio

    from policies.sampling import SamplingParams
    from policies.serve_config import ServeConfig, build_engine

    try:
        from trainer.generation_engine import BatchingEngine
    except ImportError:  # a revision from before the engine's module had its name
        try:
            from trainer.batching import BatchingEngine
        except ImportError:  # before the trainer's engines were split
            from trainer.engine import BatchingEngine

    if args.threads:
        torch.set_num_threads(args.threads)
    engine = build_engine(ServeConfig.load(f"{args.root}/{args.config}"))
    engine.max_batch_size = args.concurrency  # as the caller's engines: one batch holds every client's rows
    with open(args.requests) as file:
        requests = [(list(prompt), int(budget), int(seed)) for prompt, budget, seed in json.load(file)]

    def stream(todo: list) -> float:
        batching = BatchingEngine(engine, args.concurrency)
        queue = list(reversed(todo))

        async def client() -> None:
            while queue:
                prompt, budget, seed = queue.pop()
                await batching.generate([prompt], SamplingParams(max_tokens=budget, seed=seed))

        async def run() -> float:
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(args.concurrency):
                    nursery.start_soon(client)
            return time.perf_counter() - started

        return trio.run(run)

    stream(requests[: args.concurrency])  # warm-up, as for the engines of this revision
    elapsed = stream(requests)
    fingerprint = sum(float(p.detach().double().sum()) for p in engine.policy.model.parameters())
    print(json.dumps({"seconds": elapsed, "fingerprint": fingerprint, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
