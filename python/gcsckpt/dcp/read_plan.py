"""Turning a rank's DCP ReadItems into byte ranges ("fetches") and memory windows.

Each ReadItem becomes one Fetch: the object, byte range and what to do with the bytes. TORCH_SAVE
items fetch their whole `torch.save` archive; SAFETENSORS items fetch only the bytes of the
requested region when it is contiguous in the stored chunk, straight into the target tensor when
that tensor is a contiguous CPU tensor of the same dtype ("direct"); BYTE_IO items fetch their
bytes. Fetches are sorted by (object, offset) and cut into windows of bounded buffer memory; each
buffered fetch gets a 64-byte aligned slot so tensors viewed in place are aligned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

BYTES, TORCH_SAVE, RAW = 0, 1, 2
ALIGN = 64


class Fetch:
    """One byte range of one object and how to use it.

    Attributes:
        path: relative object path; offset/length: byte range in that object (bytes).
        item: the ReadItem. kind: BYTES, TORCH_SAVE or RAW (plain tensor bytes).
        dtype/shape: for RAW, the fetched block's dtype and shape.
        narrow: for RAW/TORCH_SAVE, (offsets, lengths) still to apply after decoding, or None.
        target: for direct RAW fetches, the tensor the bytes land in.
        descriptors: stream transforms to undo (TORCH_SAVE/BYTES only), or ().
        slot: start of this fetch's bytes in its window buffer (set by `make_windows`).
    """

    __slots__ = (
        "path",
        "offset",
        "length",
        "item",
        "kind",
        "dtype",
        "shape",
        "narrow",
        "target",
        "descriptors",
        "slot",
    )

    def __init__(self, path, offset, length, item, kind, descriptors=()) -> None:
        self.path, self.offset, self.length, self.item, self.kind = path, offset, length, item, kind
        self.dtype = self.shape = self.narrow = self.target = None
        self.descriptors = descriptors
        self.slot = -1


@dataclass
class Window:
    """Consecutive fetches sharing one buffer of `buffer_bytes` bytes."""

    fetches: list[Fetch]
    buffer_bytes: int


def chunk_of(metadata: Metadata, index: MetadataIndex):
    """The ChunkStorageMetadata a storage index names, and its tensor's dtype.

    Raises:
        ValueError: the FQN or chunk is not in `state_dict_metadata`.
    """
    entry = metadata.state_dict_metadata.get(index.fqn)
    chunks = getattr(entry, "chunks", None)
    if chunks is None:
        raise ValueError(f"FQN {index.fqn!r} has no tensor metadata")
    hint = index.index
    if hint is not None and 0 <= hint < len(chunks) and chunks[hint].offsets == index.offset:
        return chunks[hint], entry.properties.dtype
    for chunk in chunks:
        if chunk.offsets == index.offset:
            return chunk, entry.properties.dtype
    raise ValueError(f"FQN {index.fqn!r} has no chunk at offsets {tuple(index.offset or ())}")


def is_raw_tensor_item(length: int, chunk_sizes: Sequence[int], dtype: torch.dtype) -> bool:
    """True when a tensor item's stored length is its chunk's raw byte size (SAFETENSORS).

    A TORCH_SAVE archive always carries a zip directory and pickle (hundreds of bytes) on top of
    the raw bytes, so it is never exactly that size.
    """
    return length == math.prod(chunk_sizes) * dtype.itemsize


def contiguous_region(
    sizes: Sequence[int], offsets: Sequence[int], lengths: Sequence[int]
) -> tuple[int, int] | None:
    """(first element, element count) of a region of a C-contiguous block, or None if the
    region is not one contiguous run of elements."""
    last = -1
    for d in range(len(sizes)):
        if offsets[d] != 0 or lengths[d] != sizes[d]:
            last = d
    count = math.prod(lengths)
    if count == 0:
        return 0, 0
    if any(lengths[d] != 1 for d in range(last)):
        return None
    start, stride = 0, 1
    for d in range(len(sizes) - 1, -1, -1):
        start += offsets[d] * stride
        stride *= sizes[d]
    return start, count


def narrow_block(tensor: torch.Tensor, offsets: Sequence[int], lengths: Sequence[int]):
    """`tensor` narrowed to the region (offsets, lengths), as a view."""
    for d, (off, length) in enumerate(zip(offsets, lengths, strict=True)):
        if off != 0 or length != tensor.shape[d]:
            tensor = tensor.narrow(d, off, length)
    return tensor


def raw_fetch(fetch: Fetch, blob_start: int, chunk_sizes, dtype, resolve) -> Fetch:
    """Fills a RAW fetch's range/shape for a tensor whose chunk bytes start at `blob_start`.

    Args:
        resolve: `planner.resolve_tensor`, called only to test whether a direct read is possible.
    """
    item: ReadItem = fetch.item
    offsets, lengths = list(item.storage_offsets), list(item.lengths)
    region = contiguous_region(chunk_sizes, offsets, lengths)
    fetch.dtype = dtype
    if region is None:
        fetch.offset, fetch.length = blob_start, math.prod(chunk_sizes) * dtype.itemsize
        fetch.shape, fetch.narrow = tuple(chunk_sizes), (offsets, lengths)
        return fetch
    first, count = region
    fetch.offset, fetch.length = blob_start + first * dtype.itemsize, count * dtype.itemsize
    fetch.shape = tuple(lengths)
    if count:
        target = resolve(item).detach()
        if (
            target.device.type == "cpu"
            and target.dtype == dtype
            and target.is_contiguous()
            and tuple(target.shape) == fetch.shape
        ):
            fetch.target = target
    return fetch


def make_windows(fetches: list[Fetch], window_bytes: int) -> list[Window]:
    """Cuts fetches (in order) into windows whose aligned buffered bytes stay <= window_bytes
    (a single larger fetch gets a window of its own); direct and empty fetches use no buffer."""
    windows: list[Window] = []
    current: list[Fetch] = []
    used = 0
    for fetch in fetches:
        if fetch.target is not None or fetch.length == 0:
            fetch.slot = -1
            current.append(fetch)
            continue
        need = -(-fetch.length // ALIGN) * ALIGN
        if used and used + need > window_bytes:
            windows.append(Window(current, used))
            current, used = [], 0
        fetch.slot = used
        used += need
        current.append(fetch)
    if current:
        windows.append(Window(current, used))
    return windows


def item_kind(item: ReadItem) -> int:
    """BYTES for BYTE_IO items, else TORCH_SAVE until classified further."""
    return BYTES if item.type == LoadItemType.BYTE_IO else TORCH_SAVE
