"""Keep freed memory in the process instead of handing it back to the OS after every decode step.

A decode step allocates and frees the same few MiB every time (logits (B, V), their exponentials, the head's
output). glibc serves blocks above its mmap threshold with fresh `mmap` pages, and gives the top of the heap
back (`trim`) once more than its trim threshold is free; both thresholds adapt to a few MiB. So a step's big
tensors land on pages the kernel must fault in and zero again: on the project's VM, sampling 64 rows of the
tiny policy's 8,192-token vocabulary with the float64 CDF of the time took 12-17 ms that way and 3.3-3.5 ms
with the thresholds raised. The sampler's blocked inversion (5b83ca6) no longer makes that block; a whole
engine step at 64 rows faulted 160 pages without the thresholds and 46-60 with them, and since a step reads its
samples in one copy and skips routes nobody asked for, 85 and 52; at 128 rows ~600 and ~140
(tests/integration/test_allocator.py, docs/engine.md).

`keep_freed_memory()` raises both through `mallopt` (glibc only; elsewhere it does nothing and says so):
blocks up to 32 MiB (glibc's ceiling for the mmap threshold on 64-bit) come from the heap, and up to
``trim_bytes`` of free heap stay mapped. The process keeps its high-water mark of small blocks instead of
returning it; a big model's weights (one block each above 32 MiB) are unaffected. Process-wide and
idempotent. `gym serve` and `bench generate` call it before they build the engine; the trainer does not:
a `make run` with it drew other tokens from policy version 1 on than one without it (the engine's own
outputs are the same with and without it, tested on a 64-request stream), and until that is understood the
trainer's runs stay as they were.

`freeze_startup_objects()` is the garbage collector's side of the same idea: a full (generation 2) collection
visits every tracked object, and a trainer or server process holds ~430,000 of them from its start-up alone
(modules, transformers' import tables, the model) that live as long as it does. A step makes hundreds of
thousands of containers (each completion's routes are nested lists), so a full collection runs about once a
GRPO step, in the middle of sampling: 390-450 ms each in the tiny policy's `bench trainer` on the 2-core VM
under load, adding that to every other step's sampling (on an H100 the sampling part alternated between ~0.25 s
and ~0.5 s). `gc.freeze()` after start-up moves those objects to the permanent generation, which collections
skip: the same collections took 17-27 ms. Garbage cycles among the frozen objects are never freed (there are
none to speak of after the `gc.collect()` before it). The trainer's loop, `gym serve`, `bench generate` and
`bench trainer` call it once everything is built.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc: HEAP_MAX_SIZE / 2 on 64-bit; larger values are refused
TRIM_BYTES = 1 << 30

_applied: bool | None = None


def keep_freed_memory(trim_bytes: int = TRIM_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds (see the module docstring). True where applied."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None:
        log.info("no glibc mallopt here: freed memory is returned to the OS as the C library decides")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, trim_bytes))
    if not _applied:
        log.warning("mallopt refused the mmap/trim thresholds: decode steps may fault in fresh pages")
    return _applied


def freeze_startup_objects() -> int:
    """Collect, then move every object alive now out of the collector's sight (`gc.freeze`, see the module
    docstring). Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("froze %d start-up objects: full collections skip them", frozen)
    return frozen
