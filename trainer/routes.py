"""Routes kept for routing replay (R3): the experts the engine routed every sampled token to.

`RouteRecorder` wraps any `RolloutEngine`, asks for the routed experts of every call and keeps them
keyed by the token sequence they cover, so the trainer can attach the routes of a finished trajectory
(`take`) without the gym carrying them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from policies.sampling import Completion, RolloutEngine, SamplingParams


def sequence_key(ids: Sequence[int]) -> str:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


class RouteRecorder:
    """A `RolloutEngine` that records the routed experts of every completion it returns."""

    def __init__(self, inner: RolloutEngine) -> None:
        self.inner = inner
        self._routes: dict[str, np.ndarray] = {}

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        asked = params.model_copy(update={"return_routed_experts": True})
        completions = await self.inner.generate(prompts, asked)
        out = []
        for prompt, completion in zip(prompts, completions):
            if completion.routed_experts is not None:
                self._routes[sequence_key(list(prompt) + completion.token_ids)] = np.asarray(
                    completion.routed_experts, dtype=np.int16
                )
            out.append(completion.model_copy(update={"routed_experts": None}))
        return out

    def take(self, ids: Sequence[int], sampled: Sequence[bool]) -> np.ndarray | None:
        """Routes (L, len(ids), K) of a finished trajectory, from the last call that produced it.

        Every call's record is removed. The last call prefilled the whole context before its
        completion, so its routes cover every position that affects a sampled token's logprob;
        positions after it (a trailing observation) are -1 (route freely).
        """
        ends = [i + 1 for i in range(len(ids)) if sampled[i] and (i + 1 == len(ids) or not sampled[i + 1])]
        found = [(end, self._routes.pop(sequence_key(ids[:end]), None)) for end in ends]
        found = [(end, r) for end, r in found if r is not None]
        if not found:
            return None
        end, routes = found[-1]
        full = np.full((routes.shape[0], len(ids), routes.shape[2]), -1, dtype=np.int16)
        full[:, :end] = routes[:, :end]
        return full

    def pending(self) -> int:
        return len(self._routes)
