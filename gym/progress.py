"""Progress bars on stderr (tqdm) for the long commands: warm start, rollout, grade.

A bar is drawn only when stderr is a terminal (tqdm's ``disable=None``) and its caller enables it,
so logs, pipes and CI output carry no carriage-return noise. While a bar is drawn, log records go
through ``tqdm.write`` (``logging_redirect_tqdm``) so a line logged meanwhile never shreds it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


@contextmanager
def progress(total: int, desc: str, unit: str, enabled: bool = True) -> Iterator[tqdm]:
    """A bar of ``total`` ``unit``s (``bar.update(1)`` per one done), closed on the way out."""
    bar = tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, disable=None if enabled else True, dynamic_ncols=True
    )
    try:
        if bar.disable:
            yield bar
        else:
            with logging_redirect_tqdm(tqdm_class=tqdm):
                yield bar
    finally:
        bar.close()
