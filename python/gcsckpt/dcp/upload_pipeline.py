"""The save path's data objects: torch's serializer in one thread, the C++ uploader beside it.

``UploadPipeline.run`` takes a rank's objects (name + WriteItems, as GCSStorageWriter split
them) and runs torch's own per-object loop (``_write_files_from_queue``: ``_write_item`` for
BYTE_IO bytes, ``torch.save`` archives or the safetensors blob, through the ``_extensions``
stream transforms, ``_StorageInfo`` records) in one serializer thread. Each object is serialized
into a staging buffer (an ``io.BytesIO``); when complete it is handed to ``gcsckpt.io.Uploader``
straight from that buffer (no copy) while the thread goes on with the next object, so
serialization overlaps the uploads, and many uploads of one rank are in flight at once.

Memory: staging buffers held at once are bounded by ``staging_bytes`` (the serializer waits for
uploads to finish before starting an object that would exceed it; one object bigger than the
budget is staged alone). Peak extra memory of a save is so about ``staging_bytes`` plus the
object being written (BytesIO grows by reallocation). The first failure (serializer or upload)
stops the pipeline: queued uploads are cancelled and the error is raised.
"""

from __future__ import annotations

import contextlib
import io
import queue
import threading
from collections.abc import Callable, Iterator

from torch.distributed.checkpoint.filesystem import (
    SerializationFormat,
    _item_size,
    _write_files_from_queue,
)
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.io.uploader import Uploader, UploadResult

_DONE = object()


class _Stopped(Exception):
    """The pipeline stopped (another object failed); the serializer gives up."""


class _StagedObject(io.BytesIO):
    """A staging buffer that survives torch's ``stream.close()``: its bytes are uploaded after
    the serializer is done with it, and freed by ``release``."""

    def close(self) -> None:  # torch closes the stream it wrote; keep the bytes for the upload
        pass

    def release(self) -> None:
        super().close()


class _Budget:
    """Bytes of staging buffers held (serialized, not yet uploaded); thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._stopped = False
        self._cv = threading.Condition()

    def acquire(self, n: int) -> None:
        with self._cv:
            while not self._stopped and self._used > 0 and self._used + n > self._limit:
                self._cv.wait()
            if self._stopped:
                raise _Stopped()
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


def estimate_bytes(items: list[WriteItem]) -> int:
    """Tensor bytes of ``items`` (BYTE_IO items count 0: their size is known only once
    serialized), the staging estimate of an object before it is written."""
    return sum(_item_size(i) for i in items if i.type != WriteItemType.BYTE_IO)


class UploadPipeline:
    """Serializes and uploads one rank's data objects (see the module docstring).

    Args:
        uploader: the Uploader. bucket: the checkpoint's bucket. object_name: relative object
            path -> full object name. staging_bytes: staging budget (bytes). planner,
            transforms, serialization_format, copy_ahead_bytes: what torch's loop takes
            (``_FileSystemWriter``'s fields).
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
        self._planner = planner
        self._transforms = transforms
        self._format = serialization_format
        self._copy_ahead = copy_ahead_bytes
        self._estimates: dict[str, int] = {}
        self._submitted: queue.Queue = queue.Queue()

    def run(self, objects: list[tuple[str, list[WriteItem]]]) -> tuple[list, list[UploadResult]]:
        """Writes every object; returns (WriteResults of all items, UploadResult per object in
        the order given).

        Raises:
            UploadError: an upload failed for good. Whatever the serializer raised.
        """
        files: queue.Queue = queue.Queue()
        for name, items in objects:
            self._estimates[name] = estimate_bytes(items)
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
                handle, staged, view, nbytes = entry
                try:
                    uploads.append(handle.wait())
                finally:
                    handle.cancel()  # a no-op once done; frees the buffer export
                    view.release()
                    staged.release()
                    self._budget.release(nbytes)
        finally:
            self._budget.stop()
            thread.join()
            self._cancel_queued()
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
    def _create_stream(self, name: str, mode: str) -> Iterator[io.IOBase]:
        held = self._estimates[name]
        self._budget.acquire(held)
        staged = _StagedObject()
        view = None
        try:
            yield staged
            view = staged.getbuffer()
            self._budget.release(held - view.nbytes)  # hold the real size from here on
            held = view.nbytes
            self._budget.check()  # no new upload once the pipeline stopped
            handle = self._uploader.submit(self._bucket, self._object_name(name), view)
        except BaseException:
            if view is not None:
                view.release()
            staged.release()
            self._budget.release(held)
            raise
        self._submitted.put((handle, staged, view, held))

    def _cancel_queued(self) -> None:
        while True:
            try:
                entry = self._submitted.get_nowait()
            except queue.Empty:
                return
            if isinstance(entry, tuple):
                handle, staged, view, nbytes = entry
                handle.cancel()
                view.release()
                staged.release()
                self._budget.release(nbytes)
