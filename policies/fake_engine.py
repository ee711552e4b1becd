"""A deterministic engine for tests and dry runs: no model, no torch.

Completion i of a prompt is `script[(len(prompt) + j) % len(script)]` for j = 0, 1, ...,
cut at a stop token or max_tokens; every logprob is `logprob`. `delay_s` makes each batch take
that long (to exercise the server's queue).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from policies.sampling import Completion, SamplingParams, check_request, per_prompt


class ScriptedEngine:
    """Implements `RolloutEngine` and `ServingEngine`."""

    def __init__(
        self,
        script: list[int] | None = None,
        vocab_size: int = 256,
        context_length: int = 512,
        logprob: float = -1.0,
        delay_s: float = 0.0,
        max_batch_size: int = 32,
    ) -> None:
        self.script = script or [10, 11, 12, 13]
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.logprob = logprob
        self.delay_s = delay_s
        self.max_batch_size = max_batch_size
        self.model_name = "scripted"
        self.weights_version = 0
        self.batches: list[int] = []  # size of every batch served, in order

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return await asyncio.to_thread(self.generate_batch, prompts, per_prompt(params, len(prompts)))

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        check_request(prompt, params, self.vocab_size, self.context_length)

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        for prompt, p in zip(prompts, params, strict=True):
            self.check_request(prompt, p)
        self.batches.append(len(prompts))
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._complete(prompt, p) for prompt, p in zip(prompts, params)]

    def _complete(self, prompt: list[int], params: SamplingParams) -> Completion:
        tokens: list[int] = []
        reason = "length"
        while len(tokens) < params.max_tokens:
            tokens.append(self.script[(len(prompt) + len(tokens)) % len(self.script)])
            if tokens[-1] in params.stop_token_ids:
                reason = "stop"
                break
        return Completion(
            token_ids=tokens,
            logprobs=[self.logprob] * len(tokens),
            raw_logprobs=[self.logprob] * len(tokens),
            routed_experts=None,
            finish_reason=reason,
            weights_version=self.weights_version,
        )

    def load_checkpoint(self, path: Path, version: int | None = None) -> int:
        if not Path(path).exists():
            raise FileNotFoundError(f"no checkpoint at {path}")
        self.weights_version = self.weights_version + 1 if version is None else version
        return self.weights_version

    def load_safetensors(self, data: bytes, version: int | None = None) -> int:
        self.weights_version = self.weights_version + 1 if version is None else version
        return self.weights_version
