"""ItemRange planning: a rank's ReadItems -> frozen ItemRanges -> memory Windows.

In: the rank's ReadItems, the checkpoint's Metadata (storage_data: storage index -> object,
offset, length, stream transforms; state_dict_metadata: chunks and dtypes), the planner's
`resolve_tensor`, and, for SAFETENSORS checkpoints, `ranges` and `errors` for the header pre-read.
Out: an ItemRangePlan (one ItemRange per ReadItem, in (object, offset) order, plus counts), then
Windows.

Each ReadItem becomes one ItemRange: BYTE_IO items fetch their bytes (BYTES); tensor items of a
TORCH_SAVE checkpoint fetch their whole `torch.save` archive (TORCH_SAVE), and those whose
region is one contiguous run of the chunk with a target that takes the bytes as they are (a
contiguous CPU tensor of the same dtype and shape: "direct") read only the archive's head and
tail into a slot and the region straight into the target (`archives`); tensor items of a
SAFETENSORS checkpoint fetch only the bytes of the requested region when it is one contiguous
run (else the whole chunk, narrowed after), direct when the target allows (RAW). Items saved
with stream transforms always take the buffered TORCH_SAVE/BYTES path, since their stored
bytes are encoded. Windows bound buffer memory; each slot is 64-byte aligned.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from gcsckpt.dcp.load.archives import make_templates
from gcsckpt.dcp.load.blob_headers import read_blob_headers, tensor_start
from gcsckpt.dcp.load.item_ranges import ALIGN, ItemRange, ItemRangeKind, Window
from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.regions import chunk_of, contiguous_region, is_raw_tensor_item


class ItemRangePlan(NamedTuple):
    """One rank's item ranges and what they cover (counts of ReadItems)."""

    item_ranges: list[ItemRange]  # (object, offset) order
    tensor_items: int
    bytes_items: int
    direct_items: int  # tensor item ranges that land straight in the target tensor
    direct_archive_items: int  # TORCH_SAVE ones among them
    archive_templates: int  # groups (dtype, chunk shape, length) with a stand-in template
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


def storage_entries(items: Sequence[ReadItem], storage_data: dict, errors: LoadErrors) -> list:
    """The storage entry (`_StorageInfo`) of each item, in order: one lookup per item, which
    `plan_item_ranges` and the reader's object set share (hashing a MetadataIndex is the cost).
    Raises ValueError (`errors.missing_entry`) for an item with no storage entry."""
    get = storage_data.get
    infos = [get(item.storage_index) for item in items]
    for item, info in zip(items, infos, strict=True):
        if info is None:  # `is`: `None in infos` would call each entry's __eq__
            raise errors.missing_entry(item)
    return infos


def plan_item_ranges(
    items: Sequence[ReadItem],
    metadata: Metadata,
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
    ranges: CheckpointRanges,
    errors: LoadErrors,
    infos: Sequence | None = None,
) -> ItemRangePlan:
    """One ItemRange per item (see module doc); RAW items need their blob's header first (one
    extra round trip for all blobs of the load); direct TORCH_SAVE items need none.

    Args:
        resolve_tensor: `LoadPlanner.resolve_tensor`, called only to test whether a direct read
            into the target is possible.
        infos: `storage_entries(items, ...)` when the caller has them (else looked up here).

    Raises:
        ValueError: an item has no storage entry. CheckpointReadError: an item's chunk is not
            in the metadata, or a blob header is bad or disagrees with it. RangeReadError: a
            header read failed.
    """
    if infos is None:
        infos = storage_entries(items, metadata.storage_data, errors)
    item_ranges: list[ItemRange] = []
    raw_pending: list = []  # (item, path, blob offset, length, chunk sizes, dtype)
    archive_pending: list = []  # (TORCH_SAVE ItemRange, group key, target, skip)
    tensor_items = bytes_items = templates = 0
    byte_io, bytes_kind = LoadItemType.BYTE_IO, ItemRangeKind.BYTES
    for item, info in zip(items, infos, strict=True):
        path, offset, length = info.relative_path, info.offset, info.length
        descriptors = getattr(info, "transform_descriptors", None)
        descriptors = tuple(descriptors) if descriptors else ()
        if item.type is byte_io:
            bytes_items += 1
            item_ranges.append(ItemRange(path, offset, length, item, bytes_kind, descriptors))
            continue
        tensor_items += 1
        try:
            chunk, dtype = chunk_of(metadata, item.storage_index)
        except ValueError as e:
            raise errors.at(path, offset, length, str(e)) from None
        if descriptors or not is_raw_tensor_item(length, chunk.sizes, dtype):
            item_range = ItemRange(
                path, offset, length, item, ItemRangeKind.TORCH_SAVE, descriptors
            )
            if not descriptors and (
                direct := _archive_direct(item_range, chunk.sizes, dtype, resolve_tensor)
            ):
                archive_pending.append(direct)
            else:
                item_ranges.append(item_range)
            continue
        raw_pending.append((item, path, offset, length, chunk.sizes, dtype))
    if archive_pending:
        direct, templates = _archive_ranges(archive_pending)
        item_ranges.extend(direct)
    if raw_pending:
        blobs = {(path, offset) for _, path, offset, *_ in raw_pending}
        layouts = read_blob_headers(blobs, metadata, ranges, errors)
        for item, path, offset, length, sizes, dtype in raw_pending:
            where = (path, offset, length)
            start = tensor_start(
                layouts[(path, offset)], where, item.storage_index, sizes, dtype, errors
            )
            item_ranges.append(_raw_range(item, path, start, sizes, dtype, resolve_tensor))
    item_ranges.sort(key=_OBJECT_ORDER)  # (path, offset): near-linear when items come sorted
    return ItemRangePlan(
        item_ranges,
        tensor_items=tensor_items,
        bytes_items=bytes_items,
        direct_items=sum(1 for f in item_ranges if f.target is not None),
        direct_archive_items=sum(1 for f in item_ranges if f.archive is not None),
        archive_templates=templates,
        objects=len({f.path for f in item_ranges}),
    )


def make_windows(item_ranges: Sequence[ItemRange], window_bytes: int) -> list[Window]:
    """Cuts item ranges (in order) into windows of at most window_bytes (a single larger item range
    gets a window of its own), counting each item range's slot (`ItemRange.slot_bytes`) and, for a
    direct TORCH_SAVE item range, the archive bytes it reads too, so its window stays one bounded
    submit; direct RAW and empty item ranges use no slot (slot -1) and ride along.

    Slots start at multiples of ALIGN (tensors are viewed in place), except that a slot never
    viewed as a tensor (`ItemRange.unaligned`: a BYTE_IO archive, a direct TORCH_SAVE item's head
    and tail) whose item range follows the previous slotted one in the same object, itself such a
    item range, is packed right after that one's slot: the previous item range's last bytes and this
    one's first are then one contiguous range of the object and of the buffer (`pipeline` reads
    them as one range)."""
    windows: list[Window] = []
    current: list[ItemRange] = []
    slots: list[int] = []
    used = counted = 0
    last: ItemRange | None = None  # the window's last item range with a slot
    for item_range in item_ranges:
        size = item_range.slot_bytes
        if size == 0:  # needs no buffer
            current.append(item_range)
            slots.append(-1)
            continue
        packed = (
            last is not None
            and item_range.unaligned
            and last.unaligned
            and last.path == item_range.path
            and last.offset + last.length == item_range.offset
        )
        start = used if packed else _aligned(used)
        extra = item_range.length if item_range.archive is not None else 0
        count = _aligned(start + size) - _aligned(used) + extra
        if counted and counted + count > window_bytes:
            windows.append(Window(tuple(current), tuple(slots), _aligned(used)))
            current, slots, used, counted, last = [], [], 0, 0, None
            start, count = 0, _aligned(size) + extra
        current.append(item_range)
        slots.append(start)
        used = start + size
        counted += count
        last = item_range
    if current:
        windows.append(Window(tuple(current), tuple(slots), _aligned(used)))
    return windows


def _aligned(n: int) -> int:
    """`n` rounded up to a multiple of ALIGN."""
    return -(-n // ALIGN) * ALIGN


def _raw_range(
    item: ReadItem,
    path: str,
    blob_start: int,
    chunk_sizes: Sequence[int],
    dtype: torch.dtype,
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
) -> ItemRange:
    """The RAW ItemRange of `item`'s region of a chunk whose bytes start at `blob_start`: only the
    region's bytes when they are one run (direct into the target when it fits), else the whole
    chunk with the region left to narrow after decoding."""
    offsets, lengths = list(item.storage_offsets), list(item.lengths)
    region = contiguous_region(chunk_sizes, offsets, lengths)
    raw = ItemRangeKind.RAW
    if region is None:
        length = math.prod(chunk_sizes) * dtype.itemsize
        return ItemRange(
            path, blob_start, length, item, raw, (), dtype, tuple(chunk_sizes), (offsets, lengths)
        )
    first, count = region
    offset, length = blob_start + first * dtype.itemsize, count * dtype.itemsize
    shape = tuple(lengths)
    target = _direct_target(resolve_tensor, item, dtype, shape) if count else None
    return ItemRange(path, offset, length, item, raw, (), dtype, shape, None, target)


def _direct_target(
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
    item: ReadItem,
    dtype: torch.dtype,
    shape: tuple[int, ...],
) -> torch.Tensor | None:
    """The planner's tensor for `item` when bytes of `dtype` and `shape` can land in it as they
    are (a contiguous CPU tensor of that dtype and shape), else None (a cast, a device copy or
    a strided copy is needed: the buffered path)."""
    tensor = resolve_tensor(item).detach()
    if (
        tensor.device.type == "cpu"
        and tensor.dtype == dtype
        and tensor.is_contiguous()
        and tuple(tensor.shape) == shape
    ):
        return tensor
    return None


def _archive_direct(
    item_range: ItemRange,
    chunk_sizes: Sequence[int],
    dtype: torch.dtype,
    resolve_tensor: Callable[[ReadItem], torch.Tensor],
) -> tuple | None:
    """(item range, group key, target, skip bytes) when the item's region is one non-empty run of
    its chunk and its target takes the bytes as they are; else None."""
    item = item_range.item
    lengths = list(item.lengths)
    region = contiguous_region(chunk_sizes, list(item.storage_offsets), lengths)
    if region is None or region[1] == 0:
        return None
    target = _direct_target(resolve_tensor, item, dtype, tuple(lengths))
    if target is None:
        return None
    key = (dtype, tuple(chunk_sizes), item_range.length)
    return item_range, key, target, region[0] * dtype.itemsize


def _archive_ranges(pending: list) -> tuple[list[ItemRange], int]:
    """The ItemRanges of `_archive_direct` candidates, direct with their group's template or
    buffered TORCH_SAVE where the group has none, and the number of templates made."""
    templates = make_templates({key for _, key, _, _ in pending})
    out = []
    for item_range, key, target, skip in pending:
        template = templates.get(key)
        if template is None:
            out.append(item_range)
        else:
            shape = tuple(target.shape)
            out.append(
                item_range._replace(
                    dtype=key[0], shape=shape, target=target, archive=template, skip=skip
                )
            )
    return out, len(templates)


# An ItemRange's (path, offset): its first two fields.
_OBJECT_ORDER = operator.itemgetter(0, 1)
