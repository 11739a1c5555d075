"""Serialization: one rank's data objects written, in torch's order, into write streams.

``write_objects`` is torch's one-thread per-object loop (``_write_files_from_queue``) with one
change: each TORCH_SAVE archive is written by ``gcsckpt.dcp.save.archive_writer`` (the bytes
``torch.save`` writes, without the call). Per object: BYTE_IO items first, then the tensors in
item order, each item's ``WriteResult`` (storage_data = ``_StorageInfo(key, offset, length)``)
from ``stream.tell()`` at its start and end. With stream transforms (``_extensions``),
SAFETENSORS, or a torch whose archives differ from ours, torch's own loop runs instead, so what
torch writes is written. The streams come from ``gcsckpt.dcp.save.upload_pipeline``, which
uploads each object once this loop closed it.
"""

from __future__ import annotations

import io
import queue
from collections.abc import Callable

import torch
from torch.distributed.checkpoint.filesystem import (
    SerializationFormat,
    _item_size,
    _OverlappingCpuLoader,
    _SerialCpuLoader,
    _StorageInfo,
    _write_files_from_queue,
)
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.dcp.save import archive_writer


class ContiguousTensors:
    """A planner whose tensors are contiguous: safetensors stores dense row-major bytes and
    torch's loop refuses views (a transposed or strided tensor), so SAFETENSORS saves pack them.

    Args:
        planner: the save's SavePlanner; only ``resolve_data`` is asked of it.
    """

    def __init__(self, planner: SavePlanner) -> None:
        self._planner = planner

    def resolve_data(self, item: WriteItem):
        """The planner's data for ``item``; a tensor as a contiguous one (a copy if it was not)."""
        data = self._planner.resolve_data(item)
        return data.contiguous() if isinstance(data, torch.Tensor) else data


def _tensor_loader(planner: SavePlanner, copy_ahead_bytes: int):
    """torch's choice of tensor loader for its one-thread loop: copies from an accelerator
    overlapped when one is present, else resolved one by one (detached, on the CPU, views of
    larger storages cloned)."""
    backend = torch._C._get_privateuse1_backend_name()
    custom = getattr(torch, backend, None)
    accelerated = torch.cuda.is_available() or bool(custom and custom.is_available())
    if accelerated and copy_ahead_bytes > 0:
        return _OverlappingCpuLoader(planner.resolve_data, inflight_threshhold=copy_ahead_bytes)
    return _SerialCpuLoader(planner.resolve_data)


def write_objects(
    create_stream: Callable,
    file_queue: queue.Queue,
    result_queue: queue.Queue,
    planner: SavePlanner,
    transforms,
    copy_ahead_bytes: int,
    serialization_format: SerializationFormat,
) -> None:
    """Writes each object of ``file_queue`` ((name, storage key, items)) as torch's one-thread
    loop (`_write_files_from_queue`) does: BYTE_IO items first, then the tensors in order, each
    item's WriteResult (storage_data = `_StorageInfo(key, offset, length)`) from
    ``stream.tell()`` at its start and end; the list of one object's results goes to
    ``result_queue``. TORCH_SAVE archives are written by `ArchiveWriter` (the bytes torch.save
    writes); with stream transforms, SAFETENSORS or a torch this module does not match, torch's
    own loop runs instead.

    Args:
        create_stream: (name, mode) -> context manager of a write stream with ``tell``.
        planner: resolves each item's data. transforms: torch's `_StorageWriterTransforms`.
        copy_ahead_bytes: torch's in-flight threshold of the overlapping (accelerator) loader.

    Raises:
        AssertionError: torch's checks (BYTE_IO data not a BytesIO, a tensor not on the CPU).
        whatever the planner, the stream or torch.save raise.
    """
    writer = None
    if serialization_format == SerializationFormat.TORCH_SAVE and not transforms.extensions:
        writer = archive_writer.current_writer()
    if writer is None:
        _write_files_from_queue(
            create_stream=create_stream,
            file_queue=file_queue,
            result_queue=result_queue,
            planner=planner,
            transforms=transforms,
            inflight_threshhold=copy_ahead_bytes,
            use_fsync=False,
            thread_count=1,
            serialization_format=serialization_format,
        )
        return
    while True:
        try:
            name, key, items = file_queue.get_nowait()
        except queue.Empty:
            return
        loader = _tensor_loader(planner, copy_ahead_bytes)
        for item in items:
            if item.type != WriteItemType.BYTE_IO:
                loader.add(_item_size(item), item)
        loader.start_loading()
        results = []
        with create_stream(name, "wb") as stream:
            for item in items:
                if item.type == WriteItemType.BYTE_IO:
                    data = planner.resolve_data(item)
                    if not isinstance(data, io.BytesIO):
                        raise AssertionError("Data must be io.BytesIO for BYTE_IO write items")
                    offset = stream.tell()
                    stream.write(data.getbuffer())
                    results.append(_result(item, key, offset, stream.tell() - offset))
            for tensor, item in loader.values():
                if not tensor.is_cpu:
                    raise AssertionError("Tensor must be on CPU")
                offset = stream.tell()
                writer.write(stream, tensor)
                results.append(_result(item, key, offset, stream.tell() - offset))
        result_queue.put(results)


def _result(item: WriteItem, key: str, offset: int, length: int) -> WriteResult:
    return WriteResult(
        index=item.index, size_in_bytes=length, storage_data=_StorageInfo(key, offset, length)
    )
