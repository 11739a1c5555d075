"""A data object as torch's serializer writes it: referenced tensor storage and copied segments.

``SegmentedStream`` is the write stream torch's loop fills for one object: a write of at least
``REFERENCE_MIN_BYTES`` that lies inside a tensor storage held for the object (``HeldTensors``,
filled by ``HoldingPlanner`` as torch resolves the items) is kept by reference, everything else
is copied into segments whose bytes are taken from the rank's ``StagingBudget``. The result is
a list of spans for ``gcsckpt.io.Uploader``. Kept apart from ``gcsckpt.dcp.save.upload_pipeline``,
which drives the serializer thread and the uploads.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

import numpy as np
import torch
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem

# Writes of at least this many bytes that lie inside a held tensor storage are sent in place:
# from here on a reference costs less than a copy into fresh pages (torch's records are smaller).
REFERENCE_MIN_BYTES = 32 << 10
# Copied bytes are reserved from the staging budget in steps of this much (fewer lock rounds).
_RESERVE_STEP = 1 << 20


class PipelineStopped(Exception):
    """The pipeline stopped (another object failed); the serializer gives up."""


class StagingBudget:
    """Copied bytes held (serialized, not yet uploaded) against ``limit`` bytes; thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._stopped = False
        self._cv = threading.Condition()

    def acquire(self, n: int, own: int) -> None:
        """Takes ``n`` bytes for an object that already holds ``own``; waits while other
        objects hold bytes and the budget would be exceeded. Never raises (it is called from
        inside torch.save): once the pipeline stopped it returns at once, and ``check`` raises
        at the end of the object."""
        with self._cv:
            while not self._stopped and self._used > own and self._used + n > self._limit:
                self._cv.wait()
            self._used += n

    def release(self, n: int) -> None:
        """Gives back ``n`` bytes (an object's upload is done) and wakes waiting writers."""
        with self._cv:
            self._used -= n
            self._cv.notify_all()

    def check(self) -> None:
        """Raises PipelineStopped once the pipeline stopped."""
        with self._cv:
            if self._stopped:
                raise PipelineStopped()

    def stop(self) -> None:
        """Stops the pipeline: waiting writers return, ``check`` raises from now on."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()


class HeldTensors:
    """Tensors (and their untyped storages) held for one object's upload, with the address
    ranges of the CPU storages, so a write can be checked to lie inside one of them."""

    def __init__(self) -> None:
        self._refs: list = []
        self._starts: list[int] = []  # ascending storage start addresses
        self._ends: list[int] = []  # the end address (exclusive) of the storage at that start

    def add(self, tensor: torch.Tensor) -> None:
        """Holds ``tensor`` (and its storage) until ``clear``; a CPU storage's address range
        becomes one that writes may reference."""
        self._refs.append(tensor)
        if tensor.device.type != "cpu":
            return  # torch writes a CPU copy of it: new memory, copied
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # no plain storage (sparse, some subclasses): its bytes are copied
        # The storage object too: it keeps the memory alive even if `tensor.set_()` rebinds the
        # tensor to another storage meanwhile.
        self._refs.append(storage)
        start, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or start == 0:
            return
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start:
            self._ends[i] = max(self._ends[i], start + size)
        else:
            self._starts.insert(i, start)
            self._ends.insert(i, start + size)

    def covers(self, address: int, n: int) -> bool:
        """True if [address, address + n) lies inside one held storage (the one starting
        closest below it; a miss only means a copy, never a wrong reference)."""
        i = bisect.bisect_right(self._starts, address) - 1
        return i >= 0 and address + n <= self._ends[i]

    def clear(self) -> None:
        """Drops every reference (the object's upload is done)."""
        self._refs.clear()
        self._starts.clear()
        self._ends.clear()


class HoldingPlanner:
    """The save planner as torch's loop sees it, holding every tensor ``resolve_data``
    returned since the last ``take`` (the object being written: torch resolves an object's
    items from its loader's ``start_loading`` up to the end of its stream)."""

    def __init__(self, planner: SavePlanner) -> None:
        self._planner = planner
        self.held = HeldTensors()

    def resolve_data(self, item: WriteItem):
        """The planner's data for ``item``, a tensor of which is held."""
        data = self._planner.resolve_data(item)
        if isinstance(data, torch.Tensor):
            self.held.add(data)
        return data

    def take(self) -> HeldTensors:
        """The held tensors of the object just written; later ones are held anew."""
        held, self.held = self.held, HeldTensors()
        return held

    def __getattr__(self, name: str):
        return getattr(self._planner, name)


def _address(view: memoryview) -> int:
    # numpy reads the address of any contiguous buffer, read-only ones included (no copy).
    return np.frombuffer(view, np.uint8).__array_interface__["data"][0]


class SegmentedStream:
    """The write stream torch's loop fills for one object: writes inside a held storage become
    referenced spans, everything else is copied into bytearray segments; ``tell`` is the total
    length. It survives torch's ``close()``: its segments are uploaded after the serializer is
    done with it, and dropped by ``release``."""

    def __init__(self, held: Callable[[], HeldTensors], budget: StagingBudget) -> None:
        self._held = held
        self._budget = budget
        self.segments: list = []  # memoryviews (referenced) and bytearrays (copied)
        self._tail: bytearray | None = None  # the copy segment small writes append to
        self.length = 0
        self.referenced = 0
        self.copied = 0
        self.reserved = 0  # bytes taken from the budget (>= copied)
        # Every position torch's loop asked for (`_write_item` asks at each item's start and
        # end): the item boundaries of the object's block checksums.
        self.boundaries: list[int] = []

    def write(self, data) -> int:
        """Appends ``data`` (a buffer) by reference or as a copy; returns its length in bytes.
        A copy may wait for the staging budget."""
        view = memoryview(data)
        n = view.nbytes
        if n == 0:
            return 0
        if (
            n >= REFERENCE_MIN_BYTES
            and view.c_contiguous
            and self._held().covers(_address(view), n)
        ):
            self.segments.append(view)
            self._tail = None
            self.referenced += n
        else:
            self._reserve(n)
            if n >= REFERENCE_MIN_BYTES:
                self.segments.append(bytearray(view))  # one exact allocation, one copy
                self._tail = None
            else:
                if self._tail is None:
                    self._tail = bytearray()
                    self.segments.append(self._tail)
                self._tail += view if view.c_contiguous else view.tobytes()
            self.copied += n
        self.length += n
        return n

    def _reserve(self, n: int) -> None:
        if self.copied + n > self.reserved:
            step = max(n, _RESERVE_STEP)
            self._budget.acquire(step, self.reserved)
            self.reserved += step

    def tell(self) -> int:
        self.boundaries.append(self.length)
        return self.length

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def close(self) -> None:  # torch closes the stream it wrote; keep the bytes for the upload
        pass

    @property
    def closed(self) -> bool:
        return False

    def release(self) -> None:
        """Drops the segments (the object's upload is done)."""
        self.segments = []
        self._tail = None
