"""The upload: a rank's data objects serialized in one thread, sent by the C++ uploader beside it.

``UploadPipeline.run`` runs the serializer (``gcsckpt.dcp.save.serialize.write_objects``:
torch's per-object loop, its order, BYTE_IO bytes and ``_StorageInfo`` records, each TORCH_SAVE
archive the bytes ``torch.save`` writes without calling it; torch's own loop for the safetensors
blob and ``_extensions`` transforms) in one thread, each object into a ``SegmentedStream``
(``gcsckpt.dcp.save.segments``); a finished object goes to
``gcsckpt.io.Uploader`` as a list of spans while the thread writes the next, so serialization
overlaps the uploads and many uploads of a rank are in flight.

Tensor bytes are sent from tensor memory, not copied: an archive's storage is one
``stream.write`` of a memoryview of the storage itself (as ``torch.save`` writes it too), and a
write of at least ``REFERENCE_MIN_BYTES`` inside a storage the pipeline holds is kept by
reference; anything else (records, clones, GPU tensors' CPU copies, transformed bytes) is copied
into small segments, bounded by ``staging_bytes``. Why that is safe: see ``UploadPipeline``. Why
32 KiB, and the before/after figures: docs/measurements.md, "Save".

Each object's block checksums (``gcsckpt.dcp.checksums``: blocks at item boundaries and every
``checksum_block_bytes``) are computed by the uploader in the pass that checksums the object;
``checksums`` holds their records once ``run`` returns.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from torch.distributed.checkpoint.filesystem import SerializationFormat
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.dcp.checksums import ObjectRecord, block_starts
from gcsckpt.dcp.save.segments import (
    HeldTensors,
    HoldingPlanner,
    PipelineStopped,
    SegmentedStream,
    StagingBudget,
)
from gcsckpt.dcp.save.serialize import ContiguousTensors, write_objects
from gcsckpt.io.uploader import Uploader, UploadResult

_DONE = object()


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


@dataclass
class _Submitted:
    """One object handed to the uploader, and what it holds until the upload is done."""

    handle: object
    stream: SegmentedStream
    held: HeldTensors
    name: str  # relative path
    starts: object  # block starts (uint64 array) or None

    def release(self, budget: StagingBudget) -> None:
        self.handle.cancel()  # a no-op once done; on return no request reads the spans
        self.stream.release()
        self.held.clear()
        budget.release(self.stream.reserved)


class UploadPipeline:
    """Serializes and uploads one rank's data objects (see the module docstring).

    Why sending tensor memory is safe: ``HoldingPlanner`` holds every tensor (and its storage)
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
            loop takes (``_FileSystemWriter``'s fields). checksum_block_bytes: longest block
            of the block checksums (bytes); 0: none are computed.

    After ``run``, ``stats`` (a SaveStats) counts the bytes sent by reference and copied, and
    ``checksums`` maps each relative object path to its record (``checksums.ObjectRecord``).
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
        checksum_block_bytes: int = 0,
    ) -> None:
        self._uploader = uploader
        self._bucket = bucket
        self._object_name = object_name
        self._budget = StagingBudget(staging_bytes)
        if serialization_format == SerializationFormat.SAFETENSORS:
            planner = ContiguousTensors(planner)  # held below: the copies are what is written
        self._planner = HoldingPlanner(planner)
        self._transforms = transforms
        self._format = serialization_format
        self._copy_ahead = copy_ahead_bytes
        self._submitted: queue.Queue = queue.Queue()
        self._block_bytes = int(checksum_block_bytes)
        self.stats = SaveStats()
        self.checksums: dict[str, ObjectRecord] = {}

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
                    result = entry.handle.wait()
                    uploads.append(result)
                    if entry.starts is not None:
                        self.checksums[entry.name] = (
                            result.size,
                            entry.starts.tobytes(),
                            result.block_crcs,
                        )
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
            write_objects(
                self._create_stream,
                files,
                results,
                self._planner,
                self._transforms,
                self._copy_ahead,
                self._format,
            )
        except PipelineStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._submitted.put(exc)
            return
        self._submitted.put(_DONE)

    @contextlib.contextmanager
    def _create_stream(self, name: str, mode: str) -> Iterator[SegmentedStream]:
        stream = SegmentedStream(lambda: self._planner.held, self._budget)
        held = None
        try:
            yield stream
            held = self._planner.take()
            # Hold exactly the copied bytes from here on.
            self._budget.release(stream.reserved - stream.copied)
            stream.reserved = stream.copied
            self._budget.check()  # no new upload once the pipeline stopped
            starts = None
            if self._block_bytes > 0:
                starts = block_starts(stream.boundaries, stream.length, self._block_bytes)
            handle = self._uploader.submit(
                self._bucket, self._object_name(name), stream.segments, block_starts=starts
            )
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
        self._submitted.put(_Submitted(handle, stream, held, name, starts))

    def _cancel_queued(self) -> None:
        while True:
            try:
                entry = self._submitted.get_nowait()
            except queue.Empty:
                return
            if isinstance(entry, _Submitted):
                entry.release(self._budget)
