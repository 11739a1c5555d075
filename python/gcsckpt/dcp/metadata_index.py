"""A columnar index of a DCP `.metadata`, appended after the stock pickle.

`.metadata` written by `GCSStorageWriter` is

    [ pickle of torch's Metadata, unchanged ][ index section ][ footer, FOOTER.size bytes ]

`pickle.load`/`pickle.loads` stop at the pickle's STOP opcode and ignore what follows, so
torch's FileSystemReader/FsspecReader and every other reader of the pickle read it as before
(tests/dcp/test_metadata_index.py, test_compat.py). A reader that knows the footer reads only
the section: no Python object per storage entry until one is asked for.

Why: unpickling makes Python objects for every storage entry however few of them a rank reads,
and `.metadata` grows with ranks x tensors (a Llama-3-70B FSDP2 + AdamW checkpoint at 1,024
ranks has 2.2 million entries); parsing the section is a few numpy views, vectorised checks and
one small JSON document, and entries are made only when asked for (`indexed_metadata`). The
figures, before and after: docs/measurements.md, "Scaling" (simulated ranks).

Section (all integers little-endian):

    b"GCKI" | u32 n | n bytes of JSON (the directory) | zero padding to 8 | arrays, each at a
    multiple of 8 from the section's start

The JSON directory holds the string tables (`fqns` in state_dict_metadata order, `paths`, and
the names of `dtypes`, `layouts`, `memory_formats`), the distinct transform descriptor lists
(`descriptors`: [["list"|"tuple", [str, ...]], ...]), `arrays` (name -> [numpy dtype string,
byte offset, element count]) and `extra` ([offset, length] of a pickle of the Metadata with
empty `state_dict_metadata`/`storage_data`: planner_data, storage_meta with gcsckpt's block
checksum records, version; read by `metadata_codec`'s restricted unpickler. Their size grows
with FQNs and objects, not with storage entries).

Arrays (F: FQNs, C: saved chunks of all tensors, S: storage entries in storage_data order):

    fqn_kind u1[F]          0 tensor (TensorStorageMetadata), 1 BYTE_IO (BytesStorageMetadata)
    fqn_dtype i2[F], fqn_layout i2[F], fqn_memory_format i2[F]    ids into the name tables
    fqn_flags u1[F]         bit 0 requires_grad, bit 1 pin_memory
    fqn_ndim i4[F]          dimensions (0 for BYTE_IO)
    fqn_chunks i8[F]        saved chunks of the tensor (0 for BYTE_IO)
    fqn_storage i8[F]       storage row of a BYTE_IO FQN's entry, -1 if none (tensors: -1)
    size i8[sum ndim]       each tensor's global size, FQN after FQN
    chunk_offsets, chunk_sizes i8[sum chunks*ndim]    each chunk's offsets/sizes, row-major
    chunk_storage i8[C]     storage row of the chunk's entry, -1 if none
    (size, chunk_offsets, chunk_sizes, chunk_storage, st_chunk, st_index: i4 when all fit)
    st_fqn i4[S], st_path i4[S], st_descriptors i4[S] (-1: None)
    st_chunk i8[S]          the chunk (global row) whose offsets the key holds; -1: offset None
    st_index i8[S], st_flags u1[S] (bit 0: MetadataIndex.index is None)
    st_offset i8[S], st_length i8[S]

Footer (`FOOTER`): b"GCKPTIDX", u32 format version, u64 section offset (= the pickle's length),
u64 section length, u32 CRC-32C of the section, b"GCKPTEND". A stock pickle ends with STOP
(`.`), never with the end magic.

A Metadata the index cannot state exactly (a subclass or extra attribute, a storage key whose
offsets match no saved chunk or two, a `_StorageInfo` subclass, chunks with equal offsets) gets
no index: `encode_index` returns None and `.metadata` is the pickle alone.

Decoding and its checks: `gcsckpt.dcp.metadata_index_decode`.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from gcsckpt.dcp.metadata_codec import dump_metadata
from gcsckpt.io import crc32c

FORMAT_VERSION = 1
MAGIC, END_MAGIC = b"GCKPTIDX", b"GCKPTEND"
FOOTER = struct.Struct("<8sIQQI8s")  # magic, version, section offset, length, CRC-32C, end
SECTION_MAGIC = b"GCKI"
_ALIGN = 8

# name -> numpy dtype of each array (the only dtypes a section may use).
ARRAY_DTYPES: dict[str, str] = dict(
    pair.split(":")
    for pair in (
        "fqn_kind:|u1 fqn_dtype:<i2 fqn_layout:<i2 fqn_memory_format:<i2 fqn_flags:|u1 "
        "fqn_ndim:<i4 fqn_chunks:<i8 fqn_storage:<i8 size:<i8 chunk_offsets:<i8 chunk_sizes:<i8 "
        "chunk_storage:<i8 st_fqn:<i4 st_path:<i4 st_descriptors:<i4 st_chunk:<i8 st_index:<i8 "
        "st_flags:|u1 st_offset:<i8 st_length:<i8"
    ).split()
)
# Arrays written as int32 when every value fits (chunk boxes: every offset + size does), which
# keeps them a third smaller; readers widen chunk boxes to int64 before adding to them.
NARROWABLE = {"size", "chunk_offsets", "chunk_sizes", "chunk_storage", "st_chunk", "st_index"}
_INT32_MAX = (1 << 31) - 1
KIND_TENSOR, KIND_BYTES = 0, 1
_METADATA_FIELDS = {f.name for f in dataclasses.fields(Metadata)}
_STORAGE_FIELDS = {f.name for f in dataclasses.fields(_StorageInfo)}
_PROPERTY_FIELDS = {f.name for f in dataclasses.fields(TensorProperties)}


class MetadataIndexError(ValueError):
    """The index section of a `.metadata` is corrupt, truncated or inconsistent (the message
    names the object, its generation and what is wrong)."""


@dataclasses.dataclass(frozen=True)
class Footer:
    """The parsed footer: where the section lies in the object (bytes) and its CRC-32C."""

    version: int
    section_offset: int
    section_length: int
    crc32c: int

    @property
    def object_size(self) -> int:
        """Bytes of the whole `.metadata` object this footer ends."""
        return self.section_offset + self.section_length + FOOTER.size


@dataclasses.dataclass(frozen=True)
class MetadataColumns:
    """A decoded index: the string tables and arrays of the module doc, checked.

    `fqn_row` maps FQN -> row; `chunk_start[r]` / `dims_start[r]` are the first chunk row /
    first `chunk_offsets` element of FQN row r; `size_start[r]` its first `size` element;
    `descriptors` the transform descriptor values (lists or tuples of str); `extra` the
    Metadata holding planner_data, storage_meta and version (empty dicts)."""

    fqns: list[str]
    fqn_row: dict[str, int]
    paths: list[str]
    dtypes: list[torch.dtype]
    layouts: list[torch.layout]
    memory_formats: list[torch.memory_format]
    descriptors: list[Any]
    arrays: dict[str, np.ndarray]
    chunk_start: np.ndarray
    dims_start: np.ndarray
    size_start: np.ndarray
    extra: Metadata


def _names(values: list) -> list[str]:
    return [str(v).removeprefix("torch.") for v in values]


def encode_index(metadata: Metadata) -> bytes | None:
    """The index section of `metadata` (module doc), or None when it cannot state it exactly
    (also when an integer does not fit int64)."""
    try:
        return _encode(metadata)
    except OverflowError:
        return None


def _encode(metadata: Metadata) -> bytes | None:
    sdm, storage = metadata.state_dict_metadata, metadata.storage_data
    if type(metadata) is not Metadata or set(vars(metadata)) != _METADATA_FIELDS:
        return None
    if type(sdm) is not dict or type(storage) is not dict:
        return None
    fqns = list(sdm)
    if not all(type(f) is str for f in fqns):
        return None
    n = len(fqns)
    kind = np.zeros(n, "|u1")
    dtype_id, layout_id, format_id = (np.zeros(n, "<i2") for _ in range(3))
    flags = np.zeros(n, "|u1")
    ndim = np.zeros(n, "<i4")
    chunks_n = np.zeros(n, "<i8")
    tables: dict[str, dict] = {"dtypes": {}, "layouts": {}, "memory_formats": {}}
    size_pool: list[int] = []
    offsets_pool: list[int] = []
    sizes_pool: list[int] = []
    chunk_positions: list[dict | None] = []  # per FQN: offsets -> chunk position
    for row, fqn in enumerate(fqns):
        entry = sdm[fqn]
        if type(entry) is BytesStorageMetadata and not vars(entry):
            kind[row] = KIND_BYTES
            chunk_positions.append(None)
            continue
        if type(entry) is not TensorStorageMetadata or type(entry.size) is not torch.Size:
            return None
        props = entry.properties
        if type(props) is not TensorProperties or set(vars(props)) != _PROPERTY_FIELDS:
            return None
        if type(props.requires_grad) is not bool or type(props.pin_memory) is not bool:
            return None
        for table, value, out in (
            ("dtypes", props.dtype, dtype_id),
            ("layouts", props.layout, layout_id),
            ("memory_formats", props.memory_format, format_id),
        ):
            out[row] = tables[table].setdefault(value, len(tables[table]))
        flags[row] = props.requires_grad | (props.pin_memory << 1)
        d = len(entry.size)
        ndim[row] = d
        size_pool.extend(entry.size)
        chunks = entry.chunks
        if type(chunks) is not list:
            return None
        positions = {}
        for k, chunk in enumerate(chunks):
            offs, sizes = chunk.offsets, chunk.sizes
            if type(offs) is not torch.Size or type(sizes) is not torch.Size:
                return None
            if len(offs) != d or len(sizes) != d or len(vars(chunk)) != 2:
                return None
            positions[offs] = k
            offsets_pool.extend(offs)
            sizes_pool.extend(sizes)
        if len(positions) != len(chunks):
            return None  # two chunks at the same offsets: a key could not name one
        chunks_n[row] = len(chunks)
        chunk_positions.append(positions)
    chunk_start = np.concatenate(([0], np.cumsum(chunks_n)))[:-1].tolist()
    fqn_row = {f: i for i, f in enumerate(fqns)}
    is_bytes = (kind == KIND_BYTES).tolist()
    # One tuple per storage row (columns of st_*), then one numpy conversion per column.
    rows: list[tuple] = []
    fqn_storage = [-1] * n
    chunk_storage = [-1] * int(chunks_n.sum())
    paths: dict[str, int] = {}
    descriptors: dict[tuple, int] = {}
    size_type, index_type = torch.Size, MetadataIndex
    for srow, (key, info) in enumerate(storage.items()):
        if type(key) is not index_type or type(info) is not _StorageInfo:
            return None
        row = fqn_row.get(key.fqn)
        if row is None or not vars(info).keys() <= _STORAGE_FIELDS:
            return None
        path, offset, length = info.relative_path, info.offset, info.length
        if type(path) is not str or type(offset) is not int or type(length) is not int:
            return None
        key_offset = key.offset
        if key_offset is None:
            if not is_bytes[row] or fqn_storage[row] >= 0:
                return None
            fqn_storage[row] = srow
            chunk = -1
        else:
            positions = chunk_positions[row]
            k = None if positions is None else positions.get(key_offset)
            if k is None or type(key_offset) is not size_type:
                return None
            chunk = chunk_start[row] + k
            chunk_storage[chunk] = srow
        index = key.index
        if index is not None and type(index) is not int:
            return None
        found = info.transform_descriptors
        if found is None:
            desc = -1
        else:
            if type(found) not in (list, tuple) or not all(type(v) is str for v in found):
                return None
            desc_key = (type(found).__name__, tuple(found))
            desc = descriptors.setdefault(desc_key, len(descriptors))
        path_id = paths.get(path)
        if path_id is None:
            path_id = paths[path] = len(paths)
        rows.append(
            (
                row,
                path_id,
                desc,
                chunk,
                0 if index is None else index,
                index is None,
                offset,
                length,
            )
        )
    names = ("st_fqn", "st_path", "st_descriptors", "st_chunk", "st_index", "st_flags")
    names += ("st_offset", "st_length")
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    st = {
        name: np.asarray(col, ARRAY_DTYPES[name]) for name, col in zip(names, columns, strict=True)
    }
    fqn_storage = np.asarray(fqn_storage, "<i8")
    chunk_storage = np.asarray(chunk_storage, "<i8")
    arrays = {
        "fqn_kind": kind,
        "fqn_dtype": dtype_id,
        "fqn_layout": layout_id,
        "fqn_memory_format": format_id,
        "fqn_flags": flags,
        "fqn_ndim": ndim,
        "fqn_chunks": chunks_n,
        "fqn_storage": fqn_storage,
        "size": np.asarray(size_pool, "<i8"),
        "chunk_offsets": np.asarray(offsets_pool, "<i8"),
        "chunk_sizes": np.asarray(sizes_pool, "<i8"),
        "chunk_storage": chunk_storage,
        **st,
    }
    _narrow(arrays)
    extra = dataclasses.replace(metadata, state_dict_metadata={}, storage_data={})
    extra_bytes = dump_metadata(extra)
    directory: dict[str, Any] = {
        "fqns": fqns,
        "paths": list(paths),
        "dtypes": _names(list(tables["dtypes"])),
        "layouts": _names(list(tables["layouts"])),
        "memory_formats": _names(list(tables["memory_formats"])),
        "descriptors": [[k, list(v)] for k, v in descriptors],
    }
    return _pack(directory, arrays, extra_bytes)


def _narrow(arrays: dict[str, np.ndarray]) -> None:
    """Replaces each `NARROWABLE` array (int64) by its int32 copy when every value fits
    (chunk offsets and sizes only when each offset + size does too), in place."""
    ends = arrays["chunk_offsets"] + arrays["chunk_sizes"]
    fits_boxes = not ends.size or int(ends.max()) <= _INT32_MAX
    for name in NARROWABLE:
        array = arrays[name]
        if name in ("chunk_offsets", "chunk_sizes") and not fits_boxes:
            continue
        if not array.size or (int(array.min()) >= -1 and int(array.max()) <= _INT32_MAX):
            arrays[name] = array.astype("<i4")


def _pack(directory: dict, arrays: dict[str, np.ndarray], extra: bytes) -> bytes:
    """The section's bytes: directory JSON (with `arrays` and `extra` placed), then the data."""
    # Offsets depend on the JSON's length, which depends on the offsets: lay the data out
    # relative to its own start, then shift by the (padded) head once its length is known.
    layout, cursor = {}, 0
    for name, array in arrays.items():
        layout[name] = [array.dtype.str, cursor, int(array.size)]
        cursor += -(-array.nbytes // _ALIGN) * _ALIGN
    extra_at = cursor
    shift = 0
    while True:  # the head's length grows with the offsets it states: settles in two steps
        moved = _head(directory, layout, extra_at, len(extra), shift)
        needed = -(-len(moved) // _ALIGN) * _ALIGN
        if needed <= shift:
            break
        shift = needed
    parts = [moved, bytes(shift - len(moved))]
    for array in arrays.values():
        data = np.ascontiguousarray(array).tobytes()
        parts += [data, bytes(-len(data) % _ALIGN)]
    parts.append(extra)
    return b"".join(parts)


def _head(directory: dict, layout: dict, extra_at: int, extra_len: int, shift: int) -> bytes:
    doc = dict(directory)
    doc["arrays"] = {k: [t, o + shift, c] for k, (t, o, c) in layout.items()}
    doc["extra"] = [extra_at + shift, extra_len]
    text = json.dumps(doc, separators=(",", ":")).encode()
    return SECTION_MAGIC + struct.pack("<I", len(text)) + text


def dump_indexed(metadata: Metadata) -> bytes:
    """`.metadata` as `GCSStorageWriter` commits it: torch's pickle, then (when `encode_index`
    can state the Metadata) the index section and the footer."""
    payload = dump_metadata(metadata)
    section = encode_index(metadata)
    if section is None:
        return payload
    footer = FOOTER.pack(
        MAGIC, FORMAT_VERSION, len(payload), len(section), crc32c(section), END_MAGIC
    )
    return b"".join((payload, section, footer))


def parse_footer(tail: bytes | memoryview, *, source: str) -> Footer | None:
    """The footer at the end of `tail` (the last bytes of a `.metadata`), or None when there
    is none (a stock pickle, or an older gcsckpt's).

    Raises:
        MetadataIndexError: the magics are there but the offsets cannot be right.
    """
    if len(tail) < FOOTER.size:
        return None
    magic, version, offset, length, crc, end = FOOTER.unpack(bytes(tail[-FOOTER.size :]))
    if magic != MAGIC or end != END_MAGIC:
        return None
    if offset < 2 or length < 8 or offset + length + FOOTER.size > 1 << 48:
        raise MetadataIndexError(
            f"{source}: footer names an impossible index section (offset {offset}, length {length})"
        )
    return Footer(version, offset, length, crc)
