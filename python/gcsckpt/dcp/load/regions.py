"""Chunk geometry: which stored chunk a ReadItem names, and where its region lies in it.

In: DCP Metadata and a ReadItem's (storage_offsets, lengths). Out: the chunk and dtype, whether
a region is one contiguous run of elements (so only its bytes need fetching), and narrowed views.
Pure functions, shared by `plan` (what to fetch) and `decode` (what to cut from fetched blocks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, Metadata, MetadataIndex

from gcsckpt.dcp.indexed_metadata import index_of


def chunk_of(metadata: Metadata, index: MetadataIndex) -> tuple[ChunkStorageMetadata, torch.dtype]:
    """The ChunkStorageMetadata a storage index names, and its tensor's dtype.

    Raises:
        ValueError: the FQN or chunk is not in `state_dict_metadata`.
    """
    columns = index_of(metadata)
    if columns is not None:  # one chunk from the columns, not the tensor's whole entry
        return columns.chunk_of(index)
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
