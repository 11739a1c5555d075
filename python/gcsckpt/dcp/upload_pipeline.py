"""The save path's data objects: torch's serializer in one thread, the C++ uploader beside it.

``UploadPipeline.run`` runs torch's own per-object loop (``_write_files_from_queue``: BYTE_IO
bytes, ``torch.save`` archives or the safetensors blob, ``_extensions`` transforms,
``_StorageInfo`` records) in one serializer thread, each object into a ``_SegmentedStream``;
a finished object goes to ``gcsckpt.io.Uploader`` as a list of spans while the thread writes
the next, so serialization overlaps the uploads and many uploads of a rank are in flight.

Tensor bytes are sent from tensor memory, not copied: ``torch.save`` writes each storage as one
``stream.write`` of a memoryview of the storage itself, and a write of at least
``REFERENCE_MIN_BYTES`` inside a storage the pipeline holds is kept by reference; anything else
(records, clones, GPU tensors' CPU copies, transformed bytes) is copied into small segments,
bounded by ``staging_bytes``. Why that is safe: see ``UploadPipeline``. Why 32 KiB, and the
before/after figures: docs/measurements.md, "Save".
"""

from __future__ import annotations

import bisect
import contextlib
import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.distributed.checkpoint.filesystem import (
    SerializationFormat,
    _write_files_from_queue,
)
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.io.uploader import Uploader, UploadResult

# Writes of at least this many bytes that lie inside a held tensor storage are sent in place:
# from here on a reference costs less than a copy into fresh pages (torch's records are smaller).
REFERENCE_MIN_BYTES = 32 << 10
# Copied bytes are reserved from the staging budget in steps of this much (fewer lock rounds).
_RESERVE_STEP = 1 << 20

_DONE = object()


class _Stopped(Exception):
    """The pipeline stopped (another object failed); the serializer gives up."""


@dataclass
class SaveStats:
    """What one ``UploadPipeline.run`` (one rank's ``write_data``) uploaded.

    objects: data objects uploaded. spans: spans handed to the uploader (referenced writes and
    copied segments). bytes_referenced: bytes sent straight from tensor storage (no copy).
    bytes_copied: bytes copied into staging segments (serializer records, cloned or
    transformed data, BYTE_IO items, GPU tensors' CPU copies). bytes_referenced + bytes_copied
    is the size of the objects.
    """

    objects: int = 0
    spans: int = 0
    bytes_referenced: int = 0
    bytes_copied: int = 0

    def as_dict(self) -> dict:
        """The counters as a dict (for publishers)."""
        return asdict(self)


class _Budget:
    """Copied bytes held (serialized, not yet uploaded); thread-safe."""

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
        with self._cv:
            self._used -= n
            self._cv.notify_all()

    def check(self) -> None:
        """Raises _Stopped once the pipeline stopped."""
        with self._cv:
            if self._stopped:
                raise _Stopped()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()


class _HeldTensors:
    """Tensors (and their untyped storages) held for one object's upload, with the address
    ranges of the CPU storages, so a write can be checked to lie inside one of them."""

    def __init__(self) -> None:
        self._refs: list = []
        self._starts: list[int] = []  # ascending storage start addresses
        self._ends: list[int] = []  # the end address (exclusive) of the storage at that start

    def add(self, tensor: torch.Tensor) -> None:
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
        self._refs.clear()
        self._starts.clear()
        self._ends.clear()


class _HoldingPlanner:
    """The save planner as torch's loop sees it, holding every tensor ``resolve_data``
    returned since the last ``take`` (the object being written: torch resolves an object's
    items from its loader's ``start_loading`` up to the end of its stream)."""

    def __init__(self, planner: SavePlanner) -> None:
        self._planner = planner
        self.held = _HeldTensors()

    def resolve_data(self, item: WriteItem):
        data = self._planner.resolve_data(item)
        if isinstance(data, torch.Tensor):
            self.held.add(data)
        return data

    def take(self) -> _HeldTensors:
        """The held tensors of the object just written; later ones are held anew."""
        held, self.held = self.held, _HeldTensors()
        return held

    def __getattr__(self, name: str):
        return getattr(self._planner, name)


def _address(view: memoryview) -> int:
    # numpy reads the address of any contiguous buffer, read-only ones included (no copy).
    return np.frombuffer(view, np.uint8).__array_interface__["data"][0]


class _SegmentedStream:
    """The write stream torch's loop fills for one object: writes inside a held storage become
    referenced spans, everything else is copied into bytearray segments; ``tell`` is the total
    length. It survives torch's ``close()``: its segments are uploaded after the serializer is
    done with it, and dropped by ``release``."""

    def __init__(self, held: Callable[[], _HeldTensors], budget: _Budget) -> None:
        self._held = held
        self._budget = budget
        self.segments: list = []  # memoryviews (referenced) and bytearrays (copied)
        self._tail: bytearray | None = None  # the copy segment small writes append to
        self.length = 0
        self.referenced = 0
        self.copied = 0
        self.reserved = 0  # bytes taken from the budget (>= copied)

    def write(self, data) -> int:
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
        self.segments = []
        self._tail = None


@dataclass
class _Submitted:
    """One object handed to the uploader, and what it holds until the upload is done."""

    handle: object
    stream: _SegmentedStream
    held: _HeldTensors

    def release(self, budget: _Budget) -> None:
        self.handle.cancel()  # a no-op once done; on return no request reads the spans
        self.stream.release()
        self.held.clear()
        budget.release(self.stream.reserved)


def estimate_bytes(items: list[WriteItem]) -> int:
    """Tensor bytes this rank writes for ``items``: each item's own chunk (``chunk.sizes``), not
    the whole tensor (``tensor_data.size``, what torch's ``_item_size`` counts, which for a
    DTensor shard is world-size times too large and cut an fsdp rank's 124 MB into 56 objects
    of ~2 MB); BYTE_IO items count 0 (their size is known only once serialized). The size
    estimate of an object before it is written, bytes."""
    total = 0
    for item in items:
        if item.type == WriteItemType.BYTE_IO or item.tensor_data is None:
            continue
        numel = math.prod(item.tensor_data.chunk.sizes)
        total += numel * item.tensor_data.properties.dtype.itemsize
    return total


class UploadPipeline:
    """Serializes and uploads one rank's data objects (see the module docstring).

    Why sending tensor memory is safe: ``_HoldingPlanner`` holds every tensor (and its storage)
    ``resolve_data`` returns for an object until that object's upload finished, failed or was
    cancelled, and ``write_data`` returns only after every upload finished: torch's own contract
    for a StorageWriter (tensors do not change during ``write_data``; ``async_save``'s default
    stager copies the state for each save; a stager reusing buffers must wait for the previous
    future). Copied bytes wait for the ``staging_bytes`` budget (an object that alone needs more
    is written alone). The first failure stops the pipeline: queued uploads are cancelled, their
    tensors released, the error raised.

    Args:
        uploader: the Uploader. bucket: the checkpoint's bucket. object_name: relative object
            path -> full object name. staging_bytes: budget of copied bytes held at once
            (bytes). planner, transforms, serialization_format, copy_ahead_bytes: what torch's
            loop takes (``_FileSystemWriter``'s fields).

    After ``run``, ``stats`` (a SaveStats) counts the bytes sent by reference and copied.
    """

    def __init__(
        self,
        uploader: Uploader,
        bucket: str,
        object_name: Callable[[str], str],
        staging_bytes: int,
        planner: SavePlanner,
        transforms,
        serialization_format: SerializationFormat,
        copy_ahead_bytes: int,
    ) -> None:
        self._uploader = uploader
        self._bucket = bucket
        self._object_name = object_name
        self._budget = _Budget(staging_bytes)
        self._planner = _HoldingPlanner(planner)
        self._transforms = transforms
        self._format = serialization_format
        self._copy_ahead = copy_ahead_bytes
        self._submitted: queue.Queue = queue.Queue()
        self.stats = SaveStats()

    def run(self, objects: list[tuple[str, list[WriteItem]]]) -> tuple[list, list[UploadResult]]:
        """Writes every object; returns (WriteResults of all items, UploadResult per object in
        the order given). Every referenced tensor is released when this returns or raises.

        Raises:
            UploadError: an upload failed for good. Whatever the serializer raised.
        """
        files: queue.Queue = queue.Queue()
        for name, items in objects:
            files.put((name, name, items))
        results: queue.Queue = queue.Queue()
        thread = threading.Thread(
            target=self._serialize, args=(files, results), name="gcsckpt-serialize", daemon=True
        )
        thread.start()
        uploads: list[UploadResult] = []
        try:
            while True:
                entry = self._submitted.get()
                if entry is _DONE:
                    break
                if isinstance(entry, BaseException):
                    raise entry
                try:
                    uploads.append(entry.handle.wait())
                finally:
                    entry.release(self._budget)
        finally:
            self._budget.stop()
            thread.join()
            self._cancel_queued()
            self._planner.take().clear()
        written: list[WriteResult] = []
        while not results.empty():
            written += results.get_nowait()
        return written, uploads

    def _serialize(self, files: queue.Queue, results: queue.Queue) -> None:
        try:
            _write_files_from_queue(
                create_stream=self._create_stream,
                file_queue=files,
                result_queue=results,
                planner=self._planner,
                transforms=self._transforms,
                inflight_threshhold=self._copy_ahead,
                use_fsync=False,
                thread_count=1,
                serialization_format=self._format,
            )
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._submitted.put(exc)
            return
        self._submitted.put(_DONE)

    @contextlib.contextmanager
    def _create_stream(self, name: str, mode: str) -> Iterator[_SegmentedStream]:
        stream = _SegmentedStream(lambda: self._planner.held, self._budget)
        held = None
        try:
            yield stream
            held = self._planner.take()
            # Hold exactly the copied bytes from here on.
            self._budget.release(stream.reserved - stream.copied)
            stream.reserved = stream.copied
            self._budget.check()  # no new upload once the pipeline stopped
            handle = self._uploader.submit(self._bucket, self._object_name(name), stream.segments)
        except BaseException:
            stream.release()
            (held or self._planner.take()).clear()
            self._budget.release(stream.reserved)
            raise
        s = self.stats
        s.objects += 1
        s.spans += len(stream.segments)
        s.bytes_referenced += stream.referenced
        s.bytes_copied += stream.copied
        self._submitted.put(_Submitted(handle, stream, held))

    def _cancel_queued(self) -> None:
        while True:
            try:
                entry = self._submitted.get_nowait()
            except queue.Empty:
                return
            if isinstance(entry, _Submitted):
                entry.release(self._budget)
