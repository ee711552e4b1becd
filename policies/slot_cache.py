"""The static KV cache of continuous batching: one slot per running row, one live window of columns shared by
all rows, seen by the model's attention through the `Cache.update` contract. Its own module because the engine
(`policies.continuous`) and both decoders (`policies.decode`, `policies.cuda_graphs`) use it."""

from __future__ import annotations

import torch

from policies.sampling import EngineError


class SlotCache:
    """The static KV cache, seen by the model's attention through the `Cache.update` contract."""

    def __init__(
        self,
        layers: int,
        slots: int,
        kv_heads: int,
        capacity: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (layers, slots, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.compact = False  # move the live window back to column 0 once the dead columns before it outnumber it
        self.n = 0  # running rows: slots 0..n-1
        self.start = 0  # first live column
        self.end = 0  # the column the next step writes
        self.moves = 0  # live-window copies (a prompt longer than `end`, or `end` at the capacity)

    # -- the `Cache` contract used by `Attention.forward` and `RdepMoeModel.forward` during a decode step
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.end - self.start

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the step's (n, kv_heads, 1, D) keys/values at column ``end``; return the live window."""
        self.keys[layer_idx, : self.n, :, self.end] = k[:, :, 0]
        self.values[layer_idx, : self.n, :, self.end] = v[:, :, 0]
        window = slice(self.start, self.end + 1)
        return self.keys[layer_idx, : self.n, :, window], self.values[layer_idx, : self.n, :, window]

    # -- placement
    def make_room(self, need_end: int) -> None:
        """Make ``end >= need_end`` and leave a free column at ``end``, moving the live window if needed."""
        if self.n == 0:
            self.start = self.end = need_end
            return
        width = self.end - self.start
        dead = self.compact and self.start > width and need_end <= width
        if need_end <= self.end < self.capacity and not dead:
            return
        new_end = max(need_end, width)
        if new_end >= self.capacity:
            raise EngineError(f"the KV cache of {self.capacity} columns cannot hold a window of {new_end + 1}")
        live = (slice(None), slice(0, self.n), slice(None), slice(self.start, self.end))
        moved = (slice(None), slice(0, self.n), slice(None), slice(new_end - width, new_end))
        for buffer in (self.keys, self.values):
            buffer[moved] = buffer[live].clone()
        self.start, self.end = new_end - width, new_end
        self.moves += 1

    def move_row(self, source: int, target: int) -> None:
        """Copy a row's live window from slot ``source`` to slot ``target``."""
        for buffer in (self.keys, self.values):
            buffer[:, target, :, self.start : self.end] = buffer[:, source, :, self.start : self.end]
