"""Cyclic garbage collection paced by a batch loop (the sink's and replay's), not by allocations.

A batch allocates tens of thousands of objects that live until it is written (records,
decoded events, rows). Automatic collection runs a young pass every 700 net allocations over
whatever is alive, and each pass promotes the live batch to the old generation, which soon
triggers full passes over the whole heap: measured at 20-30% of the sink's CPU. Inside a
batch loop, automatic collection is off; the loop calls `batch_done()` when a batch has
been released, which runs a young pass every `YOUNG_EVERY` batches, a middle one every
`MIDDLE_EVERY` and a full one every `FULL_EVERY`. Reference counting still frees almost
everything at once; cyclic garbage (a few objects per batch) waits at most a few batches. A
young pass costs what is alive then, which is the batch the other thread is decoding, not
the garbage: one per batch was 5% of the sink's store thread.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_EVERY = 4
MIDDLE_EVERY = 32
FULL_EVERY = 256

_lock = threading.Lock()
_loops = 0
_was_enabled = False
_batches = 0


@contextmanager
def batch_loop() -> Iterator[None]:
    """Automatic collection off for the loop's life (nested loops, in any thread, restore it last)."""
    global _loops, _was_enabled
    with _lock:
        if _loops == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _loops += 1
    try:
        yield
    finally:
        with _lock:
            _loops -= 1
            if _loops == 0 and _was_enabled:
                gc.enable()


def batch_done() -> None:
    """A batch was released: collect the young generation (and older ones now and then)."""
    global _batches
    with _lock:
        _batches += 1
        count = _batches
    if count % YOUNG_EVERY == 0:
        generation = 2 if count % FULL_EVERY == 0 else 1 if count % MIDDLE_EVERY == 0 else 0
        gc.collect(generation)
