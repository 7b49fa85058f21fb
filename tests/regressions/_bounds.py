"""Bounds on a step's work that do not depend on the machine's speed (not a test module): a wall-clock limit in a
test ("refused in under 10 s") fails on a loaded machine; the memory a step allocates does not change with load."""
from __future__ import annotations

import tracemalloc
from contextlib import contextmanager

SMALL = 64 << 20        # bytes: a step that builds no product of knobs nor expands aliases stays far under it


@contextmanager
def small_memory(limit: int = SMALL):
    """The block's peak of Python allocations (tracemalloc) stays under `limit` bytes: a space's product of values,
    a list padded to a huge index or an alias bomb's expansion is never built (each is gigabytes; a step that did
    build one would not finish within the test's time limit either)."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"{peak} bytes allocated at the peak (at most {limit})"
