"""The save path's data objects: torch's serializer in one thread, the C++ uploader beside it.

``UploadPipeline.run`` takes a rank's objects (name + WriteItems, as GCSStorageWriter split
them) and runs torch's own per-object loop (``_write_files_from_queue``: ``_write_item`` for
BYTE_IO bytes, ``torch.save`` archives or the safetensors blob, through the ``_extensions``
stream transforms, ``_StorageInfo`` records) in one serializer thread. Each object is written
into a segmented stream (``_SegmentedStream``); when complete, its segments are handed to
``gcsckpt.io.Uploader`` as one list of spans (the object is their concatenation) while the
thread goes on with the next object, so serialization overlaps the uploads, and many uploads of
one rank are in flight at once.

Tensor bytes are sent from tensor memory, not copied. ``torch.save`` on a Python stream
(``PyTorchFileWriter``) writes each storage record as one ``stream.write(memoryview)`` whose
memoryview points at the storage itself (tests/dcp/test_zero_copy.py checks the address). The
stream records such a write by reference only if its address range lies inside the storage of
a CPU tensor the pipeline holds: the planner is wrapped (``_HoldingPlanner``) so that every
tensor ``planner.resolve_data`` returns for the object being written, and its untyped storage,
are held until that object's upload finished, failed or was cancelled. Anything else is copied
into small ``bytearray`` segments: writes under ``REFERENCE_MIN_BYTES`` (zip headers, pickles,
padding), the clone torch's loader makes of a view whose storage is larger than the tensor, a
GPU tensor's CPU copy, BYTE_IO items, the safetensors blob and the output of stream transforms
(e.g. ZStandard): new bytes nobody else holds. ``stats`` counts both (``SaveStats``).

Why this is safe: the uploader reads a span until the upload finished; the pipeline holds the
tensor and its storage that long, and ``GCSStorageWriter.write_data`` returns (its future
resolves) only after every upload finished. So the tensors must not change while
``write_data`` runs, which is torch's own contract for a StorageWriter (its FileSystemWriter
reads the same tensors during ``write_data``): a synchronous ``dcp.save`` returns only then;
``dcp.async_save``'s default stager (torch 2.13: ``DefaultStager``, no cache) copies the state
into new CPU tensors for each save, and the upload thread reads those. A stager of the caller's
that reuses its buffers must not stage the next save before the previous future completed,
as with torch's own writers.

Memory: copied bytes held at once are bounded by ``staging_bytes`` (the serializer waits for
uploads to finish before copying more; one object that alone needs more than the budget is
written alone); referenced bytes cost no memory. ``REFERENCE_MIN_BYTES`` (32 KiB) was chosen
by measurement (one process in this VM, best of 5): a referenced write costs 1.3 us in Python
(address check, one more segment) and 0.2 us per span in C++ (buffer export, CRC-32C call),
whatever its size; copying a write into a new bytearray cost 0.5 us at 16 KiB and 0.9 us at
32 KiB (memory the allocator reuses) but 14 us at 48 KiB, 29 us at 64 KiB and 580 us at 1 MiB
(fresh pages: touching new memory costs ~0.7 s per GiB here, and copied segments stay held
until their upload, so a save copies into fresh memory). Torch's own records (zip headers,
pickles, padding) are under 600 bytes. The first failure (serializer or upload) stops the
pipeline: queued uploads are cancelled, their tensors released, the error raised.

Measured (512 MiB of float32 tensors in 8 MiB tensors, 32 objects of 16 MiB, plain LocalGCS;
2 cores shared with other jobs, load average 7.8-9.4), before (BytesIO staging) and after:
``tools/bazel run --config=ci //bench:save_path -- --arms=uploader --rounds=3`` (a warm-up
save, then 3 timed ones in one process): 2.19-3.43 s before, 2.26-2.46 s after (the emulator's
single upload thread bounds both); the process's CPU 0.54-0.64 s before, 0.52-0.58 s after;
RSS before the first timed save 1407 MiB before, 840 MiB after (the warm-up's staging buffers
stay with the allocator, so later saves reuse touched memory and the peak above that RSS was
13-17 MiB either way); after: 536,870,912 bytes sent from tensor memory, 100,928 copied per
save. Fresh processes, two saves each (``dcp.save`` alone, timed with ``psutil``; the same
code otherwise): CPU 0.64-0.95 s before, 0.44-0.62 s after; peak RSS above the RSS before the
save 205-321 MiB before, 16-46 MiB after.
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

# Writes of at least this many bytes that lie inside a held tensor storage are sent in place.
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
