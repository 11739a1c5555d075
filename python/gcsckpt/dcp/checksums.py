"""Block checksums of a checkpoint's data objects: how a save records them, how a load finds them.

Every data object a `GCSStorageWriter` uploads is cut into blocks at each item boundary (each
`stream.tell()` of torch's `_write_item`) and every `CHECKSUM_BLOCK_BYTES` (1 MiB) inside an
item; the C++ uploader computes each block's CRC-32C in the same pass that gives the object's
CRC-32C for GCS. The records ride to the coordinator on the first `WriteResult` of each object
(`ChecksummedInfo`) and are committed inside `.metadata`, as builtin types on the `StorageMeta`
object (`metadata.storage_meta.gcsckpt_checksums`): data and checksums are committed by one
object, so they cannot disagree once `.metadata` exists, and torch's stock readers unpickle
`.metadata` unchanged (an extra attribute of a dataclass they know, of dicts, tuples, ints and
bytes). A load hands each object's `gcsckpt.io.BlockSums` to the range reader, which checks
every block before its bytes are committed. Why blocks of items (no byte read beyond an item
when whole items are read) and 1 MiB: docs/design.md, "Integrity guarantees"; figures in
docs/measurements.md, "Block checksums".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.io import BlockSums

# The attribute of `.metadata`'s StorageMeta that holds the record, and its layout version.
ATTRIBUTE = "gcsckpt_checksums"
FORMAT_VERSION = 1

# One object's record: (size in bytes, block starts as little-endian uint64s, CRC-32C of each
# block as little-endian uint32s).
ObjectRecord = tuple[int, bytes, bytes]


def block_starts(boundaries: Iterable[int], size: int, block_bytes: int) -> np.ndarray:
    """Block starts of an object of `size` bytes: every boundary (item starts and ends, bytes)
    below `size`, 0, and every `block_bytes` after each of them up to the next. Returns an
    ascending uint64 array (empty for an empty object).

    Raises:
        ValueError: block_bytes < 1.
    """
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be >= 1, got {block_bytes}")
    if size <= 0:
        return np.zeros(0, dtype="<u8")
    cuts = sorted({0, *(b for b in boundaries if 0 < b < size)})
    ends = cuts[1:] + [size]
    parts = [
        np.arange(start, end, block_bytes, dtype="<u8")
        for start, end in zip(cuts, ends, strict=True)
    ]
    return np.concatenate(parts)


@dataclasses.dataclass
class ChecksummedInfo(_StorageInfo):
    """torch's `_StorageInfo` of an object's first item, carrying the object's checksum record
    from `write_data` to the coordinator's `finish`, which keeps the record and commits a plain
    `_StorageInfo` (see `strip`)."""

    object_checksums: tuple | None = None


def with_records(
    results: list[WriteResult], records: Mapping[str, ObjectRecord]
) -> list[WriteResult]:
    """`results` (one rank's WriteResults) with each object's record (relative path -> record)
    on the storage info of the object's first item (a `ChecksummedInfo`), to reach the
    coordinator's `finish`; the others unchanged."""
    out, pending = [], dict(records)
    for result in results:
        info = result.storage_data
        record = pending.pop(info.relative_path, None)
        if record is not None:
            info = ChecksummedInfo(
                info.relative_path,
                info.offset,
                info.length,
                info.transform_descriptors,
                object_checksums=record,
            )
            result = dataclasses.replace(result, storage_data=info)
        out.append(result)
    return out


def strip(info: _StorageInfo) -> tuple[_StorageInfo, ObjectRecord | None]:
    """(the plain `_StorageInfo` to commit, the object's record or None)."""
    if not isinstance(info, ChecksummedInfo):
        return info, None
    plain = _StorageInfo(info.relative_path, info.offset, info.length, info.transform_descriptors)
    return plain, info.object_checksums


def attach(storage_meta: StorageMeta, records: Mapping[str, ObjectRecord]) -> None:
    """Puts the records (relative path -> record) on the StorageMeta `.metadata` commits."""
    setattr(
        storage_meta,
        ATTRIBUTE,
        {"version": FORMAT_VERSION, "algorithm": "crc32c", "objects": dict(records)},
    )


def records_of(metadata: Metadata) -> dict[str, ObjectRecord]:
    """The checkpoint's records (relative path -> record); {} for a checkpoint saved without
    them (stock torch, a peer, gcsckpt before checksums).

    Raises:
        ValueError: a record of another layout version or algorithm (a newer gcsckpt wrote it).
    """
    found = getattr(getattr(metadata, "storage_meta", None), ATTRIBUTE, None)
    if not found:
        return {}
    if found.get("version") != FORMAT_VERSION or found.get("algorithm") != "crc32c":
        raise ValueError(
            f"block checksums of version {found.get('version')!r} ({found.get('algorithm')!r})"
            f" are not readable by this gcsckpt (it reads version {FORMAT_VERSION}, crc32c)"
        )
    return found["objects"]


def block_sums(records: Mapping[str, ObjectRecord], paths: Iterable[str]) -> dict[str, BlockSums]:
    """`gcsckpt.io.BlockSums` of each of `paths` that has a record.

    Raises:
        ValueError: a malformed record (names the object).
    """
    out = {}
    for path in paths:
        record = records.get(path)
        if record is None:
            continue
        size, starts, crcs = record
        try:
            out[path] = BlockSums(size, starts, crcs)
        except ValueError as e:
            raise ValueError(f"block checksums of {path}: {e}") from None
    return out
