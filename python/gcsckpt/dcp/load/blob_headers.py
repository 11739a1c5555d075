"""The header pre-read for SAFETENSORS checkpoints: where each tensor sits inside its blob.

A SAFETENSORS `.distcp` object ends in one safetensors blob (see `gcsckpt.dcp.safetensors_blob`);
`.metadata` gives only the blob's start, so a tensor item's bytes are found through the blob's
header. In: the (path, blob offset) of every blob the load touches, the Metadata (to size the
first read) and a `ranges.CheckpointRanges`. Out: a BlobLayout per blob, read in one round trip
for all blobs (two for a header longer than the guess), and `tensor_start`, the absolute offset
of one chunk's bytes after checking dtype, shape and chunk offsets against `.metadata`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.distributed.checkpoint._hf_utils import CUSTOM_METADATA_KEY
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata

from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.safetensors_blob import BlobHeader, header_length, parse_header

BlobKey = tuple[str, int]  # (relative object path, offset of the blob in that object)

# Safetensors header size model (bytes): per tensor at least `"fqn":{"dtype":"F32","shape":[],
# "data_offsets":[0,0]}` (~45 + len(fqn)), at most ~160 + 2 x len(fqn) with the DCP sharding
# metadata; plus room for "__metadata__".
_HEADER_MIN_PER_TENSOR = 45
_HEADER_GUESS_PER_TENSOR = 160
_HEADER_GUESS_BASE = 4096


class BlobLayout(NamedTuple):
    """A parsed blob header and the chunk offsets DCP recorded per FQN ({fqn: offsets})."""

    header: BlobHeader
    saved_offsets: dict


def read_blob_headers(
    blobs: set[BlobKey], metadata: Metadata, ranges: CheckpointRanges, errors: LoadErrors
) -> dict[BlobKey, BlobLayout]:
    """Reads and parses each blob's header: first a guess of its size, then the rest of any
    header longer than that.

    Raises:
        RangeReadError: a read failed. CheckpointReadError: a header is not a safetensors
            header (naming the object and byte range read).
    """
    buffers = {key: bytearray(size) for key, size in _read_sizes(blobs, metadata).items()}
    _read(buffers, ranges)
    larger = {}
    for key, buf in buffers.items():
        need = _parse(key, buf, header_length, errors)
        if need > len(buf):
            larger[key] = bytearray(need)
    if larger:
        _read(larger, ranges)
        buffers.update(larger)
    layouts = {}
    for key, buf in buffers.items():
        blob = _parse(key, buf, parse_header, errors)
        layouts[key] = BlobLayout(blob, _saved_offsets(blob))
    return layouts


def tensor_start(
    layout: BlobLayout,
    where: tuple[str, int, int],
    index: MetadataIndex,
    chunk_sizes: Sequence[int],
    dtype: torch.dtype,
    errors: LoadErrors,
) -> int:
    """Absolute offset (bytes, in the object) of the chunk `index` names inside its blob.

    Args:
        where: (path, offset, length) of the item's storage entry, for messages.
        chunk_sizes, dtype: the chunk as `.metadata` describes it.

    Raises:
        CheckpointReadError: the blob lacks the FQN, holds it with another dtype or shape, or
            records another chunk of it.
    """
    entry = layout.header.tensors.get(index.fqn)
    if entry is None:
        raise errors.at(*where, f"safetensors blob has no tensor {index.fqn!r}")
    if entry.dtype != dtype or entry.shape != tuple(chunk_sizes):
        raise errors.at(
            *where,
            f"safetensors tensor {index.fqn!r} is {entry.dtype} {entry.shape}, metadata says"
            f" {dtype} {tuple(chunk_sizes)}",
        )
    saved = layout.saved_offsets.get(index.fqn)
    if saved is not None and tuple(saved) != tuple(index.offset or ()):
        raise errors.at(
            *where,
            f"safetensors tensor {index.fqn!r} holds the chunk at {tuple(saved)}, not"
            f" {tuple(index.offset or ())} (two chunks of one FQN in one object)",
        )
    return where[1] + entry.begin


def _read_sizes(blobs: set[BlobKey], metadata: Metadata) -> dict[BlobKey, int]:
    """How many bytes to read first from each blob: a guess that covers its header, capped by a
    lower bound on the blob's size (its tensors' bytes plus the least header they need) so the
    read never runs past the object's end. One pass over storage_data, since the blob holds
    every tensor of that object, not just ours."""
    sdm = metadata.state_dict_metadata
    low = dict.fromkeys(blobs, 8 + 2)
    guess = dict.fromkeys(blobs, 8 + _HEADER_GUESS_BASE)
    for index, info in metadata.storage_data.items():
        key = (info.relative_path, info.offset)
        if key in low and isinstance(sdm.get(index.fqn), TensorStorageMetadata):
            low[key] += info.length + _HEADER_MIN_PER_TENSOR + len(index.fqn)
            guess[key] += _HEADER_GUESS_PER_TENSOR + 2 * len(index.fqn)
    return {key: min(low[key], guess[key]) for key in blobs}


def _read(buffers: dict[BlobKey, bytearray], ranges: CheckpointRanges) -> None:
    ranges.read((path, offset, len(buf), buf) for (path, offset), buf in buffers.items())


def _parse(key: BlobKey, buf: bytearray, parse: Callable, errors: LoadErrors):
    """`parse(buf)`; a ValueError becomes the error naming that object and byte range."""
    try:
        return parse(buf)
    except ValueError as e:
        raise errors.at(key[0], key[1], len(buf), str(e)) from None


def _saved_offsets(blob: BlobHeader) -> dict:
    """FQN -> chunk offsets, as the DCP safetensors writer records them in "__metadata__"."""
    raw = blob.metadata.get(CUSTOM_METADATA_KEY)
    try:
        table = json.loads(raw) if raw else {}
        return {fqn: entry["saved_offsets"] for fqn, entry in table.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
