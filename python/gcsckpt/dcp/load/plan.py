"""Fetch planning: a rank's ReadItems -> frozen Fetches -> memory Windows.

In: the rank's ReadItems, the checkpoint's Metadata (storage_data: storage index -> object,
offset, length, stream transforms; state_dict_metadata: chunks and dtypes), the planner's
`resolve_tensor`, and, for SAFETENSORS checkpoints, `ranges` and `errors` for the header pre-read.
Out: a FetchPlan (one Fetch per ReadItem, in (object, offset) order, plus counts), then Windows.

Each ReadItem becomes one Fetch: BYTE_IO items fetch their bytes (BYTES); tensor items of a
TORCH_SAVE checkpoint fetch their whole `torch.save` archive (TORCH_SAVE); tensor items of a
SAFETENSORS checkpoint fetch only the bytes of the requested region when it is one contiguous
run in the stored chunk (else the whole chunk, narrowed after), straight into the target tensor
when that is a contiguous CPU tensor of the same dtype and shape ("direct") (RAW). Items saved
with stream transforms always take the TORCH_SAVE/BYTES path, since their stored bytes are
encoded. Windows bound buffer memory; each buffered fetch gets a 64-byte aligned slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from gcsckpt.dcp.load.blob_headers import read_blob_headers, tensor_start
from gcsckpt.dcp.load.errors import LoadErrors
from gcsckpt.dcp.load.fetch import ALIGN, Fetch, FetchKind, Window
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.regions import chunk_of, contiguous_region, is_raw_tensor_item


class FetchPlan(NamedTuple):
    """One rank's fetches and what they cover (counts of ReadItems)."""

    fetches: list[Fetch]  # (object, offset) order
    tensor_items: int
    bytes_items: int
    direct_items: int  # RAW fetches that land straight in the target tensor
    objects: int  # distinct objects read


def sort_items(items: Sequence[ReadItem], storage_data: dict, errors: LoadErrors) -> list:
    """`items` in (object, offset) order of their storage entries, so ranges come out in object
    order. Raises ValueError (`errors.missing_entry`) for an item with no storage entry."""
    keyed = []
    for item in items:
        info = storage_data.get(item.storage_index)
        if info is None:
            raise errors.missing_entry(item)
        keyed.append((info.relative_path, info.offset, item))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [k[2] for k in keyed]


def plan_fetches(
    items: Sequence[ReadItem],
    metadata: Metadata,
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
    ranges: CheckpointRanges,
    errors: LoadErrors,
) -> FetchPlan:
    """One Fetch per item (see module doc); RAW items need their blob's header first (one
    extra round trip for all blobs of the load).

    Args:
        resolve_tensor: `LoadPlanner.resolve_tensor`, called only to test whether a direct read
            into the target is possible.

    Raises:
        ValueError: an item has no storage entry. CheckpointReadError: an item's chunk is not
            in the metadata, or a blob header is bad or disagrees with it. RangeReadError: a
            header read failed.
    """
    storage_data = metadata.storage_data
    fetches: list[Fetch] = []
    raw_pending: list = []  # (item, path, blob offset, length, chunk sizes, dtype)
    tensor_items = bytes_items = 0
    for item in items:
        info = storage_data.get(item.storage_index)
        if info is None:
            raise errors.missing_entry(item)
        path, offset, length = info.relative_path, info.offset, info.length
        descriptors = tuple(getattr(info, "transform_descriptors", None) or ())
        if item.type == LoadItemType.BYTE_IO:
            bytes_items += 1
            fetches.append(Fetch(path, offset, length, item, FetchKind.BYTES, descriptors))
            continue
        tensor_items += 1
        try:
            chunk, dtype = chunk_of(metadata, item.storage_index)
        except ValueError as e:
            raise errors.at(path, offset, length, str(e)) from None
        if descriptors or not is_raw_tensor_item(length, chunk.sizes, dtype):
            fetches.append(Fetch(path, offset, length, item, FetchKind.TORCH_SAVE, descriptors))
            continue
        raw_pending.append((item, path, offset, length, chunk.sizes, dtype))
    if raw_pending:
        blobs = {(path, offset) for _, path, offset, *_ in raw_pending}
        layouts = read_blob_headers(blobs, metadata, ranges, errors)
        for item, path, offset, length, sizes, dtype in raw_pending:
            where = (path, offset, length)
            start = tensor_start(
                layouts[(path, offset)], where, item.storage_index, sizes, dtype, errors
            )
            fetches.append(_raw_fetch(item, path, start, sizes, dtype, resolve_tensor))
    fetches.sort(key=_object_order)  # near-linear: prepare_local_plan already sorted items
    return FetchPlan(
        fetches,
        tensor_items=tensor_items,
        bytes_items=bytes_items,
        direct_items=sum(1 for f in fetches if f.target is not None),
        objects=len({f.path for f in fetches}),
    )


def make_windows(fetches: Sequence[Fetch], window_bytes: int) -> list[Window]:
    """Cuts fetches (in order) into windows whose aligned buffered bytes stay <= window_bytes
    (a single larger fetch gets a window of its own); direct and empty fetches use no buffer
    (slot -1)."""
    windows: list[Window] = []
    current: list[Fetch] = []
    slots: list[int] = []
    used = 0
    for fetch in fetches:
        if fetch.target is not None or fetch.length == 0:  # needs no buffer
            current.append(fetch)
            slots.append(-1)
            continue
        need = -(-fetch.length // ALIGN) * ALIGN
        if used and used + need > window_bytes:
            windows.append(Window(tuple(current), tuple(slots), used))
            current, slots, used = [], [], 0
        current.append(fetch)
        slots.append(used)
        used += need
    if current:
        windows.append(Window(tuple(current), tuple(slots), used))
    return windows


def _raw_fetch(
    item: ReadItem,
    path: str,
    blob_start: int,
    chunk_sizes: Sequence[int],
    dtype: torch.dtype,
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
) -> Fetch:
    """The RAW Fetch of `item`'s region of a chunk whose bytes start at `blob_start`: only the
    region's bytes when they are one run (direct into the target when it fits), else the whole
    chunk with the region left to narrow after decoding."""
    offsets, lengths = list(item.storage_offsets), list(item.lengths)
    region = contiguous_region(chunk_sizes, offsets, lengths)
    raw = FetchKind.RAW
    if region is None:
        length = math.prod(chunk_sizes) * dtype.itemsize
        return Fetch(
            path, blob_start, length, item, raw, (), dtype, tuple(chunk_sizes), (offsets, lengths)
        )
    first, count = region
    offset, length = blob_start + first * dtype.itemsize, count * dtype.itemsize
    shape = tuple(lengths)
    target = None
    if count:
        tensor = resolve_tensor(item).detach()
        if (
            tensor.device.type == "cpu"
            and tensor.dtype == dtype
            and tensor.is_contiguous()
            and tuple(tensor.shape) == shape
        ):
            target = tensor
    return Fetch(path, offset, length, item, raw, (), dtype, shape, None, target)


def _object_order(fetch: Fetch) -> tuple[str, int]:
    return fetch.path, fetch.offset
