"""The one garbage-collection policy: paused while qlower builds or walks a big graph.

Loading, lowering, converting, validating and writing allocate millions of small objects that live
as long as the graph (or are acyclic temporaries); cyclic-GC passes over them cost more than the
work and free nothing. The library's stages leave the process-wide setting alone; the entry points
(`qlower.api`'s functions, the CLI) pause it around a whole job with `paused()`, which restores what
the caller had.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Cyclic GC off for the block, then as the caller had it (nested uses are free)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
