"""Decoding and checking `.metadata`'s index section (the format: `gcsckpt.dcp.metadata_index`).

A module apart from the encoder: a reader runs only this half, and it decides trust.
Decoding checks (`decode_index`) the CRC-32C, every array's bounds and dtype, and that the
arrays agree (each chunk/BYTE_IO entry and its storage row name each other; non-negative sizes,
offsets, lengths; safe relative paths; known dtypes). Any failure raises `MetadataIndexError`
naming the object and generation: the reader then fails the load rather than read the pickle,
since a section that does not match its CRC or itself means the object is not what a gcsckpt
writer committed, and the pickle beside it is no more trustworthy. A newer format version
(`FORMAT_VERSION` below it) is not an error: the reader uses the pickle.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import torch

from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.metadata_index import (
    ARRAY_DTYPES,
    KIND_BYTES,
    KIND_TENSOR,
    NARROWABLE,
    SECTION_MAGIC,
    Footer,
    MetadataColumns,
    MetadataIndexError,
)
from gcsckpt.dcp.paths import check_relative_path
from gcsckpt.io import crc32c


def decode_index(section: bytes | memoryview, footer: Footer, *, source: str) -> MetadataColumns:
    """Checks and decodes an index section (module doc).

    Args:
        section: the `footer.section_length` bytes at `footer.section_offset`.
        source: the object and generation, e.g. `gs://b/p/.metadata (generation 7)`, for errors.

    Raises:
        MetadataIndexError: wrong length or CRC-32C, bad directory, arrays out of bounds or
            inconsistent, unsafe paths, unknown dtypes (names `source` and what failed).
    """
    section = memoryview(section).cast("B")
    if len(section) != footer.section_length:
        raise MetadataIndexError(
            f"{source}: index section is {len(section)} bytes, footer says "
            f"{footer.section_length} (truncated?)"
        )
    if crc32c(section) != footer.crc32c:
        raise MetadataIndexError(f"{source}: index section fails its CRC-32C (corrupt)")
    try:
        return _decode(section, source)
    except MetadataIndexError:
        raise
    except Exception as e:  # a malformed directory raises many types
        raise MetadataIndexError(f"{source}: index section is malformed ({e!r})") from None


def _fail(source: str, what: str) -> MetadataIndexError:
    return MetadataIndexError(f"{source}: index section is inconsistent: {what}")


def _decode(section: memoryview, source: str) -> MetadataColumns:
    if bytes(section[:4]) != SECTION_MAGIC:
        raise _fail(source, "no section magic")
    (head_len,) = struct.unpack("<I", section[4:8])
    if 8 + head_len > len(section):
        raise _fail(source, "directory runs past the section")
    doc = json.loads(bytes(section[8 : 8 + head_len]))
    arrays = {}
    layout = doc["arrays"]
    if set(layout) != set(ARRAY_DTYPES):
        raise _fail(source, f"arrays {sorted(set(layout) ^ set(ARRAY_DTYPES))} missing or unknown")
    for name, (dtype, offset, count) in layout.items():
        allowed = (ARRAY_DTYPES[name], "<i4") if name in NARROWABLE else (ARRAY_DTYPES[name],)
        if dtype not in allowed or type(offset) is not int or type(count) is not int:
            raise _fail(source, f"array {name} is declared as {dtype!r} {offset!r} {count!r}")
        itemsize = np.dtype(dtype).itemsize
        if offset < 8 + head_len or count < 0 or offset + count * itemsize > len(section):
            raise _fail(source, f"array {name} lies outside the section")
        arrays[name] = np.frombuffer(section, dtype, count, offset)
    extra_at, extra_len = doc["extra"]
    if extra_at < 8 + head_len or extra_len < 0 or extra_at + extra_len > len(section):
        raise _fail(source, "extra pickle lies outside the section")
    fqns, paths = doc["fqns"], doc["paths"]
    if not all(type(f) is str for f in fqns):
        raise _fail(source, "an FQN is not a string")
    fqn_row = {f: i for i, f in enumerate(fqns)}
    if len(fqn_row) != len(fqns):
        raise _fail(source, "an FQN appears twice")
    for path in paths:
        check_relative_path(path, where=source)
    dtypes = [_torch_value(n, torch.dtype, source) for n in doc["dtypes"]]
    layouts = [_torch_value(n, torch.layout, source) for n in doc["layouts"]]
    formats = [_torch_value(n, torch.memory_format, source) for n in doc["memory_formats"]]
    descriptors = []
    for kind, values in doc["descriptors"]:
        if kind not in ("list", "tuple") or not all(type(v) is str for v in values):
            raise _fail(source, f"transform descriptors {values!r}")
        descriptors.append(list(values) if kind == "list" else tuple(values))
    starts = _check_arrays(arrays, len(fqns), len(paths), source, tables=(dtypes, layouts, formats))
    _check_ids(arrays["st_descriptors"], -1, len(descriptors), "st_descriptors", source)
    extra = load_metadata(section[extra_at : extra_at + extra_len], source=source)
    if extra.state_dict_metadata or extra.storage_data:
        raise _fail(source, "extra pickle holds entries")
    return MetadataColumns(
        fqns, fqn_row, paths, dtypes, layouts, formats, descriptors, arrays, *starts, extra
    )


def _torch_value(name: Any, kind: type, source: str) -> Any:
    value = getattr(torch, name, None) if type(name) is str else None
    if not isinstance(value, kind):
        raise _fail(source, f"{name!r} is not a torch {kind.__name__}")
    return value


def _check_ids(values: np.ndarray, low: int, high: int, name: str, source: str) -> None:
    if values.size and (values.min() < low or values.max() >= high):
        raise _fail(source, f"{name} outside [{low}, {high})")


# Storage rows checked at a time by `_check_rows`.
_BLOCK = 1 << 18


def _check_rows(a: dict, chunk_fqn: np.ndarray, first: int, stop: int, source: str) -> int:
    """Checks storage rows [first, stop): each names a chunk that names it back and belongs to
    its FQN, or a BYTE_IO FQN that names it back. Returns how many name a chunk."""
    st_chunk, st_fqn = a["st_chunk"][first:stop], a["st_fqn"][first:stop]
    on_chunk = st_chunk >= 0
    chunk_rows = np.flatnonzero(on_chunk)
    named = st_chunk[chunk_rows]
    if np.any(a["chunk_storage"][named] != chunk_rows + first) or np.any(
        chunk_fqn[named] != st_fqn[chunk_rows]
    ):
        raise _fail(source, "a storage row and its chunk do not name each other")
    if chunk_rows.size != stop - first:
        bytes_rows = np.flatnonzero(~on_chunk)
        if np.any(a["fqn_storage"][st_fqn[bytes_rows]] != bytes_rows + first):
            raise _fail(source, "a BYTE_IO storage row and its FQN do not name each other")
    return int(chunk_rows.size)


def _below(values: np.ndarray, low: int) -> bool:
    """True when some value is below `low` (one reduction, no temporary array)."""
    return bool(values.size and values.min() < low)


def _check_flags(flags: np.ndarray) -> bool:
    """True when a storage row has flags other than bit 0."""
    return bool(flags.size and flags.max() > 1)


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.size, np.int64)
    np.cumsum(values[:-1], out=out[1:])
    return out


def _check_arrays(a: dict, n: int, n_paths: int, source: str, tables: tuple) -> tuple:
    """Checks lengths, ranges and the chunk <-> storage bijection; returns (chunk_start,
    dims_start, size_start)."""
    for name in ARRAY_DTYPES:
        if name.startswith("fqn_") and a[name].size != n:
            raise _fail(source, f"{name} has {a[name].size} entries for {n} FQNs")
    kind, ndim, chunks = a["fqn_kind"], a["fqn_ndim"], a["fqn_chunks"]
    if kind.size and kind.max() > KIND_BYTES:
        raise _fail(source, "fqn_kind")
    tensor = kind == KIND_TENSOR
    for ids, table, name in zip(
        (a["fqn_dtype"], a["fqn_layout"], a["fqn_memory_format"]),
        tables,
        ("fqn_dtype", "fqn_layout", "fqn_memory_format"),
        strict=True,
    ):
        _check_ids(ids[tensor], 0, len(table), name, source)
    if (ndim < 0).any() or (chunks < 0).any() or (ndim[~tensor] != 0).any():
        raise _fail(source, "negative dimensions or chunk counts, or a BYTE_IO FQN with some")
    if (chunks[~tensor] != 0).any() or (a["fqn_storage"][tensor] != -1).any():
        raise _fail(source, "a BYTE_IO FQN with chunks, or a tensor with a BYTE_IO entry")
    n_chunks = int(chunks.sum())
    dims = chunks * ndim
    if a["size"].size != int(ndim.sum()) or _below(a["size"], 0):
        raise _fail(source, "size pool does not match fqn_ndim")
    for name in ("chunk_offsets", "chunk_sizes"):
        if a[name].size != int(dims.sum()) or _below(a[name], 0):
            raise _fail(source, f"{name} does not match fqn_chunks x fqn_ndim")
    s = a["st_fqn"].size
    for name in ARRAY_DTYPES:
        if name.startswith("st_") and a[name].size != s:
            raise _fail(source, f"{name} has {a[name].size} entries for {s} storage rows")
    if a["chunk_storage"].size != n_chunks:
        raise _fail(source, "chunk_storage does not match fqn_chunks")
    _check_ids(a["st_fqn"], 0, n, "st_fqn", source)
    _check_ids(a["st_path"], 0, n_paths, "st_path", source)
    _check_ids(a["st_chunk"], -1, n_chunks, "st_chunk", source)
    _check_ids(a["chunk_storage"], -1, s, "chunk_storage", source)
    _check_ids(a["fqn_storage"], -1, s, "fqn_storage", source)
    if _below(a["st_offset"], 0) or _below(a["st_length"], 0) or _check_flags(a["st_flags"]):
        raise _fail(source, "negative storage offsets or lengths, or unknown flags")
    chunk_fqn = np.repeat(np.arange(n, dtype=np.int32), chunks)
    chunk_rows = 0
    for first in range(0, s, _BLOCK):  # blocks: temporaries stay small and reused
        chunk_rows += _check_rows(a, chunk_fqn, first, min(s, first + _BLOCK), source)
    bytes_rows = s - chunk_rows
    if (
        np.count_nonzero(a["chunk_storage"] >= 0) != chunk_rows
        or np.count_nonzero(a["fqn_storage"] >= 0) != bytes_rows
    ):
        raise _fail(source, "chunks or FQNs name storage rows that do not name them")
    return _exclusive_cumsum(chunks), _exclusive_cumsum(dims), _exclusive_cumsum(ndim)
