"""Intra-node RDEP over shared memory: senders write rows straight into the owner's receive buffer.

The CPU analogue of CUDA IPC buffers. Each rank owns one segment::

    header (W, E_local) int64   row s: rows rank s sent here, per local expert
    rows   (W, capacity, H)     slot s: the rows themselves

and maps every other rank's segment. An exchange is: write headers and rows into each
destination's segment, barrier, check every pair against the capacity (every rank reads all
headers, so all raise together), copy out what arrived, barrier (so nobody overwrites a buffer
before its owner has read it). torch.distributed is used only for the name handshake, barriers
and the load all-reduce.

Segments are files in /dev/shm (tmpfs) mapped MAP_SHARED with `torch.from_file`; each owner
unlinks its file as soon as every rank has mapped it, so after set-up nothing can be left behind
in /dev/shm, whatever happens to the processes. (multiprocessing.shared_memory is not used: its
resource tracker, shared by spawned ranks, double-books segments that several processes map.)
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from policies.dispatcher import RemoteDispatcher

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


class SharedMemoryDispatcher(RemoteDispatcher):
    """RDEP dispatcher for ranks on one host; call collectively from every rank of `group`."""

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        capacity: int,
        group: dist.ProcessGroup | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(num_experts, dist.get_rank(group), dist.get_world_size(group), capacity)
        self.group = group
        world, local = self.world_size, self.num_local_experts
        header_bytes = world * local * 8
        row_count = world * capacity * hidden_size
        size = header_bytes + row_count * dtype.itemsize
        prefix = [f"rdep-{secrets.token_hex(6)}" if self.rank == 0 else None]
        dist.broadcast_object_list(prefix, src=dist.get_global_rank(group, 0) if group else 0, group=group)
        paths = [SHM_DIR / f"{prefix[0]}-{r}" for r in range(world)]
        own = torch.from_file(str(paths[self.rank]), shared=True, size=size, dtype=torch.uint8)  # creates it
        dist.barrier(group=group)
        segments = [
            own if r == self.rank else torch.from_file(str(p), shared=True, size=size, dtype=torch.uint8)
            for r, p in enumerate(paths)
        ]
        dist.barrier(group=group)
        os.unlink(paths[self.rank])  # every rank has it mapped: drop the name so nothing can leak
        self._headers = [seg[:header_bytes].view(torch.int64).view(world, local) for seg in segments]
        self._rows = [seg[header_bytes:].view(dtype).view(world, capacity, hidden_size) for seg in segments]

    def exchange(self, rows: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sizes = counts.sum(dim=1).tolist()
        for dst, chunk in enumerate(rows.split(sizes)):
            self._headers[dst][self.rank] = counts[dst]
            if len(chunk) <= self.capacity:
                self._rows[dst][self.rank, : len(chunk)] = chunk  # straight into the owner's buffer
        dist.barrier(group=self.group)
        self.check_capacity(torch.stack([header.sum(dim=1) for header in self._headers], dim=1))
        counts_recv = self._headers[self.rank].clone()
        mine = self._rows[self.rank]
        received = torch.cat([mine[src, :n] for src, n in enumerate(counts_recv.sum(dim=1).tolist())])
        received = received.to(rows.dtype)  # cat already copied out of the buffer
        dist.barrier(group=self.group)
        return received, counts_recv

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor, group=self.group)
        return tensor

    def close(self) -> None:
        self._headers, self._rows = [], []  # the mappings go when the last view does
