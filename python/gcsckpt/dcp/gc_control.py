"""Keeping Python's cyclic garbage collector out of a checkpoint load's hot paths.

A load allocates hundreds of thousands of long-lived objects (the unpickled `.metadata` of the
scaled-OLMoE checkpoint of docs/design.md "The bar") and then many short-lived ones
(ReadItems, plans, tensors).
Each full collection walks every tracked object, so collections triggered while DCP builds and
exchanges plans cost more than the work itself (unpickling that `.metadata` several times over:
docs/measurements.md, "Per-item costs on the load path"). The reader therefore pauses the collector
while it unpickles and while it reads, and freezes the heap (`gc.freeze`: existing objects are
skipped by later collections, still freed by reference counting) from the end of `read_metadata`
to the end of `read_data`, which also shields DCP's own planning steps in between. The freeze
is taken before the collector is turned back on, and `read_data` drops its per-item records
before it is: the first collection after a pause otherwise walks everything allocated during it
(20-37 ms for the unpickled `.metadata` of 12k entries, 4-6 ms for the item-range plan; measured
with `gc.callbacks`, docs/measurements.md "Per-item costs on the load path").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disables the cyclic collector inside the block (if it was on) and restores it after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class HeapFreeze:
    """One `gc.freeze()` held until `thaw()`; thawing twice or without freezing is a no-op.

    While frozen, cyclic garbage among the objects that existed at `freeze()` is not collected
    (it is after `thaw()`); acyclic objects are freed as usual.
    """

    def __init__(self) -> None:
        self._frozen = False

    def freeze(self) -> None:
        if not self._frozen:
            gc.freeze()
            self._frozen = True

    def thaw(self) -> None:
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
